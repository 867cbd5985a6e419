package engine

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"testing"

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
		c, err := newChunker()
		if err != nil {
			b.Fatal(err)
		}
		b.SetBytes(int64(len(data)))
		n := 0
		for b.Loop() {
			c.reset(bytes.NewReader(data))
			for {
				_, err := c.next()
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					b.Fatal(err)
				}
				n++
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
