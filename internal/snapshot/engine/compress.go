package engine

import (
	"fmt"
	"strings"

	"github.com/klauspost/compress/zstd"

	"github.com/kilnhq/kiln/internal/zstdfast"
)

// Compression is how hard Create compresses what it stores: the
// operator's trade of CPU for space (kiln serve --snapshot-compression).
// The zero value is CompressionFastest. Every level restores alike: a
// chunk is one zstd frame whatever level made it, and a chunk's name is
// the SHA-256 of its uncompressed bytes, so chunks made at one level
// dedupe with those made at another.
type Compression string

// The levels, measured on a 1 GiB worldgen world (doc.go,
// docs/benchmarks.md): fastest is the speed target's level, default
// the size target's.
const (
	// CompressionFastest: large files' chunks at klauspost's fastest
	// level without entropy coding of literals, small files' packs at
	// its default level.
	CompressionFastest Compression = "fastest"
	// CompressionDefault: everything at klauspost's default level (about
	// 0.8 % smaller on a world, 1.2–1.4 CPU-s more a GB).
	CompressionDefault Compression = "default"
	// CompressionBetter: large files' chunks at klauspost's better level
	// (about 1 % smaller than fastest, 2.5 CPU-s more a GB), packs at its
	// default (better tables for them too took kiln serve's peak RSS from
	// 195 to 204 MiB for 0.2 MB of a 1 GiB world).
	CompressionBetter Compression = "better"
)

// Compressions lists the levels, fastest first.
func Compressions() []Compression {
	return []Compression{CompressionFastest, CompressionDefault, CompressionBetter}
}

// ParseCompression returns the level named s (case-insensitive; "" is
// CompressionFastest).
func ParseCompression(s string) (Compression, error) {
	if s == "" {
		return CompressionFastest, nil
	}
	for _, c := range Compressions() {
		if strings.EqualFold(s, string(c)) {
			return c, nil
		}
	}
	return "", fmt.Errorf("snapshot compression %q: want one of fastest, default, better", s)
}

// levels returns the zstd levels of chunks and of packs, and whether
// chunks skip entropy coding of literals (fastest: it saved 0.2 s a GB
// and cost nothing measurable on a world).
func (c Compression) levels() (chunk, pack zstd.EncoderLevel, noEntropy bool) {
	switch c {
	case CompressionDefault:
		return zstd.SpeedDefault, zstd.SpeedDefault, false
	case CompressionBetter:
		return zstd.SpeedBetterCompression, zstd.SpeedDefault, false
	default:
		return zstd.SpeedFastest, zstd.SpeedDefault, true
	}
}

// chunkEncoder compresses a chunk or a pack into one zstd frame
// appended to dst. One goroutine uses it at a time.
type chunkEncoder interface {
	EncodeAll(src, dst []byte) []byte
}

// stepCap is how far the fastest level's encoder may step at a time
// through bytes that match nothing (zstdfast.Options.MaxStep): 2+32
// bytes. klauspost's step grows without bound (1/32 of the bytes since
// the last match), and passes over the short repeated runs that end
// region files' zlib streams after kilobytes of noise; capped, it finds
// them, as C zstd -1 (whose step grows four times slower) does. Measured
// on the 1,064 MiB pieces of a 1 GiB world's region files (2026-11-28):
// uncapped 735.34 MB, 16 727.50 MB (a third slower), 24 728.31, 32
// 728.80, 48 730.02, 64 730.89; C zstd -1 of the same files 729.75 MB;
// 32 costs about a tenth more of the encoder's time (doc.go).
const stepCap = 32

// newChunkEncoder returns a zstd encoder at level c for chunks (pack
// false) or packs of small files: one frame per call of EncodeAll, no
// frame checksum (a restore checks each chunk's SHA-256, which says more
// than zstd's 32-bit xxhash). A chunk's window is maxChunk (a chunk is
// never larger); a pack's is 1 MiB, which halves its encoder's memory and
// costs nothing measurable (its files are small: what repeats is near).
// The fastest level is zstdfast's copy of klauspost's encoder with its
// step capped (stepCap); the others are klauspost's.
func newChunkEncoder(c Compression, pack bool) (chunkEncoder, error) {
	chunk, packLevel, noEntropy := c.levels()
	level, window := chunk, MaxChunk
	if pack {
		level, noEntropy, window = packLevel, false, 1<<20
	}
	if level == zstd.SpeedFastest {
		enc, err := zstdfast.New(zstdfast.Options{WindowSize: window, NoEntropy: noEntropy, MaxStep: stepCap})
		if err != nil {
			return nil, fmt.Errorf("chunk encoder: %w", err)
		}
		return enc, nil
	}
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(level), zstd.WithEncoderConcurrency(1),
		zstd.WithLowerEncoderMem(true), zstd.WithWindowSize(window), zstd.WithNoEntropyCompression(noEntropy),
		zstd.WithEncoderCRC(false))
	if err != nil {
		return nil, fmt.Errorf("chunk encoder: %w", err)
	}
	return enc, nil
}
