package engine

import (
	"fmt"

	"github.com/klauspost/compress/zstd"
)

// chunkLevel, chunkNoEntropy and packLevel are measured choices (doc.go).
var (
	chunkLevel     = zstd.SpeedFastest
	chunkNoEntropy = true
	packLevel      = zstd.SpeedBetterCompression
)

// newChunkEncoder returns a zstd encoder for chunks (pack false) or packs of
// small files: one frame per call of EncodeAll, a window of maxChunk (a
// chunk is never larger), no frame checksum (a restore checks each chunk's
// SHA-256, which says more than zstd's 32-bit xxhash).
func newChunkEncoder(pack bool) (*zstd.Encoder, error) {
	level, noEntropy := chunkLevel, chunkNoEntropy
	if pack {
		level, noEntropy = packLevel, false
	}
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(level), zstd.WithEncoderConcurrency(1),
		zstd.WithLowerEncoderMem(true), zstd.WithWindowSize(maxChunk), zstd.WithNoEntropyCompression(noEntropy),
		zstd.WithEncoderCRC(false))
	if err != nil {
		return nil, fmt.Errorf("chunk encoder: %w", err)
	}
	return enc, nil
}
