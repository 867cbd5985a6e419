package archive

import (
	"archive/tar"
	"archive/zip"
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"strings"

	"github.com/klauspost/compress/flate"
	"github.com/klauspost/compress/zstd"
	"github.com/klauspost/pgzip"

	"github.com/kilnhq/kiln/internal/files"
)

// readBuffer is how much of the archive file is read at once.
const readBuffer = 1 << 20

type entryType int

const (
	typeFile entryType = iota
	typeDir
	typeSymlink
	typeHardlink
	typeSkip // metadata (a pax global header): nothing to extract
)

func (t entryType) String() string {
	switch t {
	case typeFile, typeHardlink:
		return "file"
	case typeDir:
		return "directory"
	case typeSymlink:
		return "symbolic link"
	}
	return "entry"
}

// entry is one archive member as a source reports it, before any check.
type entry struct {
	name   string // as the archive spells it
	typ    entryType
	refuse string // non-empty: the archive is refused for this entry
	perm   fs.FileMode
	link   string // a symlink's target, a hard link's target entry
	size   int64  // declared content size, -1 when unknown
	open   func() (io.ReadCloser, error)
}

// source yields the entries of one archive.
type source interface {
	next() (entry, error) // io.EOF after the last
	// declared is the total content size the archive declares up front,
	// when its format has it (a zip's central directory).
	declared() (int64, bool)
	close() error
}

// srcFile reads the archive file, marking its errors as I/O errors (an
// error of a decoder is corrupt data).
type srcFile struct{ f *os.File }

func (s srcFile) Read(p []byte) (int, error) {
	n, err := s.f.Read(p)
	if err != nil && err != io.EOF {
		err = &ioError{err}
	}
	return n, err
}

func (s srcFile) ReadAt(p []byte, off int64) (int, error) {
	n, err := s.f.ReadAt(p, off)
	if err != nil && err != io.EOF {
		err = &ioError{err}
	}
	return n, err
}

// openSource opens archive f (size bytes) of kind k; stem is the name a
// single .gz file extracts to. A zip whose central directory holds more
// than maxEntries records is refused here, before it is read into memory.
func openSource(k kind, f *os.File, size int64, stem string, maxEntries int) (source, error) {
	in := bufio.NewReaderSize(srcFile{f}, readBuffer)
	switch k {
	case kindZip:
		return newZipSource(srcFile{f}, size, maxEntries)
	case kindTar:
		return &tarSource{tr: tar.NewReader(in)}, nil
	case kindTarGz, kindGz:
		gz, err := pgzip.NewReaderN(in, readBuffer, 4)
		if err != nil {
			return nil, err
		}
		if k == kindGz {
			return &oneFile{name: stem, r: gz, c: gz}, nil
		}
		return &tarSource{tr: tar.NewReader(gz), c: gz}, nil
	case kindTarZst:
		// The guard refuses a window over the limit, naming it, before the
		// decoder has the frame's header; WithDecoderMaxWindow is the net.
		g := newZstdGuard(in, zstdMaxWindow)
		zr, err := zstd.NewReader(g,
			zstd.WithDecoderMaxWindow(zstdMaxWindow),
			zstd.WithDecoderConcurrency(0))
		if err != nil {
			return nil, err
		}
		return &tarSource{tr: tar.NewReader(zstdGuarded{zr, g}), c: closerFunc(func() error { zr.Close(); return nil })}, nil
	case kindTarXz:
		xr, err := newXZReader(in) // each block's dictionary checked before it is allocated
		if err != nil {
			return nil, err
		}
		return &tarSource{tr: tar.NewReader(xr)}, nil
	}
	return nil, ErrUnsupported
}

type closerFunc func() error

func (c closerFunc) Close() error { return c() }

type tarSource struct {
	tr *tar.Reader
	c  io.Closer
}

func (s *tarSource) next() (entry, error) {
	h, err := s.tr.Next()
	if errors.Is(err, tar.ErrInsecurePath) {
		err = nil // the extractor checks every name itself, and names the entry
	}
	if errors.Is(err, tar.ErrFieldTooLong) {
		// archive/tar reads a PAX header or GNU long name into memory up
		// to 1 MiB, and refuses a longer one with this error.
		return entry{}, limitError("the archive has a tar extended header (PAX records or a long name) over 1 MiB; at most 1 MiB is allowed")
	}
	if err != nil {
		return entry{}, err
	}
	e := entry{name: h.Name, perm: fs.FileMode(h.Mode) & fs.ModePerm, link: h.Linkname, size: h.Size}
	switch h.Typeflag {
	case tar.TypeReg, '\x00', tar.TypeCont, tar.TypeGNUSparse:
		e.typ = typeFile
		e.open = func() (io.ReadCloser, error) { return io.NopCloser(s.tr), nil }
	case tar.TypeDir:
		e.typ = typeDir
	case tar.TypeSymlink:
		e.typ = typeSymlink
	case tar.TypeLink:
		e.typ = typeHardlink
	case tar.TypeChar, tar.TypeBlock:
		e.refuse = "is a device file"
	case tar.TypeFifo:
		e.refuse = "is a named pipe (FIFO)"
	case tar.TypeXGlobalHeader:
		e.typ = typeSkip
	default:
		e.refuse = fmt.Sprintf("has an unsupported type %q", h.Typeflag)
	}
	return e, nil
}

func (s *tarSource) declared() (int64, bool) { return 0, false }

func (s *tarSource) close() error {
	if s.c != nil {
		return s.c.Close()
	}
	return nil
}

type zipSource struct {
	zr *zip.Reader
	i  int
}

// newZipSource reads a zip's central directory, after checkZipDirectory
// counted it without keeping it (see zipdir.go).
func newZipSource(ra io.ReaderAt, size int64, maxEntries int) (*zipSource, error) {
	dir, err := checkZipDirectory(ra, size, maxEntries)
	if err != nil {
		return nil, err
	}
	budget := &zipBudget{ra: ra, left: dir + zipBudgetSlack}
	zr, err := zip.NewReader(budget, size)
	if err != nil && !errors.Is(err, zip.ErrInsecurePath) {
		return nil, err
	}
	budget.open = true
	zr.RegisterDecompressor(zip.Deflate, func(r io.Reader) io.ReadCloser { return flate.NewReader(r) })
	zr.RegisterDecompressor(zstd.ZipMethodWinZip, zipZstd())
	return &zipSource{zr: zr}, nil
}

// zipZstd decompresses zstd zip entries (method 93) behind a zstdGuard.
func zipZstd() zip.Decompressor {
	dec := zstd.ZipDecompressor(zstd.WithDecoderMaxWindow(zstdMaxWindow))
	return func(r io.Reader) io.ReadCloser {
		g := newZstdGuard(r, zstdMaxWindow)
		rc := dec(g)
		return struct {
			io.Reader
			io.Closer
		}{zstdGuarded{rc, g}, rc}
	}
}

// Zip "version made by" hosts whose external attributes hold Unix modes.
const (
	zipCreatorUnix = 3
	zipCreatorMac  = 19
)

func (s *zipSource) next() (entry, error) {
	if s.i >= len(s.zr.File) {
		return entry{}, io.EOF
	}
	f := s.zr.File[s.i]
	s.i++
	e := entry{name: f.Name, size: clampSize(f.UncompressedSize64)}
	m := f.Mode()
	switch {
	case f.Flags&0x1 != 0:
		e.refuse = "is encrypted"
	case m&fs.ModeSymlink != 0:
		e.typ = typeSymlink
		target, err := readLinkTarget(f)
		if err != nil {
			return entry{}, err
		}
		if target == "" {
			e.refuse = "is a symbolic link with a target longer than 4096 bytes"
		}
		e.link = target
	case m&(fs.ModeDevice|fs.ModeCharDevice) != 0:
		e.refuse = "is a device file"
	case m&fs.ModeNamedPipe != 0:
		e.refuse = "is a named pipe (FIFO)"
	case m&fs.ModeSocket != 0:
		e.refuse = "is a socket"
	case m&fs.ModeIrregular != 0:
		e.refuse = "has an unsupported type"
	case m.IsDir() || strings.HasSuffix(f.Name, "/"):
		e.typ = typeDir
	default:
		e.typ = typeFile
		e.open = f.Open
	}
	// Modes only mean something when a Unix-like host wrote them; a zip
	// from Windows says 0666 or nothing.
	e.perm = m.Perm()
	if host := f.CreatorVersion >> 8; (host != zipCreatorUnix && host != zipCreatorMac) || e.perm == 0 {
		e.perm = 0o644
		if e.typ == typeDir {
			e.perm = 0o755
		}
	}
	return e, nil
}

// readLinkTarget reads a zip symlink's target (its content), "" when it is
// longer than a path may be.
func readLinkTarget(f *zip.File) (string, error) {
	rc, err := f.Open()
	if err != nil {
		return "", err
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, files.MaxPathLen+1))
	if err != nil {
		return "", err
	}
	if len(b) > files.MaxPathLen {
		return "", nil
	}
	return string(b), nil
}

func clampSize(n uint64) int64 {
	if n > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(n)
}

func (s *zipSource) declared() (int64, bool) {
	var total uint64
	for _, f := range s.zr.File {
		if f.Mode().IsRegular() && !strings.HasSuffix(f.Name, "/") {
			total += f.UncompressedSize64
			if total > math.MaxInt64 {
				return math.MaxInt64, true
			}
		}
	}
	return int64(total), true
}

func (s *zipSource) close() error { return nil }

// oneFile is a single compressed file (.gz): one entry.
type oneFile struct {
	name string
	r    io.Reader
	c    io.Closer
	done bool
}

func (s *oneFile) next() (entry, error) {
	if s.done {
		return entry{}, io.EOF
	}
	s.done = true
	return entry{name: s.name, typ: typeFile, perm: 0o644, size: -1,
		open: func() (io.ReadCloser, error) { return io.NopCloser(s.r), nil }}, nil
}

func (s *oneFile) declared() (int64, bool) { return 0, false }
func (s *oneFile) close() error            { return s.c.Close() }
