package engine

import (
	"fmt"
	"strings"

	"github.com/klauspost/compress/zstd"
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
	// level, region files' without entropy coding of literals
	// (fastEncoder), small files' packs at klauspost's default level.
	CompressionFastest Compression = "fastest"
	// CompressionDefault: everything at klauspost's default level (1.2–1.4
	// CPU-s more a GB than fastest; smaller, on text by about 8 %).
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

// fastEncoder is the fastest level's for chunks: klauspost's fastest
// encoder, and for a region file's chunk a second one without entropy
// coding of literals (zstd.WithNoEntropyCompression): they are zlib's
// output, where Huffman coding saved nothing measurable and cost 0.2 s a
// GB of a world. Other files' chunks are coded: on text (a log, a
// plugin's database dump) it makes them 11 % smaller (Kiln's own sources,
// 2026-11-28).
type fastEncoder struct{ coded, raw *zstd.Encoder }

func (e fastEncoder) encode(src, dst []byte, region bool) []byte {
	if region {
		return e.raw.EncodeAll(src, dst)
	}
	return e.coded.EncodeAll(src, dst)
}

// newChunkEncoder returns a zstd encoder at level c for chunks (pack
// false) or packs of small files: one frame per call, no frame checksum
// (a restore checks each chunk's SHA-256, which says more than zstd's
// 32-bit xxhash). A chunk's window is maxChunk (a chunk is never larger);
// a pack's is 1 MiB, which halves its encoder's memory and costs nothing
// measurable (its files are small: what repeats is near). The fastest
// level's chunks go through fastEncoder.
func newChunkEncoder(c Compression, pack bool) (chunkEncoder, error) {
	chunk, packLevel := c.levels()
	level, window := chunk, MaxChunk
	if pack {
		level, window = packLevel, 1<<20
	}
	enc, err := newZstd(level, window, false)
	if err != nil {
		return nil, err
	}
	if level != zstd.SpeedFastest {
		return levelEncoder{enc}, nil
	}
	raw, err := newZstd(level, window, true)
	if err != nil {
		return nil, err
	}
	return fastEncoder{coded: enc, raw: raw}, nil
}

// newZstd is klauspost's encoder of one frame per call at level, without
// entropy coding of literals when raw.
func newZstd(level zstd.EncoderLevel, window int, raw bool) (*zstd.Encoder, error) {
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(level), zstd.WithEncoderConcurrency(1),
		zstd.WithLowerEncoderMem(true), zstd.WithWindowSize(window), zstd.WithEncoderCRC(false),
		zstd.WithNoEntropyCompression(raw))
	if err != nil {
		return nil, fmt.Errorf("chunk encoder: %w", err)
	}
	return enc, nil
}
