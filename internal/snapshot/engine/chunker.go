package engine

import (
	"errors"
	"fmt"
	"io"

	chunkers "github.com/PlakarKorp/go-cdc-chunkers"
	_ "github.com/PlakarKorp/go-cdc-chunkers/chunkers/fastcdc" // registers "fastcdc-v1.0.0"
)

// Chunk sizes (see doc.go): FastCDC cuts after minChunk bytes at the
// earliest, aims at avgChunk, and cuts at maxChunk at the latest.
const (
	minChunk = 256 << 10
	avgChunk = 1 << 20
	maxChunk = 4 << 20
	// chunkAlgorithm is the go-cdc-chunkers name of the cutter. Its gear
	// table is the library's fixed one (no key), so the same bytes are cut
	// at the same places in every snapshot and on every node: that is
	// what makes chunks of an unchanged region file dedupe.
	chunkAlgorithm = "fastcdc-v1.0.0"
)

// chunker cuts one stream after another into content-defined chunks. It
// owns a scan buffer of maxChunk bytes, reused for every stream; the
// chunks Next returns alias it and are valid until the next call.
type chunker struct {
	c   *chunkers.Chunker
	buf []byte
}

func newChunker() (*chunker, error) {
	buf := make([]byte, 2*maxChunk)
	c, err := chunkers.NewChunkerBuffer(chunkAlgorithm, eofReader{}, chunkOptions(), buf)
	if err != nil {
		return nil, fmt.Errorf("chunker: %w", err)
	}
	return &chunker{c: c, buf: buf}, nil
}

func chunkOptions() *chunkers.ChunkerOpts {
	return &chunkers.ChunkerOpts{MinSize: minChunk, NormalSize: avgChunk, MaxSize: maxChunk}
}

// reset starts cutting r.
func (c *chunker) reset(r io.Reader) { c.c.Reset(r) }

// next returns the next chunk of the stream, or io.EOF once it is
// exhausted (never an empty chunk).
func (c *chunker) next() ([]byte, error) {
	for {
		b, err := c.c.Next()
		switch {
		case err != nil && !errors.Is(err, io.EOF):
			return nil, err
		case len(b) > 0:
			// The library reports io.EOF with the last (short) chunk; the
			// next call reports it again with nothing.
			return b, nil
		case err != nil:
			return nil, io.EOF
		}
	}
}

// eofReader is an empty stream (the chunker's before its first reset).
type eofReader struct{}

func (eofReader) Read([]byte) (int, error) { return 0, io.EOF }
