package archive

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
)

// zstdInput is 2.6 frames of mixed text and random bytes.
func zstdInput() []byte {
	rng := rand.New(rand.NewPCG(1, 2))
	var b bytes.Buffer
	for b.Len() < zstdFrameSize*26/10 {
		if rng.IntN(3) == 0 {
			chunk := make([]byte, 1+rng.IntN(64<<10))
			for i := range chunk {
				chunk[i] = byte(rng.Uint32())
			}
			b.Write(chunk)
		} else {
			fmt.Fprintf(&b, "line %d of a log that compresses well\n", b.Len())
		}
	}
	return b.Bytes()
}

// produce writes data into p in uneven pieces, then closes it with end.
func produce(p *zstdPipe, data []byte, end error) chan error {
	res := make(chan error, 1)
	go func() {
		var err error
		for off, step := 0, 1; off < len(data) && err == nil; step = step*7%100_003 + 1 {
			k := min(step, len(data)-off)
			_, err = p.Write(data[off : off+k])
			off += k
		}
		if err == nil {
			err = end
		}
		p.CloseWithError(err)
		res <- err
	}()
	return res
}

func decodeZstd(t *testing.T, b []byte) []byte {
	t.Helper()
	d, err := zstd.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	out, err := io.ReadAll(d)
	if err != nil {
		t.Fatalf("decode: %v", err)
	}
	return out
}

// TestZstdPipeFrames: what goes in comes out of a standard decoder, as
// several frames, whether the consumer uses WriteTo or small Reads.
func TestZstdPipeFrames(t *testing.T) {
	data := zstdInput()
	for _, mode := range []string{"WriteTo", "Read"} {
		p, err := newZstdPipe(zstd.SpeedDefault)
		if err != nil {
			t.Fatal(err)
		}
		res := produce(p, data, nil)
		var out bytes.Buffer
		if mode == "WriteTo" {
			_, err = p.WriteTo(&out)
		} else {
			_, err = io.CopyBuffer(&out, struct{ io.Reader }{p}, make([]byte, 777))
		}
		if err != nil {
			t.Fatalf("%s: %v", mode, err)
		}
		if err := <-res; err != nil {
			t.Fatalf("%s: producer: %v", mode, err)
		}
		if got := decodeZstd(t, out.Bytes()); !bytes.Equal(got, data) {
			t.Fatalf("%s: decoded %d bytes, want the %d written", mode, len(got), len(data))
		}
		if frames := countFrames(t, out.Bytes()); frames != 3 {
			t.Errorf("%s: %d frames, want 3 (2.6 × zstdFrameSize)", mode, frames)
		}
	}
}

// countFrames walks the frames of a zstd stream by their headers and
// block sizes.
func countFrames(t *testing.T, b []byte) int {
	t.Helper()
	n := 0
	for len(b) > 0 {
		var h zstd.Header
		if err := h.Decode(b); err != nil {
			t.Fatalf("frame %d: %v", n, err)
		}
		b = b[h.HeaderSize:]
		for last := false; !last; {
			bh := uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16
			last = bh&1 == 1
			size := int(bh >> 3)
			if (bh>>1)&3 == 1 { // RLE: one byte stored
				size = 1
			}
			b = b[3+size:]
		}
		if h.HasCheckSum {
			b = b[4:]
		}
		n++
	}
	return n
}

// TestZstdPipeEmpty: no bytes in is one empty frame out.
func TestZstdPipeEmpty(t *testing.T) {
	p, err := newZstdPipe(zstd.SpeedDefault)
	if err != nil {
		t.Fatal(err)
	}
	p.CloseWithError(nil)
	out, err := io.ReadAll(p)
	if err != nil || len(out) == 0 {
		t.Fatalf("ReadAll = %d bytes, %v; want one empty frame", len(out), err)
	}
	if got := decodeZstd(t, out); len(got) != 0 {
		t.Fatalf("decoded %d bytes, want none", len(got))
	}
}

// TestZstdPipeErrors: the producer's error reaches the consumer after the
// data; a consumer that stops makes the producer fail, never hang.
func TestZstdPipeErrors(t *testing.T) {
	data := zstdInput()
	boom := errors.New("walk failed")
	p, _ := newZstdPipe(zstd.SpeedDefault)
	res := produce(p, data[:zstdFrameSize+10], boom)
	if _, err := p.WriteTo(io.Discard); !errors.Is(err, boom) {
		t.Fatalf("WriteTo after a producer error = %v, want it", err)
	}
	<-res

	p, _ = newZstdPipe(zstd.SpeedDefault)
	// Far more frames than the pipe queues (2×workers+2), so that the
	// producer must meet the stop in a Write.
	res = produce(p, bytes.Repeat(data, 6), nil)
	if _, err := p.WriteTo(failingWriter{}); err == nil || err.Error() != "disk full" {
		t.Fatalf("WriteTo into a failing writer = %v, want its error", err)
	}
	select {
	case err := <-res:
		if !errors.Is(err, errConsumerGone) {
			t.Fatalf("producer after the consumer stopped = %v, want errConsumerGone", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the producer hangs after the consumer stopped")
	}
}

// failingWriter fails every write, as a full disk does.
type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }
