package files

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"runtime"
	"syscall"

	"golang.org/x/sync/errgroup"
	"golang.org/x/sys/unix"

	"github.com/kilnhq/kiln/internal/panics"
)

// Root is one server's file tree. It wraps an os.Root: every operation is
// relative to the directory handle opened at Open, and no path — however it
// is built, whatever symlinks it meets — reaches outside.
//
// Paths given to Root methods are already cleaned (Clean, Join): relative,
// without "..". A method never accepts a raw user string.
type Root struct {
	r   *os.Root
	dir string
	// fd is a descriptor of the root directory of its own, what openat2
	// resolves beneath (resolve.go); beneath says openat2 works here.
	fd      int
	beneath bool
	// owner is who entries Kiln creates here belong to (owner.go): the
	// root directory's owner, when that is a server's own user.
	owner *owner
}

// Open opens the server root at dir (an absolute host path from the node).
func Open(dir string) (*Root, error) {
	r, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("open server root: %w", classify(err))
	}
	// The root's own descriptor comes from the os.Root (its "."), not from
	// dir again: both name the same directory whatever happens to dir.
	f, err := r.OpenFile(".", os.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		r.Close()
		return nil, fmt.Errorf("open server root: %w", classify(err))
	}
	fd, err := unix.FcntlInt(f.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	f.Close()
	if err != nil {
		r.Close()
		return nil, fmt.Errorf("open server root: %w", err)
	}
	return &Root{r: r, dir: dir, fd: fd, beneath: probeBeneath(fd), owner: ownerOf(fd)}, nil
}

// Close releases the directory handles. A second Close does nothing
// more (the descriptor number is not closed again: it may be another
// file's by then).
func (r *Root) Close() error {
	if r.fd >= 0 {
		_ = unix.Close(r.fd)
		r.fd = -1
	}
	return r.r.Close()
}

// errUnclean means a caller passed a path that did not come from Clean:
// a bug in Kiln, refused rather than resolved.
var errUnclean = errors.New("files: path was not cleaned")

// checkClean refuses any path that Clean would change. Names in Kiln's
// namespace pass: Root's methods are also how Kiln moves its own
// temporary entries (an archive's temporary file renamed into place);
// users' paths were refused them by Clean before they got here.
func checkClean(paths ...string) error {
	for _, p := range paths {
		if c, err := clean("path", p, true); err != nil || c != p {
			return fmt.Errorf("%w: %q", errUnclean, p)
		}
	}
	return nil
}

// withDir runs fn with a file descriptor of directory rel (following
// symlinks inside the root only: openDir). Entries are then read and
// stat'ed relative to that descriptor, never by a host path.
func (r *Root) withDir(rel string, fn func(fd int) error) error {
	if err := checkClean(rel); err != nil {
		return err
	}
	fd, err := r.openDir(rel)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return fn(fd)
}

const statxMask = unix.STATX_TYPE | unix.STATX_MODE | unix.STATX_SIZE | unix.STATX_MTIME | unix.STATX_BTIME

// statAt stats name in the directory fd without following a final symlink.
func statAt(fd int, name string) (Entry, error) {
	var st unix.Statx_t
	if err := unix.Statx(fd, name, unix.AT_SYMLINK_NOFOLLOW|unix.AT_STATX_SYNC_AS_STAT, statxMask, &st); err != nil {
		return Entry{}, classify(&os.PathError{Op: "statx", Path: name, Err: err})
	}
	return fromStatx(name, &st), nil
}

// parallelStatMin is the directory size from which List stats its entries
// from several goroutines: one statx costs ~3 µs here (a VM), so a
// 10,000-entry directory spends ~30 ms in them one after the other
// (docs/benchmarks.md, files section); the kernel serves stats of one
// directory in parallel.
const parallelStatMin = 512

// entriesAt stats names in the directory fd (entries removed meanwhile are
// left out) and types them.
func entriesAt(fd int, names []string) ([]Entry, error) {
	entries := make([]Entry, len(names))
	found := make([]bool, len(names))
	statRange := func(lo, hi int) error {
		for i := lo; i < hi; i++ {
			e, err := statAt(fd, names[i])
			if errors.Is(err, ErrNotFound) {
				continue // removed meanwhile
			}
			if err != nil {
				return err
			}
			e.MIME = typeOf(e, func() []byte { return sniffAt(fd, names[i]) })
			entries[i], found[i] = e, true
		}
		return nil
	}
	workers := min(runtime.GOMAXPROCS(0), 8)
	if len(names) < parallelStatMin || workers < 2 {
		if err := statRange(0, len(names)); err != nil {
			return nil, err
		}
	} else {
		var g errgroup.Group
		per := (len(names) + workers - 1) / workers
		for lo := 0; lo < len(names); lo += per {
			hi := min(lo+per, len(names))
			g.Go(func() error { return panics.Catch(func() error { return statRange(lo, hi) }) })
		}
		if err := g.Wait(); err != nil {
			return nil, err
		}
	}
	out := entries[:0]
	for i, e := range entries {
		if found[i] {
			out = append(out, e)
		}
	}
	return out, nil
}

// sniffLen is how much of a file's start typeOf may look at.
const sniffLen = 512

// sniffAt reads the first 512 bytes of a regular file name in fd, never
// following a symlink and never blocking on a FIFO.
func sniffAt(fd int, name string) []byte {
	nfd, err := unix.Openat(fd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil
	}
	defer unix.Close(nfd)
	buf := make([]byte, sniffLen)
	n, _ := unix.Read(nfd, buf)
	if n <= 0 {
		return nil
	}
	return buf[:n]
}

// Stat describes rel itself (a symlink is described, not followed).
func (r *Root) Stat(rel string) (Entry, error) {
	dir, name := path.Dir(rel), path.Base(rel)
	var e Entry
	err := r.withDir(dir, func(fd int) error {
		var err error
		if e, err = statAt(fd, name); err != nil {
			return err
		}
		if name == "." {
			e.Name = "/"
		}
		e.MIME = typeOf(e, func() []byte { return sniffAt(fd, name) })
		return nil
	})
	return e, err
}

// OpenRead opens regular file rel for reading (symlinks inside the root are
// followed). A directory, device, FIFO or socket is ErrNotFile: it is
// opened non-blocking and checked on the open descriptor, so swapping the
// path meanwhile changes nothing.
func (r *Root) OpenRead(rel string) (*os.File, Entry, error) {
	if err := checkClean(rel); err != nil {
		return nil, Entry{}, err
	}
	fd, err := r.openBeneath(rel, unix.O_RDONLY|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, Entry{}, err
	}
	// Regular files ignore O_NONBLOCK for reads; clear it before the
	// descriptor becomes an *os.File, so a streamed download uses ordinary
	// blocking reads (and os does not try to add a file to its poller).
	if err := unix.SetNonblock(fd, false); err != nil {
		unix.Close(fd)
		return nil, Entry{}, pathErr("fcntl", rel, err)
	}
	f := os.NewFile(uintptr(fd), rel)
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, Entry{}, classify(err)
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, Entry{}, ErrNotFile
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Nlink > 1 {
		f.Close()
		return nil, Entry{}, ErrHardLink
	}
	e := Entry{Name: path.Base(rel), Size: fi.Size(), Mode: fi.Mode(), ModTime: fi.ModTime().UTC()}
	e.CreatedAt = e.ModTime
	e.MIME = typeOf(e, func() []byte { return nil })
	return f, e, nil
}

// ReadFile returns the content of regular file rel when it is at most max
// bytes; ErrTooLarge otherwise (measured on what is read, not only on the
// size the inode claims).
func (r *Root) ReadFile(rel string, max int64) ([]byte, error) {
	f, e, err := r.OpenRead(rel)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if e.Size > max {
		return nil, ErrTooLarge
	}
	// Size the buffer from the inode (plus room to notice growth): no
	// doubling and copying on the way to a few MiB.
	buf := bytes.NewBuffer(make([]byte, 0, e.Size+512))
	if _, err := buf.ReadFrom(io.LimitReader(f, max+1)); err != nil {
		return nil, fmt.Errorf("read %s: %w", Display(rel), err)
	}
	data := buf.Bytes()
	if int64(len(data)) > max {
		return nil, ErrTooLarge
	}
	return data, nil
}
