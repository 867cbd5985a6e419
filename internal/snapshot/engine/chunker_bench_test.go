package engine

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"slices"
	"testing"

	chunkers "github.com/PlakarKorp/go-cdc-chunkers"
	_ "github.com/PlakarKorp/go-cdc-chunkers/chunkers/fastcdc" // registers "fastcdc-v1.0.0"
	restic "github.com/restic/chunker"
)

// benchData is 256 MiB of pseudo-random bytes (deterministic), the
// worst case for a chunker: no run of equal bytes helps it.
func benchData(b *testing.B) []byte {
	b.Helper()
	data := make([]byte, 256<<20)
	r := rand.NewChaCha8([32]byte{'k', 'i', 'l', 'n'})
	_, _ = r.Read(data)
	return data
}

// BenchmarkChunker measures the two candidates on one core (run with
// -cpu 1): cutting 256 MiB into chunks of ~1 MiB, reading from memory.
// The numbers and the choice are in doc.go.
func BenchmarkChunker(b *testing.B) {
	data := benchData(b)
	b.Run("fastcdc", func(b *testing.B) {
		// As Create cuts: in place, in the buffer the file was read into.
		b.SetBytes(int64(len(data)))
		n := 0
		for b.Loop() {
			for rest := data; len(rest) > 0; n++ {
				rest = rest[cutPoint(rest):]
			}
		}
		b.ReportMetric(float64(len(data))*float64(b.N)/float64(n), "B/chunk")
	})
	b.Run("restic", func(b *testing.B) {
		// restic's defaults: 512 KiB to 8 MiB, 1 MiB on average (20 bits).
		const pol = restic.Pol(0x3DA3358B4DC173)
		buf := make([]byte, 8<<20)
		c := restic.New(bytes.NewReader(nil), pol)
		b.SetBytes(int64(len(data)))
		n := 0
		for b.Loop() {
			c.Reset(bytes.NewReader(data), pol)
			for {
				ch, err := c.Next(buf)
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					b.Fatal(err)
				}
				buf = ch.Data
				n++
			}
		}
		b.ReportMetric(float64(len(data))*float64(b.N)/float64(n), "B/chunk")
	})
}

// TestCutPointMatchesLibrary: cutPoint cuts where go-cdc-chunkers'
// fastcdc-v1.0.0 does with our sizes, so the chunks of a store made before
// the engine cut in place still dedupe. Streams of random bytes (every
// size class), of zeros (cut at maxChunk) and of a repeating pattern.
func TestCutPointMatchesLibrary(t *testing.T) {
	r := rand.NewChaCha8([32]byte{'c', 'u', 't'})
	random := func(n int) []byte {
		b := make([]byte, n)
		_, _ = r.Read(b)
		return b
	}
	streams := map[string][]byte{
		"empty":         nil,
		"one byte":      {7},
		"min":           random(minChunk),
		"min+1":         random(minChunk + 1),
		"avg":           random(avgChunk),
		"max":           random(maxChunk),
		"max+1":         random(maxChunk + 1),
		"random 40 MiB": random(40 << 20),
		"zeros":         make([]byte, 3*maxChunk+12345),
		"pattern":       bytes.Repeat(random(4096), 3000),
	}
	for name, data := range streams {
		t.Run(name, func(t *testing.T) {
			c, err := chunkers.NewChunker(chunkAlgorithm, bytes.NewReader(data),
				&chunkers.ChunkerOpts{MinSize: minChunk, NormalSize: avgChunk, MaxSize: maxChunk})
			if err != nil {
				t.Fatal(err)
			}
			var want []int
			for {
				b, err := c.Next()
				if len(b) > 0 {
					want = append(want, len(b))
				}
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			var got []int
			for rest := data; len(rest) > 0; rest = rest[got[len(got)-1]:] {
				got = append(got, cutPoint(rest))
			}
			if !slices.Equal(got, want) {
				t.Errorf("cutPoint cuts %d chunks %v, the library %d chunks %v", len(got), head(got), len(want), head(want))
			}
		})
	}
}

func head(s []int) []int { return s[:min(len(s), 8)] }
