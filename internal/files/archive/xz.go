package archive

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"hash/crc64"
	"io"

	"github.com/ulikunitz/xz/lzma"
)

// xzReader decodes an .xz file (any number of streams, each any number of
// blocks). The container is parsed here, following the .xz file format
// 1.2.1 (tukaani.org/xz/xz-file-format.txt): ulikunitz/xz's own reader
// allocates whatever dictionary a block header declares (its
// ReaderConfig.DictCap is a floor, raised to the declared size), so each
// block header is read and checked here first and only its LZMA2 data is
// given to ulikunitz/xz/lzma, with the dictionary that was checked. Block
// checks (CRC32, CRC64, SHA-256), sizes, the index and the footers are
// verified as the xz tool does.
type xzReader struct {
	in      xzInput
	maxDict int64 // xzMaxDict; tests lower it
	slack   int64 // xzDictSlack; tests lower it

	flags   [2]byte // the current stream's flags
	check   int     // its check's size in bytes
	newHash func() hash.Hash
	between bool // a footer was read: padding, another stream or the end follow

	// The current block; lz is nil between blocks.
	lz         io.Reader
	sum        hash.Hash // of its uncompressed data, nil without a check
	hdrLen     int64
	dataStart  int64
	comp, size int64 // sizes its header declares, -1 when absent
	out        int64 // bytes it produced so far

	blocks  uint64    // blocks of the current stream so far
	records hash.Hash // their (unpadded size, uncompressed size), for the index
	idxLen  int64     // bytes of the index just read

	allocated int64 // dictionary bytes given to blocks so far
	decoded   int64 // bytes produced so far
	err       error
	hdr       [1024]byte
}

var (
	xzMagic    = []byte{0xFD, '7', 'z', 'X', 'Z', 0x00}
	crc64Table = crc64.MakeTable(crc64.ECMA) // CRC-64/XZ: ECMA-182, reflected, as hash/crc64 computes it
)

// lzma2Filter is the only filter read: xz's default chain is LZMA2 alone.
const lzma2Filter = 0x21

// xzInput counts the bytes read from the file.
type xzInput struct {
	r io.Reader
	n int64
	b [1]byte
}

func (in *xzInput) Read(p []byte) (int, error) {
	n, err := in.r.Read(p)
	in.n += int64(n)
	return n, err
}

func (in *xzInput) ReadByte() (byte, error) {
	if _, err := io.ReadFull(in, in.b[:]); err != nil {
		return 0, err
	}
	return in.b[0], nil
}

func xzErrorf(format string, args ...any) error {
	return fmt.Errorf("xz: "+format, args...)
}

// unexpected turns an end of input in the middle of a structure into
// io.ErrUnexpectedEOF.
func unexpected(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// newXZReader reads the first stream header of r.
func newXZReader(r io.Reader) (*xzReader, error) {
	x := &xzReader{in: xzInput{r: r}, maxDict: xzMaxDict, slack: xzDictSlack, records: sha256.New()}
	var h [12]byte
	if _, err := io.ReadFull(&x.in, h[:]); err != nil {
		return nil, unexpected(err)
	}
	if err := x.streamHeader(h[:]); err != nil {
		return nil, err
	}
	return x, nil
}

func (x *xzReader) streamHeader(h []byte) error {
	if !bytes.Equal(h[:6], xzMagic) {
		return xzErrorf("not an xz stream")
	}
	if crc32.ChecksumIEEE(h[6:8]) != binary.LittleEndian.Uint32(h[8:12]) {
		return xzErrorf("stream header checksum mismatch")
	}
	if h[6] != 0 || h[7]&0xF0 != 0 {
		return xzErrorf("unsupported stream flags %#x %#x", h[6], h[7])
	}
	switch h[7] {
	case 0x00:
		x.check, x.newHash = 0, nil
	case 0x01:
		x.check, x.newHash = 4, func() hash.Hash { return crc32.NewIEEE() }
	case 0x04:
		x.check, x.newHash = 8, func() hash.Hash { return crc64.New(crc64Table) }
	case 0x0A:
		x.check, x.newHash = 32, sha256.New
	default:
		return xzErrorf("unsupported check type %#x", h[7])
	}
	x.flags = [2]byte{h[6], h[7]}
	x.blocks = 0
	x.records.Reset()
	return nil
}

func (x *xzReader) Read(p []byte) (int, error) {
	if x.err != nil {
		return 0, x.err
	}
	if len(p) == 0 {
		return 0, nil
	}
	for {
		if x.lz == nil {
			if err := x.next(); err != nil {
				x.err = err
				return 0, err
			}
			continue
		}
		n, err := x.lz.Read(p)
		if n > 0 {
			x.out += int64(n)
			x.decoded += int64(n)
			if x.sum != nil {
				x.sum.Write(p[:n])
			}
			if x.size >= 0 && x.out > x.size {
				x.err = xzErrorf("a block holds more than its header says")
				return 0, x.err
			}
		}
		switch {
		case err == io.EOF:
			if err := x.endBlock(); err != nil {
				x.err = err
				return n, err
			}
		case err != nil:
			x.err = unexpected(err)
			return n, x.err
		}
		if n > 0 {
			return n, nil
		}
	}
}

// next reads up to the next block's data: stream padding, stream headers,
// indexes and footers on the way. io.EOF at the end of the file.
func (x *xzReader) next() error {
	for {
		if x.between {
			var h [12]byte
			if _, err := io.ReadFull(&x.in, h[:4]); err != nil {
				return err // io.EOF: the end, after a whole stream
			}
			if h[0]|h[1]|h[2]|h[3] == 0 {
				continue // stream padding, four zero bytes at a time
			}
			if _, err := io.ReadFull(&x.in, h[4:]); err != nil {
				return unexpected(err)
			}
			if err := x.streamHeader(h[:]); err != nil {
				return err
			}
			x.between = false
		}
		b, err := x.in.ReadByte()
		if err != nil {
			return unexpected(err)
		}
		if b != 0 {
			return x.block(b)
		}
		if err := x.index(); err != nil {
			return err
		}
		if err := x.footer(); err != nil {
			return err
		}
		x.between = true
	}
}

// block reads a block header whose first byte is b, checks its dictionary
// and starts decoding its data.
func (x *xzReader) block(b byte) error {
	n := (int(b) + 1) * 4
	h := x.hdr[:n]
	h[0] = b
	if _, err := io.ReadFull(&x.in, h[1:]); err != nil {
		return unexpected(err)
	}
	if crc32.ChecksumIEEE(h[:n-4]) != binary.LittleEndian.Uint32(h[n-4:]) {
		return xzErrorf("block header checksum mismatch")
	}
	flags := h[1]
	if flags&0x3C != 0 {
		return xzErrorf("unsupported block flags %#x", flags)
	}
	p := h[2 : n-4]
	x.comp, x.size = -1, -1
	var v uint64
	var ok bool
	if flags&0x40 != 0 {
		if v, p, ok = xzUvarint(p); !ok || v == 0 {
			return xzErrorf("bad compressed size in a block header")
		}
		x.comp = int64(v)
	}
	if flags&0x80 != 0 {
		if v, p, ok = xzUvarint(p); !ok {
			return xzErrorf("bad uncompressed size in a block header")
		}
		x.size = int64(v)
	}
	if flags&0x03 != 0 {
		return xzErrorf("a block uses a filter chain other than LZMA2 alone (BCJ, delta), which is not supported")
	}
	id, p, ok := xzUvarint(p)
	if !ok {
		return xzErrorf("bad filter flags")
	}
	props, p, ok := xzUvarint(p)
	if !ok || id != lzma2Filter || props != 1 || len(p) < 1 {
		return xzErrorf("a block uses filter %#x, which is not supported", id)
	}
	dict, err := lzma2Dict(p[0])
	if err != nil {
		return err
	}
	for _, c := range p[1:] {
		if c != 0 {
			return xzErrorf("non-zero block header padding")
		}
	}
	if dict > x.maxDict {
		return limitError("the archive's xz dictionary is %s; at most %s is allowed",
			sizeString(uint64(dict)), sizeString(uint64(x.maxDict)))
	}
	if x.allocated+dict > x.slack+2*x.decoded {
		return limitError("the archive's xz blocks ask for %s of dictionaries to decode %s; at most %s plus twice the size decoded is allowed",
			sizeString(uint64(x.allocated+dict)), sizeString(uint64(x.decoded)), sizeString(uint64(x.slack)))
	}
	x.allocated += dict

	x.hdrLen, x.dataStart, x.out = int64(n), x.in.n, 0
	x.sum = nil
	if x.newHash != nil {
		x.sum = x.newHash()
	}
	var data io.Reader = &x.in
	if x.comp >= 0 {
		data = io.LimitReader(&x.in, x.comp)
	}
	lz, err := lzma.Reader2Config{DictCap: int(dict)}.NewReader2(data)
	if err != nil {
		return xzErrorf("%v", err)
	}
	x.lz = lz
	return nil
}

// lzma2Dict decodes an LZMA2 dictionary size byte: 4 KiB to 4 GiB.
func lzma2Dict(b byte) (int64, error) {
	bits := b & 0x3F
	if b&0xC0 != 0 || bits > 40 {
		return 0, xzErrorf("bad LZMA2 dictionary size %#x", b)
	}
	if bits == 40 {
		return 1<<32 - 1, nil
	}
	return int64(2|bits&1) << (bits/2 + 11), nil
}

// endBlock checks the block just decoded: sizes, padding and check.
func (x *xzReader) endBlock() error {
	comp := x.in.n - x.dataStart
	if x.comp >= 0 && comp != x.comp || x.size >= 0 && x.out != x.size {
		return xzErrorf("a block's sizes differ from its header's")
	}
	pad := int((4 - (x.hdrLen+comp)%4) % 4)
	var buf [3 + 32]byte
	tail := buf[:pad+x.check]
	if _, err := io.ReadFull(&x.in, tail); err != nil {
		return unexpected(err)
	}
	for _, c := range tail[:pad] {
		if c != 0 {
			return xzErrorf("non-zero block padding")
		}
	}
	if x.sum != nil {
		got := x.sum.Sum(nil)
		if x.check <= 8 { // CRC32 and CRC64 are stored little-endian; Sum is big-endian
			for i, j := 0, len(got)-1; i < j; i, j = i+1, j-1 {
				got[i], got[j] = got[j], got[i]
			}
		}
		if !bytes.Equal(got, tail[pad:]) {
			return xzErrorf("a block's check does not match its data")
		}
	}
	xzRecord(x.records, uint64(x.hdrLen+comp+int64(x.check)), uint64(x.out))
	x.blocks++
	x.lz, x.sum = nil, nil
	return nil
}

// xzRecord adds one index record to h.
func xzRecord(h hash.Hash, unpadded, size uint64) {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], unpadded)
	binary.BigEndian.PutUint64(b[8:], size)
	h.Write(b[:])
}

// index reads a stream's index (its indicator byte was read) and checks it
// against the blocks decoded.
func (x *xzReader) index() error {
	crc := crc32.NewIEEE()
	crc.Write([]byte{0})
	in := &xzIndexInput{in: &x.in, crc: crc, n: 1}
	count, err := in.uvarint()
	if err != nil {
		return err
	}
	if count != x.blocks {
		return xzErrorf("the index lists %d blocks, the stream has %d", count, x.blocks)
	}
	h := sha256.New()
	for range count {
		unpadded, err := in.uvarint()
		if err != nil {
			return err
		}
		size, err := in.uvarint()
		if err != nil {
			return err
		}
		xzRecord(h, unpadded, size)
	}
	if !bytes.Equal(h.Sum(nil), x.records.Sum(nil)) {
		return xzErrorf("the index does not match the blocks")
	}
	for in.n%4 != 0 {
		b, err := in.ReadByte()
		if err != nil {
			return unexpected(err)
		}
		if b != 0 {
			return xzErrorf("non-zero index padding")
		}
	}
	var sum [4]byte
	if _, err := io.ReadFull(&x.in, sum[:]); err != nil {
		return unexpected(err)
	}
	if binary.LittleEndian.Uint32(sum[:]) != crc.Sum32() {
		return xzErrorf("index checksum mismatch")
	}
	x.idxLen = in.n + 4
	return nil
}

// footer reads a stream footer and checks it against the stream.
func (x *xzReader) footer() error {
	var f [12]byte
	if _, err := io.ReadFull(&x.in, f[:]); err != nil {
		return unexpected(err)
	}
	switch {
	case crc32.ChecksumIEEE(f[4:10]) != binary.LittleEndian.Uint32(f[:4]):
		return xzErrorf("stream footer checksum mismatch")
	case (int64(binary.LittleEndian.Uint32(f[4:8]))+1)*4 != x.idxLen:
		return xzErrorf("the stream footer's index size is wrong")
	case f[8] != x.flags[0] || f[9] != x.flags[1]:
		return xzErrorf("the stream footer's flags differ from its header's")
	case f[10] != 'Y' || f[11] != 'Z':
		return xzErrorf("no stream footer magic")
	}
	return nil
}

// xzIndexInput reads an index byte by byte, summing and counting them.
type xzIndexInput struct {
	in  *xzInput
	crc hash.Hash32
	n   int64
}

func (r *xzIndexInput) ReadByte() (byte, error) {
	b, err := r.in.ReadByte()
	if err != nil {
		return 0, err
	}
	r.crc.Write([]byte{b})
	r.n++
	return b, nil
}

var errXZVarint = errors.New("xz: bad variable-length integer")

// uvarint reads an xz multibyte integer: at most 9 bytes, no superfluous
// zero byte at the end.
func (r *xzIndexInput) uvarint() (uint64, error) {
	var v uint64
	for i := range 9 {
		b, err := r.ReadByte()
		if err != nil {
			return 0, unexpected(err)
		}
		v |= uint64(b&0x7F) << (7 * i)
		if b&0x80 == 0 {
			if b == 0 && i > 0 {
				return 0, errXZVarint
			}
			return v, nil
		}
	}
	return 0, errXZVarint
}

// xzUvarint decodes an xz multibyte integer from p.
func xzUvarint(p []byte) (uint64, []byte, bool) {
	var v uint64
	for i := 0; i < 9 && i < len(p); i++ {
		b := p[i]
		v |= uint64(b&0x7F) << (7 * i)
		if b&0x80 == 0 {
			if b == 0 && i > 0 {
				return 0, p, false
			}
			return v, p[i+1:], true
		}
	}
	return 0, p, false
}
