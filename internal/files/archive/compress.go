package archive

import (
	"archive/tar"
	"archive/zip"
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/klauspost/compress/flate"
	"github.com/klauspost/compress/zstd"
	"github.com/klauspost/pgzip"

	"github.com/kilnhq/kiln/internal/files"
	"github.com/kilnhq/kiln/internal/panics"
	"github.com/kilnhq/kiln/internal/quota"
	"github.com/kilnhq/kiln/internal/validate"
)

// Compression settings, chosen on bench/files-archive.sh (1 GiB world,
// 2 cores): see doc.go.
const (
	gzipLevel     = 7       // see doc.go: within 1% of gzip -6 on a world, 5% on text
	gzipBlockSize = 1 << 20 // pgzip block; ≥ 1 MiB keeps the size within 1% of one stream
	zipLevel      = flate.DefaultCompression
	copyBuffer    = 1 << 20 // file reads into the archive
)

// errConsumerGone tells Compress's producer that the writer of the archive
// file stopped reading (the disk limit, an I/O error): its own error is
// the one returned.
var errConsumerGone = errors.New("archive: writer stopped")

// Compress puts names (files and directories, recursively) into a new
// archive in directory dir and returns the archive's entry. dir and names
// are root-relative, cleaned paths (files.Clean, files.Join); every name
// must be dir itself (then everything in it is archived) or lie under dir,
// else a *validate.Error at "files[i]". Entry names in the archive are
// relative to dir. Symlinks are stored as links, never followed, when
// they stay inside (relative, inside dir once extracted, not out of the
// root through the links on their way: see doc.go); the others are left
// out, as are regular files with other hard links (never read), devices,
// FIFOs, sockets and temporary ".kiln-tmp-*" files.
//
// The archive is named "archive-<UTC time>.<format>" (time like
// 2026-11-22T10-15-03Z), with "-2", "-3"… added when taken; it never
// replaces a file. It is written through Root.WriteFile, so free (what the
// server may still grow by) is enforced on the bytes written: passing it
// returns files.ErrQuota and leaves nothing behind, as does any other
// failure or ctx's end.
//
// Errors: *validate.Error, files.ErrNotFound (a name or dir is missing),
// files.ErrNotDirectory (dir), files.ErrQuota, ctx.Err().
func Compress(ctx context.Context, r *files.Root, dir string, names []string, format Format, res *quota.Reservation) (files.Entry, error) {
	return compress(ctx, r, dir, names, format, res, time.Now())
}

func compress(ctx context.Context, r *files.Root, dir string, names []string, format Format, res *quota.Reservation, now time.Time) (files.Entry, error) {
	if _, err := ParseFormat("format", string(format)); err != nil || format == "" {
		return files.Entry{}, validate.Errorf("format", "must be one of tar.gz, zip, tar.zst")
	}
	if err := mustClean("root", dir); err != nil {
		return files.Entry{}, err
	}
	roots, err := archiveRoots(dir, names)
	if err != nil {
		return files.Entry{}, err
	}
	if e, err := r.Stat(dir); err != nil {
		return files.Entry{}, err
	} else if !e.IsDir() {
		return files.Entry{}, files.ErrNotDirectory
	}
	for _, n := range roots {
		if _, err := r.Stat(n); err != nil {
			return files.Entry{}, fmt.Errorf("compress %s: %w", files.Display(n), err)
		}
	}

	tmp := join(dir, res.TempName("archive-"+randomHex()))
	var pipe archivePipe = newChunkPipe()
	if format == TarZst {
		if pipe, err = newZstdPipe(zstd.SpeedDefault); err != nil {
			return files.Entry{}, err
		}
	}
	done := make(chan error, 1)
	go func() {
		// A panic fails the archive, never the process.
		err := panics.Catch(func() error { return encode(ctx, r, dir, roots, format, pipe) })
		pipe.CloseWithError(err) // nil: the reader sees EOF
		done <- err
	}()
	_, werr := r.WriteFile(tmp, pipe, res)
	pipe.Stop() // unblocks the producer if WriteFile stopped early
	perr := <-done
	if werr != nil || perr != nil {
		_ = r.Delete(tmp) // WriteFile removed its own temporary file; this one only exists if it succeeded
		if perr != nil && !errors.Is(perr, errConsumerGone) {
			return files.Entry{}, perr
		}
		return files.Entry{}, werr
	}

	base := "archive-" + now.UTC().Format("2006-01-02T15-04-05Z")
	for i := 1; i <= 1000; i++ {
		name := base + "." + string(format)
		if i > 1 {
			name = base + "-" + strconv.Itoa(i) + "." + string(format)
		}
		final := join(dir, name)
		err := r.Rename(tmp, final)
		if errors.Is(err, files.ErrExists) {
			continue
		}
		if err != nil {
			_ = r.Delete(tmp)
			return files.Entry{}, err
		}
		return r.Stat(final)
	}
	_ = r.Delete(tmp)
	return files.Entry{}, fmt.Errorf("name the archive: %w", files.ErrExists)
}

// archiveRoots checks names against dir and drops those inside another
// (they would be stored twice). The result is sorted.
func archiveRoots(dir string, names []string) ([]string, error) {
	switch {
	case len(names) == 0:
		return nil, validate.Errorf("files", "must name at least one file")
	case len(names) > files.MaxBatchFiles:
		return nil, validate.Errorf("files", "must name at most %d files", files.MaxBatchFiles)
	}
	set := make(map[string]bool, len(names))
	for i, n := range names {
		field := "files[" + strconv.Itoa(i) + "]"
		if err := mustClean(field, n); err != nil {
			return nil, err
		}
		if n != dir && dir != "." && !strings.HasPrefix(n, dir+"/") {
			return nil, validate.Errorf(field, "is not inside %s", files.Display(dir))
		}
		set[n] = true
	}
	var out []string
	for n := range set {
		inside := false
		for p := n; p != dir && p != "."; {
			p = path.Dir(p)
			if set[p] {
				inside = true
				break
			}
		}
		if !inside {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out, nil
}

// mustClean refuses a path that files.Clean would change: Compress and
// Decompress take cleaned paths, as Root does.
func mustClean(field, p string) error {
	c, err := files.Clean(field, p)
	if err != nil {
		return err
	}
	if c != p {
		return validate.Errorf(field, "is not a cleaned path")
	}
	return nil
}

// join appends a relative path to a root-relative directory.
func join(dir, rel string) string {
	if dir == "." {
		return rel
	}
	return dir + "/" + rel
}

func randomHex() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// archivePipe carries the archive from encode to Root.WriteFile: a
// chunkPipe, or for tar.zst a zstdPipe, which compresses on its way.
type archivePipe interface {
	io.Writer
	io.Reader
	io.WriterTo
	CloseWithError(error)
	Stop()
}

type nopCloser struct{}

func (nopCloser) Close() error { return nil }

// archiveWriter is what one format needs of a walked entry.
type archiveWriter interface {
	dir(name string, e files.Entry) error
	symlink(name, target string, e files.Entry) error
	file(name string, e files.Entry, f *os.File) error
	close() error
}

// encode walks roots and writes the archive to w.
func encode(ctx context.Context, r *files.Root, dir string, roots []string, format Format, w io.Writer) error {
	aw, err := newArchiveWriter(format, w)
	if err != nil {
		return err
	}
	for _, root := range roots {
		err := r.Walk(ctx, root, func(rel string, e files.Entry, open files.Opener) error {
			if rel == dir {
				return nil // "everything in dir": dir itself has no name in the archive
			}
			name := rel
			if dir != "." {
				name = strings.TrimPrefix(rel, dir+"/")
			}
			switch {
			case e.IsDir():
				return aw.dir(name, e)
			case e.IsSymlink():
				target, err := r.Readlink(rel)
				if errors.Is(err, files.ErrNotFound) {
					return nil // removed meanwhile
				}
				if err != nil {
					return err
				}
				if !keepLink(r, rel, name, target) {
					return nil // leads outside the root, or could once extracted: left out
				}
				return aw.symlink(name, target, e)
			case e.IsFile() && open.Valid():
				f, err := open.Open()
				if errors.Is(err, files.ErrNotFound) || errors.Is(err, files.ErrNotFile) {
					return nil // removed or swapped meanwhile
				}
				if err != nil {
					return err
				}
				defer f.Close()
				if linked, err := hardLinked(f); linked || err != nil {
					return err // other hard links, maybe outside the root: left out, unread
				}
				return aw.file(name, e, f)
			}
			return nil // a device, FIFO or socket: not archived
		})
		if err != nil {
			aw.close()
			return err
		}
	}
	return aw.close()
}

func newArchiveWriter(format Format, w io.Writer) (archiveWriter, error) {
	buf := make([]byte, copyBuffer)
	switch format {
	case TarGz:
		gz, err := pgzip.NewWriterLevel(w, gzipLevel)
		if err != nil {
			return nil, err
		}
		if err := gz.SetConcurrency(gzipBlockSize, 2*cores()); err != nil {
			return nil, err
		}
		return &tarWriter{tw: tar.NewWriter(gz), inner: gz, buf: buf}, nil
	case TarZst:
		// The compression is in the pipe (zstdPipe): it ends with the
		// pipe's CloseWithError, not here.
		if _, ok := w.(*zstdPipe); !ok {
			return nil, errors.New("archive: tar.zst is written into a zstdPipe")
		}
		return &tarWriter{tw: tar.NewWriter(w), inner: nopCloser{}, buf: buf}, nil
	case Zip:
		bw := bufio.NewWriterSize(w, 1<<20)
		zw := zip.NewWriter(bw)
		zw.RegisterCompressor(zip.Deflate, func(w io.Writer) (io.WriteCloser, error) {
			return flate.NewWriter(w, zipLevel)
		})
		return &zipWriter{zw: zw, bw: bw, buf: buf}, nil
	}
	return nil, fmt.Errorf("archive: unknown format %q", format)
}

// copyFile copies exactly size bytes of f to w: a file that grew since it
// was listed is cut at that size, one that shrank is padded with zeros (a
// tar header already announced the size).
func copyFile(w io.Writer, f *os.File, size int64, buf []byte) error {
	n, err := io.CopyBuffer(w, io.LimitReader(f, size), buf)
	if err != nil {
		return fmt.Errorf("read %s: %w", f.Name(), err)
	}
	if n < size {
		clear(buf)
	}
	for n < size {
		k := int64(len(buf))
		k = min(k, size-n)
		if _, err := w.Write(buf[:k]); err != nil {
			return err
		}
		n += k
	}
	return nil
}

type tarWriter struct {
	tw    *tar.Writer
	inner io.Closer
	buf   []byte
}

func tarHeader(name string, e files.Entry) *tar.Header {
	return &tar.Header{
		Name:    name,
		Mode:    int64(e.Mode.Perm()),
		ModTime: e.ModTime.Truncate(time.Second),
	}
}

func (t *tarWriter) dir(name string, e files.Entry) error {
	h := tarHeader(name+"/", e)
	h.Typeflag = tar.TypeDir
	return t.tw.WriteHeader(h)
}

func (t *tarWriter) symlink(name, target string, e files.Entry) error {
	h := tarHeader(name, e)
	h.Typeflag = tar.TypeSymlink
	h.Linkname = target
	return t.tw.WriteHeader(h)
}

func (t *tarWriter) file(name string, e files.Entry, f *os.File) error {
	h := tarHeader(name, e)
	h.Typeflag = tar.TypeReg
	h.Size = e.Size
	if err := t.tw.WriteHeader(h); err != nil {
		return err
	}
	return copyFile(t.tw, f, e.Size, t.buf)
}

func (t *tarWriter) close() error {
	err := t.tw.Close()
	if cerr := t.inner.Close(); err == nil {
		err = cerr
	}
	return err
}

type zipWriter struct {
	zw  *zip.Writer
	bw  *bufio.Writer
	buf []byte
}

func zipHeader(name string, e files.Entry, method uint16) *zip.FileHeader {
	h := &zip.FileHeader{Name: name, Method: method, Modified: e.ModTime}
	h.SetMode(e.Mode &^ (fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky))
	return h
}

func (z *zipWriter) dir(name string, e files.Entry) error {
	_, err := z.zw.CreateHeader(zipHeader(name+"/", e, zip.Store))
	return err
}

func (z *zipWriter) symlink(name, target string, e files.Entry) error {
	w, err := z.zw.CreateHeader(zipHeader(name, e, zip.Store))
	if err != nil {
		return err
	}
	_, err = io.WriteString(w, target)
	return err
}

func (z *zipWriter) file(name string, e files.Entry, f *os.File) error {
	w, err := z.zw.CreateHeader(zipHeader(name, e, zip.Deflate))
	if err != nil {
		return err
	}
	// A zip entry announces no size up front: copy what is there, up to
	// the size listed (a file appended to meanwhile is cut there).
	if _, err := io.CopyBuffer(w, io.LimitReader(f, e.Size), z.buf); err != nil {
		return fmt.Errorf("read %s: %w", f.Name(), err)
	}
	return nil
}

func (z *zipWriter) close() error {
	err := z.zw.Close()
	if ferr := z.bw.Flush(); err == nil {
		err = ferr
	}
	return err
}
