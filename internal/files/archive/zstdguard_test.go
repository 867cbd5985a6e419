package archive

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"testing"
	"testing/iotest"

	"github.com/klauspost/compress/zstd"
)

// zstdFrameOf is a zstd frame declaring window w (a window
// descriptor) with one raw block holding content.
func zstdFrameOf(wd byte, content string) []byte {
	b := binary.LittleEndian.AppendUint32(nil, zstdFrameMagic)
	b = append(b, 0x00, wd)          // no checksum, not single-segment, no dictionary, no content size
	h := uint32(len(content))<<3 | 1 // last, raw
	b = append(b, byte(h), byte(h>>8), byte(h>>16))
	return append(b, content...)
}

// zstdSingleSegment is a single-segment frame whose content size field
// (8 bytes) says size, holding content as one raw block.
func zstdSingleSegment(size uint64, content string) []byte {
	b := binary.LittleEndian.AppendUint32(nil, zstdFrameMagic)
	b = append(b, 0xE0) // 8-byte content size, single segment
	b = binary.LittleEndian.AppendUint64(b, size)
	h := uint32(len(content))<<3 | 1
	b = append(b, byte(h), byte(h>>8), byte(h>>16))
	return append(b, content...)
}

// zstdEncoded compresses data with the options given, one frame per call.
func zstdEncoded(t testing.TB, data []byte, opts ...zstd.EOption) []byte {
	t.Helper()
	var buf bytes.Buffer
	w, err := zstd.NewWriter(&buf, opts...)
	if err != nil {
		t.Fatal(err)
	}
	w.Write(data)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// readGuarded reads b through a guard of limit max, one byte at a time
// as well as at once, and returns what passed and the guard's state.
func readGuarded(t *testing.T, b []byte, max uint64) ([]byte, *zstdGuard, error) {
	t.Helper()
	g1 := newZstdGuard(iotest.OneByteReader(bytes.NewReader(b)), max)
	got1, err1 := io.ReadAll(g1)
	g := newZstdGuard(bytes.NewReader(b), max)
	got, err := io.ReadAll(g)
	if !bytes.Equal(got, got1) || (err == nil) != (err1 == nil) || g.state != g1.state {
		t.Fatalf("guard byte by byte: %d bytes, %v, state %d; at once: %d bytes, %v, state %d", len(got1), err1, g1.state, len(got), err, g.state)
	}
	return got, g, err
}

// TestZstdGuardFollowsFrames: what the encoder writes (several frames,
// checksums, RLE and raw blocks, skippable frames, content sizes) passes
// whole, and the guard ends at a frame boundary, never lost.
func TestZstdGuardFollowsFrames(t *testing.T) {
	text := bytes.Repeat([]byte("a world of blocks "), 20000)
	random := make([]byte, 300<<10)
	for i := range random {
		random[i] = byte(i*7919 + i>>3)
	}
	var stream []byte
	stream = append(stream, zstdEncoded(t, text)...)
	stream = append(stream, zstdEncoded(t, random, zstd.WithEncoderCRC(false), zstd.WithEncoderLevel(zstd.SpeedFastest))...)
	stream = append(stream, zstdEncoded(t, make([]byte, 1<<20), zstd.WithWindowSize(1<<20))...) // RLE blocks
	stream = append(stream, zstdEncoded(t, text[:100], zstd.WithSingleSegment(true))...)
	stream = append(stream, zstdEncoded(t, nil)...)
	skippable := binary.LittleEndian.AppendUint32(nil, zstdSkippableMagic|7)
	skippable = binary.LittleEndian.AppendUint32(skippable, 5)
	stream = append(stream, append(skippable, "kiln!"...)...)
	stream = append(stream, zstdEncoded(t, text, zstd.WithWindowSize(zstdMaxWindow))...)

	got, g, err := readGuarded(t, stream, zstdMaxWindow)
	if err != nil || !bytes.Equal(got, stream) {
		t.Fatalf("guard passed %d of %d bytes, %v", len(got), len(stream), err)
	}
	if g.state != zstdMagic || g.have != 0 {
		t.Errorf("guard ended in state %d with %d header bytes, want between frames", g.state, g.have)
	}
	dec, _ := zstd.NewReader(nil)
	defer dec.Close()
	if _, err := dec.DecodeAll(stream, nil); err != nil {
		t.Fatalf("the stream itself does not decode: %v", err)
	}
}

func TestZstdGuardRefuses(t *testing.T) {
	for _, tc := range []struct {
		name   string
		data   []byte
		passed int // bytes that reach the decoder
		want   string
	}{
		{"2 GiB window", zstdFrameOf(21<<3, "x"), 5,
			"the archive's zstd window is 2 GiB; at most 128 MiB is allowed"},
		{"3.75 TiB window", zstdFrameOf(0xFF, "x"), 5,
			"the archive's zstd window is 3.8 TiB; at most 128 MiB is allowed"},
		{"160 MiB window", zstdFrameOf(17<<3|2, "x"), 5,
			"the archive's zstd window is 160 MiB; at most 128 MiB is allowed"},
		{"single segment of 1 TiB", zstdSingleSegment(1<<40, "x"), 12,
			"the archive's zstd window is 1 TiB; at most 128 MiB is allowed"},
		{"second frame", append(zstdFrameOf(10<<3, "ok"), zstdFrameOf(21<<3, "x")...), 11 + 5,
			"the archive's zstd window is 2 GiB; at most 128 MiB is allowed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, _, err := readGuarded(t, tc.data, zstdMaxWindow)
			if err == nil || err.Error() != tc.want || !errors.Is(err, ErrUnsupported) {
				t.Fatalf("guard = %v, want %q", err, tc.want)
			}
			if len(got) != tc.passed {
				t.Errorf("guard passed %d bytes, want %d (the header but its last byte)", len(got), tc.passed)
			}
		})
	}
	// 128 MiB itself passes.
	if _, _, err := readGuarded(t, zstdFrameOf(17<<3, "x"), zstdMaxWindow); err != nil {
		t.Errorf("128 MiB window: %v", err)
	}
}

// TestZstdGuardBeforeTheDecoder: through the decoder, a frame asking for
// 2 GiB fails with the guard's refusal, not the decoder's own error.
func TestZstdGuardBeforeTheDecoder(t *testing.T) {
	for _, data := range [][]byte{
		zstdFrameOf(21<<3, "x"),
		append(zstdEncoded(t, []byte("first frame")), zstdFrameOf(21<<3, "x")...),
		zstdSingleSegment(1<<40, "x"),
	} {
		g := newZstdGuard(bytes.NewReader(data), zstdMaxWindow)
		zr, err := zstd.NewReader(g, zstd.WithDecoderMaxWindow(zstdMaxWindow), zstd.WithDecoderConcurrency(0))
		if err != nil {
			t.Fatal(err)
		}
		_, err = io.ReadAll(zstdGuarded{zr, g})
		zr.Close()
		if _, ok := errors.AsType[*EntryError](err); !ok {
			t.Errorf("decode = %v, want the guard's refusal", err)
		}
	}
}

// FuzzZstdGuard: the guard passes the input unchanged up to a refusal, and
// refuses a frame only when klauspost's own header parser reads a window
// over the limit there. Seeds: encoder output and the 2 GiB header.
func FuzzZstdGuard(f *testing.F) {
	f.Add(zstdEncoded(f, bytes.Repeat([]byte("seed "), 1000)))
	f.Add(zstdFrameOf(21<<3, "x"))
	f.Add(zstdSingleSegment(1<<40, "x"))
	f.Add(append(zstdFrameOf(10<<3, "ok"), zstdFrameOf(0xFF, "x")...))
	f.Fuzz(func(t *testing.T, b []byte) {
		g := newZstdGuard(bytes.NewReader(b), 1<<20)
		got, err := io.ReadAll(g)
		if !bytes.HasPrefix(b, got) {
			t.Fatalf("the guard changed the bytes")
		}
		if err == nil {
			if len(got) != len(b) {
				t.Fatalf("passed %d of %d bytes without an error", len(got), len(b))
			}
			return
		}
		// The refused frame is the one the guard was in.
		start := int(g.frame)
		if start+4 > len(got) || !bytes.Equal(b[start:start+4], binary.LittleEndian.AppendUint32(nil, zstdFrameMagic)) {
			t.Fatalf("refused (%v) with no frame magic at %d", err, start)
		}
		var h zstd.Header
		if herr := h.Decode(b[start:]); herr != nil {
			return // klauspost reads something else there (the magic inside data the guard skipped?)
		}
		window := h.WindowSize
		if h.SingleSegment {
			window = max(h.FrameContentSize, zstdMinWindow)
		}
		if window <= 1<<20 {
			t.Fatalf("refused %v, but the header at %d declares a window of %d", err, start, window)
		}
	})
}
