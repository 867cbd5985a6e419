package manifest

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"

	"github.com/klauspost/compress/zstd"
)

// The manifest format, version 3 (internal/snapshot/engine/doc.go tells
// why it is shaped so). The stored blob is one zstd stream of:
//
//	magic    "KILNSNAP"
//	version  uvarint (3; 1 and 2 are still read)
//	header   string chunker ("fastcdc-v1.0.0/262144/1048576/4194304")
//	start    varint: when the snapshot began, Unix nanoseconds (v2 and up)
//	space    string: the chunk space its chunks are named in (v3 only;
//	         "" in v3 and every v1 and v2 manifest: the shared space;
//	         see ChunkKey)
//	entries  one record each, in walk order (see below)
//	end      'e', uvarint entries, uvarint files, uvarint bytes of content,
//	         then the SHA-256 of every byte before it (magic to the counts)
//
// A record is a kind byte and fields; strings are a uvarint length and the
// bytes; mode is the permission bits (uvarint), mtime Unix nanoseconds
// (varint):
//
//	'd' path mode mtime
//	'f' path mode mtime [ctime inode] size(uvarint) n(uvarint) n × extent
//	'l' path mtime target
//
// In v2 every mtime is written as a varint of the difference from the
// previous record's (0 for the first), and a file has what a later
// snapshot compares to reuse its chunks without reading it (doc.go,
// "Parent"): its ctime, as a varint of ctime - mtime (0 for most files),
// and its inode number, as a varint of the difference from the previous
// file's (files made one after another have close numbers); a restore
// ignores both.
//
// An extent is a slice of a chunk: the chunk, then offset and length
// (uvarint) in it. v1 names the chunk by sha256[32] and chunk length
// (uvarint), then the offset. v2 writes a byte first: 0 for a chunk named
// as in v1 then the offset; 1 for the chunk of the previous extent, then
// the offset; 2 for the chunk of the previous extent at the offset where
// that extent ended (the files of a pack follow each other). Then the
// length. A file cut alone has extents that are whole chunks; small files
// share packs (doc.go).
const (
	manifestMagic = "KILNSNAP"
	Version       = 3
)

// Record kinds.
const (
	KindDir  byte = 'd'
	KindFile byte = 'f'
	KindLink byte = 'l'
	kindEnd  byte = 'e'
)

// Bounds a manifest must keep; beyond them it is refused as corrupt, so a
// hostile one cannot make the reader allocate without bound.
const (
	// MaxChunk is the largest chunk a manifest may name (the cutter's
	// largest).
	MaxChunk       = 4 << 20
	maxStringLen   = 4096    // a path or a link target (files.MaxPathLen)
	maxFileChunks  = 1 << 20 // extents of one file: > 1 TiB at the mean chunk size
	maxHeaderField = 256
	MaxSpaceLen    = 64
)

// ChunkRef is one chunk of a file: the SHA-256 of its bytes (its name in
// its chunk space) and its length.
type ChunkRef struct {
	Sum [32]byte
	Len int64
}

// Key is the blob key of snapshot id's manifest.
func Key(id string) string { return "manifests/" + id }

// ChunkKey is the blob key of the chunk of SHA-256 sum in chunk space
// space: chunks/<first 2 hex>/<64 hex> in the shared space (""),
// chunks/<space>/<first 2 hex>/<64 hex> in any other. A chunk is stored
// once per space: snapshots of one space share it, snapshots of two
// spaces each store their own (internal/snapshot gives each team its
// space, so a team cannot learn from what it stores whether another
// team holds the same content).
func ChunkKey(space string, sum [32]byte) string {
	n := len("chunks/")
	if space != "" {
		n += len(space) + 1
	}
	b := make([]byte, n+2+1+64)
	copy(b, "chunks/")
	if space != "" {
		copy(b[7:], space)
		b[n-1] = '/'
	}
	hex.Encode(b[n:n+2], sum[:1])
	b[n+2] = '/'
	hex.Encode(b[n+3:], sum[:])
	return string(b)
}

// ValidSpace checks a chunk space's name: at most 64 characters of
// a-z, 0-9, '_' and '-' ("" is the shared space). A name is a directory
// of the blob store (whose keys are lower case), so nothing else may
// reach it.
func ValidSpace(space string) error {
	if len(space) > MaxSpaceLen {
		return fmt.Errorf("chunk space %q: longer than %d characters", space, MaxSpaceLen)
	}
	for i := 0; i < len(space); i++ {
		c := space[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '_' || c == '-') {
			return fmt.Errorf("chunk space %q: only a-z, 0-9, '_' and '-' may name one", space)
		}
	}
	return nil
}

// Extent is a slice of a chunk, part of a file's content.
type Extent struct {
	Chunk    ChunkRef
	Off, Len int64
}

// Entry is one record of a manifest.
type Entry struct {
	Kind    byte
	Path    string      // root-relative, cleaned, never "."
	Mode    fs.FileMode // permission bits only
	Mtime   int64       // Unix nanoseconds
	Size    int64       // files: bytes of content (the sum of the extents)
	Extents []Extent    // files, in order
	Target  string      // links
	// Files, v2: what a later snapshot compares (Stat is false in v1).
	Stat  bool
	Ctime int64 // Unix nanoseconds
	Ino   uint64
}

// Totals is what the end record counts.
type Totals struct {
	Entries, Files, Bytes int64
}

// Encoder writes a manifest. It writes what it is given: checking entries
// is the reader's job (a restore trusts nothing it reads), which is also
// how tests craft hostile manifests.
type Encoder struct {
	zw        *zstd.Encoder
	bw        *bufio.Writer
	sum       hash.Hash
	mw        io.Writer // bw and sum
	buf       []byte
	tot       Totals
	err       error
	done      bool
	version   int
	prevIno   uint64
	prevMtime int64
	prev      Extent // the last extent written
	hasPrev   bool
}

// Header is what a manifest says before its entries.
type Header struct {
	// Chunker names the cutter and its sizes: a restore does not need it
	// (chunks are named by content), but a later version that cuts
	// differently can tell the snapshots apart.
	Chunker string
	Start   int64  // when the snapshot began, Unix nanoseconds (v2 and up)
	Space   string // the chunk space its chunks are named in (v3 only)
}

// NewEncoder starts a manifest on w and writes its magic and header.
func NewEncoder(w io.Writer, h Header) (*Encoder, error) {
	return NewEncoderVersion(w, Version, h)
}

// NewEncoderVersion writes a manifest of an older version (tests: a
// store holds manifests of every version this Kiln reads); versions
// before 3 have no space (it must be "").
func NewEncoderVersion(w io.Writer, version int, h Header) (*Encoder, error) {
	if version < 3 && h.Space != "" {
		return nil, fmt.Errorf("manifest version %d has no chunk space", version)
	}
	// The default level: 1.5 % smaller than the fastest on a world's
	// manifest, and 40 ms less than the better level on 20,000 files (a
	// second snapshot's budget is a few hundred ms).
	zw, err := zstd.NewWriter(w, zstd.WithEncoderLevel(zstd.SpeedDefault), zstd.WithEncoderConcurrency(1),
		zstd.WithWindowSize(1<<20), zstd.WithLowerEncoderMem(true))
	if err != nil {
		return nil, fmt.Errorf("manifest encoder: %w", err)
	}
	e := &Encoder{zw: zw, bw: bufio.NewWriterSize(zw, 64<<10), sum: sha256.New(), version: version}
	e.mw = io.MultiWriter(e.bw, e.sum)
	e.buf = append(e.buf[:0], manifestMagic...)
	e.buf = binary.AppendUvarint(e.buf, uint64(version))
	e.buf = appendString(e.buf, h.Chunker)
	if version >= 2 {
		e.buf = binary.AppendVarint(e.buf, h.Start)
	}
	if version >= 3 {
		e.buf = appendString(e.buf, h.Space)
	}
	e.flush()
	return e, e.err
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func (e *Encoder) flush() {
	if e.err == nil {
		_, e.err = e.mw.Write(e.buf)
	}
	e.buf = e.buf[:0]
}

// Add writes one record.
func (e *Encoder) Add(en *Entry) error {
	b := append(e.buf[:0], en.Kind)
	b = appendString(b, en.Path)
	mtime := en.Mtime
	if e.version >= 2 {
		mtime -= e.prevMtime
	}
	switch en.Kind {
	case KindDir:
		b = binary.AppendUvarint(b, uint64(en.Mode.Perm()))
		b = binary.AppendVarint(b, mtime)
	case KindFile:
		b = binary.AppendUvarint(b, uint64(en.Mode.Perm()))
		b = binary.AppendVarint(b, mtime)
		if e.version >= 2 {
			b = binary.AppendVarint(b, en.Ctime-en.Mtime)
			b = binary.AppendVarint(b, int64(en.Ino-e.prevIno))
			e.prevIno = en.Ino
		}
		b = binary.AppendUvarint(b, uint64(en.Size))
		b = binary.AppendUvarint(b, uint64(len(en.Extents)))
		for _, x := range en.Extents {
			same := e.version >= 2 && e.hasPrev && x.Chunk == e.prev.Chunk
			switch {
			case same && x.Off == e.prev.Off+e.prev.Len:
				b = append(b, 2)
			case same:
				b = append(b, 1)
				b = binary.AppendUvarint(b, uint64(x.Off))
			default:
				if e.version >= 2 {
					b = append(b, 0)
				}
				b = append(b, x.Chunk.Sum[:]...)
				b = binary.AppendUvarint(b, uint64(x.Chunk.Len))
				b = binary.AppendUvarint(b, uint64(x.Off))
			}
			e.prev, e.hasPrev = x, true
			b = binary.AppendUvarint(b, uint64(x.Len))
		}
		e.tot.Files++
		e.tot.Bytes += en.Size
	case KindLink:
		b = binary.AppendVarint(b, mtime)
		b = appendString(b, en.Target)
	default:
		return fmt.Errorf("manifest encoder: unknown kind %q", en.Kind)
	}
	e.prevMtime = en.Mtime
	e.tot.Entries++
	e.buf = b
	e.flush()
	return e.err
}

// Close writes the end record and ends the zstd stream (not w).
func (e *Encoder) Close() error {
	if e.done {
		return e.err
	}
	e.done = true
	b := append(e.buf[:0], kindEnd)
	b = binary.AppendUvarint(b, uint64(e.tot.Entries))
	b = binary.AppendUvarint(b, uint64(e.tot.Files))
	b = binary.AppendUvarint(b, uint64(e.tot.Bytes))
	e.buf = b
	e.flush()
	if e.err != nil {
		return e.err
	}
	if _, err := e.bw.Write(e.sum.Sum(nil)); err != nil {
		return err
	}
	if err := e.bw.Flush(); err != nil {
		return err
	}
	return e.zw.Close()
}

// ErrInvalid is a manifest refused before anything was written:
// corrupt (truncated, a wrong checksum, an unknown version) or hostile (a
// path that is not clean and relative, a duplicate, an entry under
// something that is not a directory, a link leading out of the root,
// chunks that do not add up to the file's size). It is wrapped with the
// reason.
var ErrInvalid = errors.New("invalid snapshot manifest")

func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
}

// Decoder reads a manifest record by record, without holding more than
// one: a manifest of any size is read in bounded memory. It checks the
// format only; validator checks what the entries say.
type Decoder struct {
	zr        *zstd.Decoder
	br        *bufio.Reader
	sum       hash.Hash
	version   uint64
	header    string
	start     int64  // v2: when the snapshot began, Unix ns; 0 in v1
	space     string // v3: the chunk space; "" before
	tot       Totals
	end       bool
	buf       []byte
	one       [1]byte
	prevIno   uint64
	prevMtime int64
	prev      Extent // the last extent read
	hasPrev   bool
}

// NewDecoder starts reading the manifest r and checks its magic and
// version. The caller closes it.
func NewDecoder(r io.Reader) (*Decoder, error) {
	zr, err := zstd.NewReader(r, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxWindow(8<<20), zstd.WithDecoderLowmem(true))
	if err != nil {
		return nil, fmt.Errorf("manifest decoder: %w", err)
	}
	d := &Decoder{zr: zr, br: bufio.NewReaderSize(zr, 64<<10), sum: sha256.New()}
	magic := make([]byte, len(manifestMagic))
	if err := d.full(magic); err != nil || string(magic) != manifestMagic {
		zr.Close()
		return nil, invalidf("not a snapshot manifest")
	}
	v, err := d.uvarint()
	if err == nil && (v < 1 || v > Version) {
		err = invalidf("version %d (this Kiln reads versions 1 to %d)", v, Version)
	}
	d.version = v
	if err == nil {
		d.header, err = d.string(maxHeaderField)
	}
	if err == nil && v >= 2 {
		d.start, err = d.varint()
	}
	if err == nil && v >= 3 {
		if d.space, err = d.string(MaxSpaceLen); err == nil && ValidSpace(d.space) != nil {
			err = invalidf("chunk space %q", d.space)
		}
	}
	if err != nil {
		zr.Close()
		return nil, err
	}
	return d, nil
}

func (d *Decoder) Close() { d.zr.Close() }

// corrupt turns a read error into ErrInvalid (a manifest that
// ends early or does not decompress is corrupt), keeping the cause.
func corrupt(err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return invalidf("truncated")
	}
	if errors.Is(err, ErrInvalid) {
		return err
	}
	return fmt.Errorf("%w: %w", ErrInvalid, err)
}

// full reads len(p) bytes into the checksum.
func (d *Decoder) full(p []byte) error {
	if _, err := io.ReadFull(d.br, p); err != nil {
		return corrupt(err)
	}
	d.sum.Write(p)
	return nil
}

func (d *Decoder) byte() (byte, error) {
	b, err := d.br.ReadByte()
	if err != nil {
		return 0, corrupt(err)
	}
	d.one[0] = b
	d.sum.Write(d.one[:])
	return b, nil
}

// sumReader feeds what binary.ReadUvarint reads into the checksum.
type sumReader struct{ d *Decoder }

func (s sumReader) ReadByte() (byte, error) { return s.d.byte() }

func (d *Decoder) uvarint() (uint64, error) {
	v, err := binary.ReadUvarint(sumReader{d})
	if err != nil {
		return 0, corrupt(err)
	}
	return v, nil
}

func (d *Decoder) varint() (int64, error) {
	v, err := binary.ReadVarint(sumReader{d})
	if err != nil {
		return 0, corrupt(err)
	}
	return v, nil
}

func (d *Decoder) string(max int) (string, error) {
	n, err := d.uvarint()
	if err != nil {
		return "", err
	}
	if n > uint64(max) {
		return "", invalidf("a string of %d bytes (at most %d)", n, max)
	}
	if cap(d.buf) < int(n) {
		d.buf = make([]byte, n)
	}
	b := d.buf[:n]
	if err := d.full(b); err != nil {
		return "", err
	}
	return string(b), nil
}

// Next reads the next record into en (reusing its extent slice), or
// returns io.EOF after the end record, once its counts and the checksum
// were found right and nothing follows it.
func (d *Decoder) Next(en *Entry) error {
	if d.end {
		return io.EOF
	}
	kind, err := d.byte()
	if err != nil {
		return err
	}
	if kind == kindEnd {
		return d.finish()
	}
	*en = Entry{Kind: kind, Extents: en.Extents[:0]}
	if en.Path, err = d.string(maxStringLen); err != nil {
		return err
	}
	switch kind {
	case KindDir, KindFile:
		mode, err := d.uvarint()
		if err != nil {
			return err
		}
		if mode&^0o777 != 0 {
			return invalidf("%q: mode %o has bits beyond rwxrwxrwx", en.Path, mode)
		}
		en.Mode = fs.FileMode(mode)
		if en.Mtime, err = d.mtime(); err != nil {
			return err
		}
		if kind == KindFile && d.version >= 2 {
			dc, err := d.varint()
			if err != nil {
				return err
			}
			di, err := d.varint()
			if err != nil {
				return err
			}
			en.Stat, en.Ctime, en.Ino = true, en.Mtime+dc, d.prevIno+uint64(di)
			d.prevIno = en.Ino
		}
		if kind == KindFile {
			if err := d.fileExtents(en); err != nil {
				return err
			}
		}
	case KindLink:
		if en.Mtime, err = d.mtime(); err != nil {
			return err
		}
		if en.Target, err = d.string(maxStringLen); err != nil {
			return err
		}
	default:
		return invalidf("unknown record kind %#x", kind)
	}
	d.tot.Entries++
	return nil
}

// mtime reads a record's mtime (v2: the difference from the previous
// record's).
func (d *Decoder) mtime() (int64, error) {
	v, err := d.varint()
	if err != nil {
		return 0, err
	}
	if d.version >= 2 {
		v += d.prevMtime
		d.prevMtime = v
	}
	return v, nil
}

// fileExtents reads a file record's size and extents, checking that
// every chunk is 1 to MaxChunk bytes, that every extent is a non-empty
// slice of its chunk, and that they add up to the size.
func (d *Decoder) fileExtents(en *Entry) error {
	size, err := d.uvarint()
	if err != nil {
		return err
	}
	n, err := d.uvarint()
	if err != nil {
		return err
	}
	if n > maxFileChunks || size > 1<<62 {
		return invalidf("%q: %d extents, %d bytes", en.Path, n, size)
	}
	var total uint64
	for range n {
		var x Extent
		var flag byte
		if d.version >= 2 {
			if flag, err = d.byte(); err != nil {
				return err
			}
			if flag > 2 || (flag > 0 && !d.hasPrev) {
				return invalidf("%q: an extent's chunk flag %d", en.Path, flag)
			}
		}
		var clen, off, l uint64
		switch flag {
		case 0:
			if err := d.full(x.Chunk.Sum[:]); err != nil {
				return err
			}
			if clen, err = d.uvarint(); err != nil {
				return err
			}
		default:
			x.Chunk = d.prev.Chunk
			clen = uint64(x.Chunk.Len)
		}
		if flag == 2 {
			off = uint64(d.prev.Off + d.prev.Len)
		} else if off, err = d.uvarint(); err != nil {
			return err
		}
		if l, err = d.uvarint(); err != nil {
			return err
		}
		if clen == 0 || clen > MaxChunk || l == 0 || off >= clen || l > clen-off {
			return invalidf("%q: an extent of %d bytes at %d of a chunk of %d", en.Path, l, off, clen)
		}
		x.Chunk.Len, x.Off, x.Len = int64(clen), int64(off), int64(l)
		d.prev, d.hasPrev = x, true
		total += l
		en.Extents = append(en.Extents, x)
	}
	if total != size {
		return invalidf("%q: extents of %d bytes for a size of %d", en.Path, total, size)
	}
	en.Size = int64(size)
	d.tot.Files++
	d.tot.Bytes += en.Size
	return nil
}

// finish reads the end record: counts, checksum, then nothing.
func (d *Decoder) finish() error {
	var got [3]uint64
	for i := range got {
		v, err := d.uvarint()
		if err != nil {
			return err
		}
		got[i] = v
	}
	if got != [3]uint64{uint64(d.tot.Entries), uint64(d.tot.Files), uint64(d.tot.Bytes)} {
		return invalidf("the end record counts %v, the manifest holds %d entries, %d files, %d bytes", got, d.tot.Entries, d.tot.Files, d.tot.Bytes)
	}
	want := d.sum.Sum(nil)
	var sum [32]byte
	if _, err := io.ReadFull(d.br, sum[:]); err != nil {
		return corrupt(err)
	}
	if !bytes.Equal(sum[:], want) {
		return invalidf("checksum mismatch")
	}
	if _, err := d.br.ReadByte(); !errors.Is(err, io.EOF) {
		if err != nil {
			return corrupt(err)
		}
		return invalidf("data after the end record")
	}
	d.end = true
	return io.EOF
}

// Info is what Read tells of a whole manifest.
type Info struct {
	Totals  Totals
	Version uint64
	Start   int64  // v2: when the snapshot began, Unix ns
	Space   string // v3: the chunk space ("" before)
}

// Read reads the manifest r, checking every entry (Validator) and
// handing it to fn (the entry is reused for the next one), and returns
// its totals once its end was checked. It stops at the first error:
// ErrInvalid for a manifest that is corrupt or hostile, fn's, ctx's.
func Read(ctx context.Context, r io.Reader, fn func(*Entry) error) (Info, error) {
	d, err := NewDecoder(r)
	if err != nil {
		return Info{}, err
	}
	defer d.Close()
	v := NewValidator()
	var en Entry
	for {
		if err := ctx.Err(); err != nil {
			return Info{}, err
		}
		err := d.Next(&en)
		if errors.Is(err, io.EOF) {
			return Info{Totals: d.tot, Version: d.version, Start: d.start, Space: d.space}, nil
		}
		if err != nil {
			return Info{}, err
		}
		if err := v.Check(&en); err != nil {
			return Info{}, err
		}
		if err := fn(&en); err != nil {
			return Info{}, err
		}
	}
}
