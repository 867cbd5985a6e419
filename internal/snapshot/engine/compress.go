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
// docs/benchmarks.md): fastest meets both the speed and the size
// targets; default and better spend CPU for what zstd finds in files
// other than region files.
const (
	// CompressionFastest: large files' chunks at klauspost's fastest
	// level with its step capped (zstdfast, stepCap), region files'
	// without entropy coding of literals (fastEncoder), small files'
	// packs at klauspost's default level. On region files the smallest
	// of the three.
	CompressionFastest Compression = "fastest"
	// CompressionDefault: everything at klauspost's default level (1.2–1.4
	// CPU-s more a GB than fastest; on a world's region files slightly
	// larger than fastest since its cap, smaller on text).
	CompressionDefault Compression = "default"
	// CompressionBetter: large files' chunks at klauspost's better level
	// (2.5 CPU-s more a GB than fastest), packs at its default (better
	// tables for them too took kiln serve's peak RSS from 195 to 204 MiB
	// for 0.2 MB of a 1 GiB world).
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

// levels returns the zstd levels of chunks and of packs.
func (c Compression) levels() (chunk, pack zstd.EncoderLevel) {
	switch c {
	case CompressionDefault:
		return zstd.SpeedDefault, zstd.SpeedDefault
	case CompressionBetter:
		return zstd.SpeedBetterCompression, zstd.SpeedDefault
	default:
		return zstd.SpeedFastest, zstd.SpeedDefault
	}
}

// chunkEncoder compresses a chunk or a pack into one zstd frame
// appended to dst; region says src is a region file's chunk. One
// goroutine uses it at a time.
type chunkEncoder interface {
	encode(src, dst []byte, region bool) []byte
}

// levelEncoder is klauspost's encoder (packs, and chunks at default and
// better): literals Huffman coded.
type levelEncoder struct{ enc *zstd.Encoder }

func (e levelEncoder) encode(src, dst []byte, _ bool) []byte { return e.enc.EncodeAll(src, dst) }

// fastEncoder is the fastest level's for chunks (zstdfast, its step
// capped: stepCap). A region file's chunk is stored without entropy
// coding of literals: they are zlib's output, where Huffman coding saved
// nothing measurable and cost 0.2 s a GB of a world. Other files' chunks
// are coded: on text (a log, a plugin's database dump) it makes them 11 %
// smaller (Kiln's own sources, 2026-11-28).
type fastEncoder struct{ enc *zstdfast.Encoder }

func (e fastEncoder) encode(src, dst []byte, region bool) []byte {
	e.enc.SetNoEntropy(region)
	return e.enc.EncodeAll(src, dst)
}

// stepCap is how far the fastest level's encoder may step at a time
// through bytes that match nothing (zstdfast.Options.MaxStep): 2+32
// bytes. klauspost's step grows without bound (1/32 of the bytes since
// the last match), and passes over the short repeated runs that end
// region files' zlib streams after kilobytes of noise; capped, it finds
// them, as C zstd -1 (whose step grows four times slower) does. Measured
// on the 1,064 MiB pieces of a 1 GiB world's region files (2026-11-28):
// uncapped 735.34 MB, 16 727.50 MB (half again the encoder's time), 24
// 728.31 (+30 %), 32 728.80 (+14 %), 48 730.02 (+8 %), 64 730.89; C zstd
// -1 of the same files 729.75 MB (doc.go).
const stepCap = 32

// newChunkEncoder returns a zstd encoder at level c for chunks (pack
// false) or packs of small files: one frame per call, no frame checksum
// (a restore checks each chunk's SHA-256, which says more than zstd's
// 32-bit xxhash). A chunk's window is maxChunk (a chunk is never larger);
// a pack's is 1 MiB, which halves its encoder's memory and costs nothing
// measurable (its files are small: what repeats is near). The fastest
// level's chunks are zstdfast's (fastEncoder); the rest klauspost's.
func newChunkEncoder(c Compression, pack bool) (chunkEncoder, error) {
	chunk, packLevel := c.levels()
	level, window := chunk, MaxChunk
	if pack {
		level, window = packLevel, 1<<20
	}
	if level == zstd.SpeedFastest {
		enc, err := zstdfast.New(zstdfast.Options{WindowSize: window, MaxStep: stepCap})
		if err != nil {
			return nil, fmt.Errorf("chunk encoder: %w", err)
		}
		return fastEncoder{enc}, nil
	}
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(level), zstd.WithEncoderConcurrency(1),
		zstd.WithLowerEncoderMem(true), zstd.WithWindowSize(window), zstd.WithEncoderCRC(false))
	if err != nil {
		return nil, fmt.Errorf("chunk encoder: %w", err)
	}
	return levelEncoder{enc}, nil
}
