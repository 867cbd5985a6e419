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
// small files: one frame per call of EncodeAll, no frame checksum (a
// restore checks each chunk's SHA-256, which says more than zstd's 32-bit
// xxhash). A chunk's window is maxChunk (a chunk is never larger); a
// pack's is 1 MiB, which halves its encoder's memory and costs nothing
// measurable (its files are small: what repeats is near).
func newChunkEncoder(pack bool) (*zstd.Encoder, error) {
	level, noEntropy, window := chunkLevel, chunkNoEntropy, maxChunk
	if pack {
		level, noEntropy, window = packLevel, false, 1<<20
	}
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(level), zstd.WithEncoderConcurrency(1),
		zstd.WithLowerEncoderMem(true), zstd.WithWindowSize(window), zstd.WithNoEntropyCompression(noEntropy),
		zstd.WithEncoderCRC(false))
	if err != nil {
		return nil, fmt.Errorf("chunk encoder: %w", err)
	}
	return enc, nil
}
