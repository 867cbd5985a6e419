package archive

import (
	"encoding/binary"
	"io"
)

// zstdGuard sits between a zstd file and the decoder, follows the frames
// as they pass (RFC 8878: frame headers, block headers, checksums,
// skippable frames) and refuses a frame whose window is over max before
// the decoder has its whole header: the refusal names the window and the
// limit. The decoder's own WithDecoderMaxWindow stays the net under it:
// on anything it cannot follow the guard only passes the bytes on.
type zstdGuard struct {
	r   io.Reader
	max uint64
	err error // the refusal, once made

	state   zstdState
	skip    uint64 // bytes to pass in zstdSkip
	after   zstdState
	hdr     [18]byte // the part of a header read so far
	have    int
	want    int    // header bytes wanted in zstdMagic, zstdFrameHeader, zstdBlockHeader
	check   bool   // the current frame ends with a checksum
	skipped bool   // the current skippable frame's size is being read
	pos     uint64 // the offset in the stream of the byte being followed
	frame   uint64 // the offset of the current frame's magic
}

type zstdState int

const (
	zstdMagic       zstdState = iota // a frame's first 4 bytes
	zstdFrameHeader                  // its header after the magic
	zstdBlockHeader                  // a block's 3 bytes
	zstdSkip                         // block content, a checksum, a skippable frame
	zstdLost                         // something not followed: bytes pass
)

const (
	zstdFrameMagic     = 0xFD2FB528
	zstdSkippableMagic = 0x184D2A50 // the low 4 bits are free
	zstdMinWindow      = 1 << 10
)

func newZstdGuard(r io.Reader, max uint64) *zstdGuard {
	return &zstdGuard{r: r, max: max, want: 4}
}

func (g *zstdGuard) Read(p []byte) (int, error) {
	if g.err != nil {
		return 0, g.err
	}
	n, err := g.r.Read(p)
	if i := g.follow(p[:n]); i >= 0 {
		return i, g.err // the bytes before the header's last one
	}
	return n, err
}

// follow walks b; it returns the index of the byte at which a frame was
// refused (g.err set), or -1.
func (g *zstdGuard) follow(b []byte) int {
	for i := 0; i < len(b); {
		switch g.state {
		case zstdLost:
			return -1
		case zstdSkip:
			k := min(uint64(len(b)-i), g.skip)
			i += int(k)
			g.pos += k
			g.skip -= k
			if g.skip == 0 {
				g.to(g.after)
			}
		default:
			g.hdr[g.have] = b[i]
			g.have++
			if g.have == g.want && !g.header() {
				return i
			}
			i++
			g.pos++
		}
	}
	return -1
}

// to starts state s.
func (g *zstdGuard) to(s zstdState) {
	g.state, g.have = s, 0
	switch s {
	case zstdMagic:
		g.want = 4
	case zstdFrameHeader:
		g.want = 1
	case zstdBlockHeader:
		g.want = 3
	}
}

// skipThen passes n bytes, then starts s.
func (g *zstdGuard) skipThen(n uint64, s zstdState) {
	if n == 0 {
		g.to(s)
		return
	}
	g.state, g.skip, g.after = zstdSkip, n, s
}

// header acts on a complete piece of header; false refuses the frame.
func (g *zstdGuard) header() bool {
	switch g.state {
	case zstdMagic:
		m := binary.LittleEndian.Uint32(g.hdr[:4])
		switch {
		case g.skipped:
			g.skipped = false
			g.skipThen(uint64(m), zstdMagic) // the skippable frame's size
		case m == zstdFrameMagic:
			g.frame = g.pos - 3
			g.to(zstdFrameHeader)
		case m&^0xF == zstdSkippableMagic:
			g.skipped = true
			g.to(zstdMagic) // read its size as a 4-byte "magic"
		default:
			g.state = zstdLost
		}
	case zstdFrameHeader:
		fhd := g.hdr[0]
		if g.have == 1 {
			if fhd&0x08 != 0 { // reserved bit
				g.state = zstdLost
				return true
			}
			g.want = 1 + zstdHeaderLen(fhd)
			if g.want > 1 {
				return true
			}
		}
		window := zstdWindow(fhd, g.hdr[1:g.want])
		if window > g.max {
			g.err = limitError("the archive's zstd window is %s; at most %s is allowed",
				sizeString(window), sizeString(g.max))
			return false
		}
		g.check = fhd&0x04 != 0
		g.to(zstdBlockHeader)
	case zstdBlockHeader:
		h := uint32(g.hdr[0]) | uint32(g.hdr[1])<<8 | uint32(g.hdr[2])<<16
		last, typ, size := h&1 != 0, (h>>1)&3, uint64(h>>3)
		switch typ {
		case 0, 2: // raw, compressed: size bytes follow
		case 1: // RLE: one byte follows
			size = 1
		default:
			g.state = zstdLost
			return true
		}
		switch {
		case !last:
			g.skipThen(size, zstdBlockHeader)
		case g.check:
			g.skipThen(size+4, zstdMagic) // the content checksum
		default:
			g.skipThen(size, zstdMagic)
		}
	}
	return true
}

// zstdHeaderLen is the length of a frame header after its descriptor.
func zstdHeaderLen(fhd byte) int {
	single := fhd&0x20 != 0
	n := []int{0, 1, 2, 4}[fhd&3] // dictionary ID
	switch fhd >> 6 {             // frame content size
	case 0:
		if single {
			n++
		}
	case 1:
		n += 2
	case 2:
		n += 4
	case 3:
		n += 8
	}
	if !single {
		n++ // window descriptor
	}
	return n
}

// zstdWindow is the window a frame header declares (h: the bytes after the
// descriptor fhd): its window descriptor, or in a single-segment frame its
// content size.
func zstdWindow(fhd byte, h []byte) uint64 {
	if fhd&0x20 == 0 {
		wd := h[0]
		log := 10 + uint(wd>>3)
		base := uint64(1) << log
		return base + base/8*uint64(wd&7)
	}
	fcs := h[[]int{0, 1, 2, 4}[fhd&3]:]
	var size uint64
	switch fhd >> 6 {
	case 0:
		size = uint64(fcs[0])
	case 1:
		size = uint64(binary.LittleEndian.Uint16(fcs)) + 256
	case 2:
		size = uint64(binary.LittleEndian.Uint32(fcs))
	case 3:
		size = binary.LittleEndian.Uint64(fcs)
	}
	return max(size, zstdMinWindow)
}

// zstdGuarded is a decoder's output: when it fails after the guard refused
// a frame, the guard's refusal is the error (the decoder may report it as
// its own, or as an unexpected end).
type zstdGuarded struct {
	r io.Reader
	g *zstdGuard
}

func (z zstdGuarded) Read(p []byte) (int, error) {
	n, err := z.r.Read(p)
	if err != nil && z.g.err != nil {
		err = z.g.err
	}
	return n, err
}
