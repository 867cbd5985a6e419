package engine

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"slices"
	"testing"

	chunkers "github.com/PlakarKorp/go-cdc-chunkers"
	"github.com/PlakarKorp/go-cdc-chunkers/chunkers/fastcdc" // registers "fastcdc-v1.0.0"
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

// BenchmarkChunker measures the chunker on one core (run with -cpu 1):
// cutting 256 MiB into chunks of ~1 MiB, reading from memory. The
// numbers, and those of the candidate it was chosen over, are in doc.go.
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
		"min":           random(MinChunk),
		"min+1":         random(MinChunk + 1),
		"avg":           random(AvgChunk),
		"max":           random(MaxChunk),
		"max+1":         random(MaxChunk + 1),
		"random 40 MiB": random(40 << 20),
		"zeros":         make([]byte, 3*MaxChunk+12345),
		"pattern":       bytes.Repeat(random(4096), 3000),
	}
	for name, data := range streams {
		t.Run(name, func(t *testing.T) {
			c, err := chunkers.NewChunker(chunkAlgorithm, bytes.NewReader(data),
				&chunkers.ChunkerOpts{MinSize: MinChunk, NormalSize: AvgChunk, MaxSize: MaxChunk})
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

// cutPointOneChain is cutPoint as the library computes it: one
// fingerprint, byte after byte.
func cutPointOneChain(data []byte) int {
	n := len(data)
	normal := AvgChunk
	switch {
	case n <= MinChunk:
		return n
	case n >= MaxChunk:
		n = MaxChunk
	case n <= normal:
		normal = n
	}
	data = data[:n]
	var fp uint64
	i := MinChunk
	for ; i < normal; i++ {
		fp = fp<<1 + fastcdc.G[data[i]]
		if fp&maskS == 0 {
			return i
		}
	}
	for ; i < n; i++ {
		fp = fp<<1 + fastcdc.G[data[i]]
		if fp&maskL == 0 {
			return i
		}
	}
	return i
}

// TestFirstCutTwoChains: the two chains of firstCut cut where one chain
// does, over thousands of chunks of random streams of every length around
// the sizes (a cut in either half, in both, at their border, none), and
// for ranges of every short length, where the fingerprint's warm-up
// starts at minChunk.
func TestFirstCutTwoChains(t *testing.T) {
	r := rand.NewChaCha8([32]byte{'t', 'w', 'o'})
	data := make([]byte, 64<<20)
	_, _ = r.Read(data)
	cuts := 0
	for rest := data; len(rest) > 0; cuts++ {
		got, want := cutPoint(rest), cutPointOneChain(rest)
		if got != want {
			t.Fatalf("chunk %d: cut at %d, one chain at %d", cuts, got, want)
		}
		rest = rest[got:]
	}
	rng := rand.New(rand.NewPCG(1, 2))
	// 400 slices at random offsets and lengths (each cut twice): 3,000
	// took two minutes of the suite under -race, for cuts the 64 MiB pass
	// above and the ranges below already compare.
	for range 400 {
		n := MinChunk + rng.IntN(MaxChunk+1000-MinChunk)
		off := rng.IntN(len(data) - n)
		if got, want := cutPoint(data[off:off+n]), cutPointOneChain(data[off:off+n]); got != want {
			t.Fatalf("%d bytes at %d: cut at %d, one chain at %d", n, off, got, want)
		}
	}
	// Every mask and range: firstCut against one chain, for every short
	// length up to and past the two chains' threshold, and long ranges
	// with masks that cut often (a cut in both halves, in the second
	// only).
	for _, mask := range []uint64{maskS, maskL, 0xff, 0x3, 0xfff, 0xffff} {
		for n := 1; n < 1200 || n < 200000 && mask > 0xff; n += 7 + n/2 {
			lo := MinChunk + rng.IntN(200)
			var fp uint64
			want := lo + n
			for i := MinChunk; i < lo+n; i++ {
				fp = fp<<1 + fastcdc.G[data[i]]
				if i >= lo && fp&mask == 0 {
					want = i
					break
				}
			}
			if got := firstCut(data, lo, lo+n, mask); got != want {
				t.Fatalf("mask %#x, [%d, %d): cut at %d, one chain at %d", mask, lo, lo+n, got, want)
			}
		}
	}
	t.Logf("%d chunks compared", cuts)
}
