// Package zstdfast is the fast-level zstd encoder Kiln's snapshots
// compress chunks with: one frame per chunk from [Encoder.EncodeAll].
//
// # Where it comes from
//
// It is a trimmed copy of the encoder side of
// github.com/klauspost/compress/zstd at v1.20.3 (BSD 3-clause, see
// LICENSE, copied from that module's root): what EncodeAll runs at
// zstd.SpeedFastest with WithEncoderConcurrency(1),
// WithLowerEncoderMem(true), WithEncoderCRC(false), WithWindowSize and
// WithNoEntropyCompression. Files, by upstream name under zstd/:
//
//	enc_fast.go          fastEncoder's Encode, EncodeNoHist, Reset
//	enc_base.go          fastBase, without CRC, dictionaries and prefixes
//	blockenc.go          blockEnc
//	seqenc.go, fse_encoder.go, bitwriter.go, matchlen_amd64.go,
//	matchlen_amd64.s, matchlen_generic.go
//	fse_predefined.go    the encoder's predefined tables only
//	frameenc.go          the frame header only
//	hash.go              hashLen only
//	zstd.go              load3232, load6432 and two constants
//	encoder.go           EncodeAll, encodeAll; Options and New are Kiln's
//	encoder_options.go   the options above, as unexported functions
//	decshared.go         declarations the encoder shares with upstream's
//	                     decoder (blockdec.go, framedec.go,
//	                     fse_decoder.go, seqdec.go)
//
// matchlen_amd64.s is kept because the generic matchLen measured slower
// (by 2 % on region files, 4 % on text; best of 8 to 10 runs).
// internal/le and internal/regmask are upstream's internal/le and
// internal/regmask, unchanged but for where they live (and a doc.go of
// Kiln's in each). Literals are Huffman coded by upstream's exported
// github.com/klauspost/compress/huff0.
//
// Trimmed means deleted, not rewritten: no decoder, dictionaries,
// streaming Writer, concurrency or jobs, CRC (xxhash), padding, snappy,
// other levels, debug printing or debug asserts. What is left keeps
// upstream's names, structure and comments; where a line had to change,
// a comment starting "kiln:" says so. Two lines that staticcheck flags in
// upstream's enc_fast.go carry a //lint:ignore.
//
// # What is different
//
// With Options.MaxStep 0, EncodeAll's output is byte for byte upstream's
// with the options above (the tests check it against the upstream in
// go.mod), empty input included (a 9-byte frame, as upstream's
// WithZeroFrames default). The one change in behaviour is
// Options.MaxStep, which caps how far the encoder jumps through bytes
// without a match. Upstream steps
//
//	s += stepSize + ((s - nextEmit) >> (kSearchStrength - 1))
//
// which grows without bound: after the ~4.5 KB of zlib noise a
// Minecraft region file's chunk is made of, it jumps ~140 bytes at a
// time, past the 60–110 periodic bytes many zlib streams end with (one
// deflate code repeated), which C zstd -1 finds. Capped
//
//	s += stepSize + min((s-nextEmit)>>(kSearchStrength-1), maxStep)
//
// with MaxStep 32, 1 GiB of region files in 1 MiB frames compresses to
// 728.80 MB instead of upstream's 735.34 MB (C zstd -1: 729.75 MB). The
// cost is CPU, as the encoder looks at more positions in incompressible
// data: on those files, best of 3 runs, MaxStep 32 took about 15 % more
// encoding time than upstream (0.86 s against 0.75 s a GiB on a shared
// 2-core VM, where runs varied by ±10 %); MaxStep 48 gives 730.02 MB for
// about 8 % more, MaxStep 16 727.50 MB for about 50 % more.
//
// Why a copy: upstream has no option for the step, and a fork named by a
// replace directive in go.mod would break `go install …@version` of
// Kiln (the go command ignores replace there). The copy is the encoder
// alone, about 2,900 lines, checked against upstream by the tests.
//
// What it must never do: write anything but standard zstd frames (the
// store's chunks are read by upstream's decoder, and by any zstd tool an
// operator points at them), or differ from upstream in anything but the
// step (the tests hold MaxStep 0 to upstream's bytes).
//
// # Decoding
//
// The output is standard zstd, so decoding stays with upstream's decoder
// (github.com/klauspost/compress/zstd's NewReader, DecodeAll), or any
// other.
//
// # Re-syncing with a newer upstream
//
// For each file above, diff upstream's old and new version and apply the
// changes that touch code kept here, e.g.
//
//	M=$(go env GOMODCACHE)/github.com/klauspost/compress
//	diff -u $M@v1.20.3/zstd/enc_fast.go $M@vX.Y.Z/zstd/enc_fast.go
//
// (likewise for internal/le and internal/regmask, and for decshared.go
// against the decoder files it names), or diff this package's file
// against upstream's new one and keep only the deletions and the "kiln:"
// lines. Then bump the version in go.mod and in this comment and run the
// tests: they compare the output with the upstream in go.mod, so they
// fail if upstream's encoder changed and the copy did not follow.
package zstdfast
