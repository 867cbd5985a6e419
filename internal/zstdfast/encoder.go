// Copyright 2019+ Klaus Post. All rights reserved.
// License information can be found in the LICENSE file.
// Based on work by Yann Collet, released under BSD License.

package zstdfast

import "fmt"

// Options configure an Encoder. The zero value is upstream's
// SpeedFastest with a 4 MiB window, Huffman-coded literals and the
// unbounded step. Always, as Kiln calls upstream: concurrency 1, lower
// encoder memory, no frame checksum.
type Options struct {
	// WindowSize is the largest distance a match may reach back, with
	// upstream's rules for zstd.WithWindowSize: a power of two from
	// MinWindowSize (1 KiB) to MaxWindowSize (512 MiB). 0 is upstream's
	// SpeedFastest default, 4 MiB. Blocks are 64 KiB, or WindowSize if
	// that is smaller. The encoder keeps about WindowSize+128 KiB of
	// history once an input has more than one block, so a window larger
	// than the largest input only costs memory.
	WindowSize int

	// NoEntropy stores literals as they are instead of Huffman coding
	// them, as upstream's zstd.WithNoEntropyCompression(true).
	NoEntropy bool

	// MaxStep caps the extra step the encoder takes through bytes
	// without a match. Upstream (MaxStep 0) steps
	// 2 + (bytes since the last match)/32 bytes at a time, so after a
	// few KB of incompressible data it skips short repeats; with
	// MaxStep > 0 it steps at most 2+MaxStep. 0 keeps upstream's
	// behaviour, and the output is byte-identical to upstream's. It must
	// not be negative.
	MaxStep int32
}

// Encoder compresses inputs into zstd frames, each of which any zstd
// decoder reads (github.com/klauspost/compress/zstd's included).
// Create one with New. An Encoder keeps state between calls and must be
// used by one goroutine at a time; use one per goroutine (or a
// sync.Pool of them) to compress in parallel.
type Encoder struct {
	o   encoderOptions
	enc *fastEncoder // kiln: upstream keeps a channel of them, for concurrent EncodeAll calls
}

// New returns an Encoder with options o, or an error that says which
// option is wrong.
func New(o Options) (*Encoder, error) {
	initPredefined()
	var e Encoder
	e.o.setDefault()
	opts := []eOption{withNoEntropyCompression(o.NoEntropy), withMaxStep(o.MaxStep)}
	if o.WindowSize != 0 {
		opts = append(opts, withWindowSize(o.WindowSize))
	}
	for _, opt := range opts {
		err := opt(&e.o)
		if err != nil {
			return nil, fmt.Errorf("zstdfast: %w", err)
		}
	}
	e.enc = e.o.encoder()
	return &e, nil
}

// SetNoEntropy sets Options.NoEntropy for the calls of EncodeAll that
// follow (kiln: one encoder serves inputs whose literals are noise, not
// worth Huffman coding, and inputs whose literals are not). The output
// is then what an Encoder made with that option writes.
func (e *Encoder) SetNoEntropy(b bool) { e.o.noEntropy = b }

// EncodeAll will encode all input in src and append it to dst.
// kiln: it must not be called concurrently on one Encoder (upstream's
// may be).
// The output is one zstd frame with the content size and no checksum,
// byte for byte what upstream's EncodeAll writes with the same options
// when MaxStep is 0; an empty src gives a frame too (9 bytes), as
// upstream's does by default.
// Encoded blocks can be concatenated and the result will be the combined input stream.
// Data compressed with EncodeAll can be decoded with upstream's Decoder,
// using either a stream or DecodeAll.
func (e *Encoder) EncodeAll(src, dst []byte) []byte {
	return e.encodeAll(e.enc, src, dst)
}

func (e *Encoder) encodeAll(enc *fastEncoder, src, dst []byte) []byte {
	if len(src) == 0 {
		if e.o.fullZero {
			// Add frame header.
			fh := frameHeader{
				ContentSize:   0,
				WindowSize:    MinWindowSize,
				SingleSegment: true,
				// Adding a checksum would be a waste of space.
				Checksum: false,
				DictID:   0,
			}
			dst = fh.appendTo(dst)

			// Write raw block as last one only.
			var blk blockHeader
			blk.setSize(0)
			blk.setType(blockTypeRaw)
			blk.setLast(true)
			dst = blk.appendTo(dst)
		}
		return dst
	}

	// Use single segments when above minimum window and below window size.
	single := len(src) <= e.o.windowSize && len(src) > MinWindowSize
	fh := frameHeader{
		ContentSize:   uint64(len(src)),
		WindowSize:    uint32(enc.WindowSize(int64(len(src)))),
		SingleSegment: single,
	}

	// If less than 1MB, allocate a buffer up front.
	if len(dst) == 0 && cap(dst) == 0 && len(src) < 1<<20 && !e.o.lowMem {
		dst = make([]byte, 0, len(src))
	}
	dst = fh.appendTo(dst)

	// If we can do everything in one block, prefer that.
	if len(src) <= e.o.blockSize {
		enc.Reset()
		// Slightly faster with no history and everything in one block.
		blk := enc.Block()
		blk.last = true
		enc.EncodeNoHist(blk, src)

		// If we got the exact same number of literals as input,
		// assume the literals cannot be compressed.
		oldout := blk.output
		// Output directly to dst
		blk.output = dst

		err := blk.encode(src, e.o.noEntropy, !e.o.allLitEntropy)
		if err != nil {
			panic(err)
		}
		dst = blk.output
		blk.output = oldout
	} else {
		enc.Reset()
		blk := enc.Block()
		for len(src) > 0 {
			todo := src
			if len(todo) > e.o.blockSize {
				todo = todo[:e.o.blockSize]
			}
			src = src[len(todo):]
			blk.pushOffsets()
			enc.Encode(blk, todo)
			if len(src) == 0 {
				blk.last = true
			}
			err := blk.encode(todo, e.o.noEntropy, !e.o.allLitEntropy)
			if err != nil {
				panic(err)
			}
			dst = append(dst, blk.output...)
			blk.reset(nil)
		}
	}
	return dst
}
