package engine

import (
	"fmt"

	"github.com/klauspost/compress/zstd"
)

// chunkLevel, chunkNoEntropy and packLevel are measured choices (doc.go).
var (
	chunkLevel     = zstd.SpeedFastest
	chunkNoEntropy = true
	packLevel      = zstd.SpeedDefault
)

// newChunkEncoder returns a zstd encoder for chunks (pack false) or packs of
// small files: one frame per call of EncodeAll, a window of maxChunk (a
// chunk is never larger).
func newChunkEncoder(pack bool) (*zstd.Encoder, error) {
	level, noEntropy := chunkLevel, chunkNoEntropy
	if pack {
		level, noEntropy = packLevel, false
	}
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(level), zstd.WithEncoderConcurrency(1),
		zstd.WithLowerEncoderMem(true), zstd.WithWindowSize(maxChunk), zstd.WithNoEntropyCompression(noEntropy))
	if err != nil {
		return nil, fmt.Errorf("chunk encoder: %w", err)
	}
	return enc, nil
}
