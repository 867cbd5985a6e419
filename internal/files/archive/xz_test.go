package archive

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ulikunitz/xz"
)

// The files in testdata/xz were written by XZ Utils 5.4.1 from
// testdata/xz/input.bin (streams.xz: its first 30,000 bytes and the rest,
// as two streams with 8 bytes of stream padding between them):
//
//	xz -6 (default.xz), xz -9e (level9e.xz, 64 MiB dictionary),
//	xz -T2 --block-size=8KiB (blocks.xz: 7 blocks, sizes in headers),
//	xz -C none|crc32|sha256 (check-*.xz), xz --lzma2=dict=4KiB (dict4k.xz),
//	xz --lzma2=dict=96MiB (dict96m.xz), xz < /dev/null (empty.xz);
//	blocks.tar.xz: xz -T2 --block-size=16KiB of a tar holding input.bin as
//	world/notes.bin (as testdata/long27.tar.zst and long28.tar.zst hold it,
//	made with zstd -19 --long=27 and --long=28 from a pipe).

func readXZ(t *testing.T, b []byte) ([]byte, error) {
	t.Helper()
	x, err := newXZReader(bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	return io.ReadAll(x)
}

func TestXZReaderReadsXZUtilsFiles(t *testing.T) {
	input, err := os.ReadFile("testdata/xz/input.bin")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"default", "level9e", "blocks", "check-none", "check-crc32", "check-sha256", "streams", "dict4k", "empty"} {
		t.Run(name, func(t *testing.T) {
			b, err := os.ReadFile(filepath.Join("testdata/xz", name+".xz"))
			if err != nil {
				t.Fatal(err)
			}
			want := input
			if name == "empty" {
				want = nil
			}
			got, err := readXZ(t, b)
			if err != nil {
				t.Fatalf("read %s.xz: %v", name, err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("read %s.xz: %d bytes, want the %d of input.bin", name, len(got), len(want))
			}
		})
	}
}

// TestXZReaderReadsUlikunitz: what the library's writer makes (other
// block sizes, its own choices) reads back too.
func TestXZReaderReadsUlikunitz(t *testing.T) {
	input, err := os.ReadFile("testdata/xz/input.bin")
	if err != nil {
		t.Fatal(err)
	}
	for _, cfg := range []xz.WriterConfig{
		{}, {BlockSize: 1000}, {CheckSum: xz.None}, {CheckSum: xz.CRC32}, {CheckSum: xz.SHA256}, {DictCap: 1 << 20, BlockSize: 5000},
	} {
		var buf bytes.Buffer
		w, err := cfg.NewWriter(&buf)
		if err != nil {
			t.Fatal(err)
		}
		w.Write(input)
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		got, err := readXZ(t, buf.Bytes())
		if err != nil || !bytes.Equal(got, input) {
			t.Errorf("read ulikunitz/xz %+v: %d bytes, %v; want %d bytes", cfg, len(got), err, len(input))
		}
	}
}

// TestXZReaderDetectsCorruption flips every byte of a small two-stream,
// multi-block file in turn: each flip is an error or, for a flip in an
// LZMA2 chunk's packed size that the decoder does not need (it stops where
// the chunk's data ends, as ulikunitz/xz always did), the same data; never
// other data.
func TestXZReaderDetectsCorruption(t *testing.T) {
	var buf bytes.Buffer
	for _, part := range []string{strings.Repeat("kiln ", 300), "second stream"} {
		w, _ := xz.WriterConfig{BlockSize: 400}.NewWriter(&buf)
		w.Write([]byte(part))
		w.Close()
	}
	good := buf.Bytes()
	want, err := readXZ(t, good)
	if err != nil {
		t.Fatal(err)
	}
	for i := range good {
		b := bytes.Clone(good)
		b[i] ^= 0x55
		got, err := readXZ(t, b)
		if err == nil && !bytes.Equal(got, want) {
			t.Fatalf("byte %d flipped: read %d bytes without an error, different data", i, len(got))
		}
	}
	for _, n := range []int{0, 5, 12, 13, len(good) / 2, len(good) - 1} {
		if _, err := readXZ(t, good[:n]); err == nil {
			t.Errorf("cut at %d of %d bytes: no error", n, len(good))
		}
	}
}

// xzWithDict is an .xz stream whose one block declares dictionary code
// bits (40: 4 GiB, 37: 1.5 GiB) and holds a few bytes: xz's header, a
// block header, LZMA2 data of one uncompressed chunk, the check, index and
// footer, all with valid checksums.
func xzWithDict(bits byte, content string) []byte {
	le := binary.LittleEndian
	var out []byte
	flags := []byte{0, 0x01} // CRC32 check
	out = append(out, xzMagic...)
	out = append(out, flags...)
	out = le.AppendUint32(out, crc32.ChecksumIEEE(flags))

	hdr := []byte{0x02, 0x00, lzma2Filter, 0x01, bits, 0, 0, 0} // size byte: (2+1)*4 = 12 bytes with the CRC
	hdr = le.AppendUint32(hdr, crc32.ChecksumIEEE(hdr))
	out = append(out, hdr...)
	data := []byte{0x01, byte((len(content) - 1) >> 8), byte(len(content) - 1)} // uncompressed chunk, dictionary reset
	data = append(data, content...)
	data = append(data, 0x00) // end of LZMA2 data
	out = append(out, data...)
	unpadded := len(hdr) + len(data) + 4
	for n := len(hdr) + len(data); n%4 != 0; n++ {
		out = append(out, 0) // block padding
	}
	out = le.AppendUint32(out, crc32.ChecksumIEEE([]byte(content)))

	index := []byte{0x00, 0x01}
	index = binary.AppendUvarint(index, uint64(unpadded))
	index = binary.AppendUvarint(index, uint64(len(content)))
	for len(index)%4 != 0 {
		index = append(index, 0)
	}
	index = le.AppendUint32(index, crc32.ChecksumIEEE(index))
	out = append(out, index...)

	footer := le.AppendUint32(nil, uint32(len(index)/4-1))
	footer = append(footer, flags...)
	out = le.AppendUint32(out, crc32.ChecksumIEEE(footer))
	out = append(out, footer...)
	return append(out, 'Y', 'Z')
}

func TestXZWithDictHelper(t *testing.T) {
	got, err := readXZ(t, xzWithDict(0, "hello"))
	if err != nil || string(got) != "hello" {
		t.Fatalf("read xzWithDict(4 KiB) = %q, %v; want hello", got, err)
	}
	// The library's own reader agrees the helper's stream is valid.
	r, err := xz.NewReader(bytes.NewReader(xzWithDict(0, "hello")))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := io.ReadAll(r); err != nil || string(got) != "hello" {
		t.Fatalf("xz.NewReader(xzWithDict(4 KiB)) = %q, %v", got, err)
	}
}

func TestXZDictionaryLimit(t *testing.T) {
	for _, tc := range []struct {
		name string
		data func(t *testing.T) []byte
		want string // "" for no error
	}{
		{"64 MiB (xz -9)", func(*testing.T) []byte { return xzWithDict(28, "ok") }, ""},
		{"96 MiB", func(*testing.T) []byte { return xzWithDict(29, "x") },
			"the archive's xz dictionary is 96 MiB; at most 64 MiB is allowed"},
		{"1.5 GiB", func(*testing.T) []byte { return xzWithDict(37, "x") },
			"the archive's xz dictionary is 1.5 GiB; at most 64 MiB is allowed"},
		{"4 GiB", func(*testing.T) []byte { return xzWithDict(40, "x") },
			"the archive's xz dictionary is 4 GiB; at most 64 MiB is allowed"},
		{"xz --lzma2=dict=96MiB", func(t *testing.T) []byte {
			b, err := os.ReadFile("testdata/xz/dict96m.xz")
			if err != nil {
				t.Fatal(err)
			}
			return b
		}, "the archive's xz dictionary is 96 MiB; at most 64 MiB is allowed"},
		{"second stream", func(*testing.T) []byte {
			return append(xzWithDict(0, "first"), xzWithDict(37, "second")...)
		}, "the archive's xz dictionary is 1.5 GiB; at most 64 MiB is allowed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := readXZ(t, tc.data(t))
			if tc.want == "" {
				if err != nil {
					t.Fatalf("read = %v, want no error", err)
				}
				return
			}
			ee, ok := errors.AsType[*EntryError](err)
			if !ok || err.Error() != tc.want || !errors.Is(err, ErrUnsupported) {
				t.Fatalf("read = %v (%T), want %q", err, err, tc.want)
			}
			if ee.Name != "" {
				t.Errorf("EntryError.Name = %q, want none", ee.Name)
			}
		})
	}
}

// TestXZDictionarySlack: many blocks declaring large dictionaries for
// little data stop once they ask for more than the slack plus twice what
// was decoded.
func TestXZDictionarySlack(t *testing.T) {
	var b []byte
	for range 20 {
		b = append(b, xzWithDict(28, "tiny")...) // 64 MiB each
	}
	x, err := newXZReader(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	x.maxDict, x.slack = 64<<20, 256<<20 // lowered from 512 MiB: four blocks pass, the fifth is refused
	got, err := io.ReadAll(x)
	const want = "the archive's xz blocks ask for 320 MiB of dictionaries to decode 16 bytes; at most 256 MiB plus twice the size decoded is allowed"
	if err == nil || err.Error() != want {
		t.Fatalf("read = %v, want %q", err, want)
	}
	if string(got) != strings.Repeat("tiny", 4) {
		t.Errorf("read %q before the refusal, want four blocks", got)
	}
}

// FuzzXZReader: on any input the reader ends in data or an error, never
// a panic; whatever it accepts, the library's reader reads the same; a
// dictionary over the limit is refused. Seeds: files of XZ Utils, and the
// headers that asked for 1.5 and 4 GiB.
func FuzzXZReader(f *testing.F) {
	for _, name := range []string{"default", "blocks", "check-none", "check-sha256", "streams", "empty"} {
		b, err := os.ReadFile(filepath.Join("testdata/xz", name+".xz"))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add(xzWithDict(37, "1.5 GiB dictionary"))
	f.Add(xzWithDict(40, "4 GiB dictionary"))
	f.Add(append(xzWithDict(0, "a"), xzWithDict(40, "b")...))
	f.Fuzz(func(t *testing.T, b []byte) {
		x, err := newXZReader(bytes.NewReader(b))
		if err != nil {
			return
		}
		got, err := io.ReadAll(x)
		if err != nil {
			if _, ok := errors.AsType[*EntryError](err); ok && x.allocated > x.slack+2*x.decoded+xzMaxDict {
				t.Fatalf("refused after allocating %d bytes of dictionaries", x.allocated)
			}
			return
		}
		r, err := xz.NewReader(bytes.NewReader(b))
		if err != nil {
			t.Fatalf("accepted %d bytes that xz.NewReader refuses: %v", len(b), err)
		}
		want, err := io.ReadAll(r)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("read %d bytes; the library read %d, %v", len(got), len(want), err)
		}
	})
}
