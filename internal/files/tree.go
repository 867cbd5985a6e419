package files

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/kilnhq/kiln/internal/quota"
	"github.com/kilnhq/kiln/internal/validate"
)

// ErrSkipDir, returned by a WalkFunc for a directory, skips its contents.
var ErrSkipDir = errors.New("skip this directory")

// WalkFunc is called by Walk for each entry. rel is root-relative. For a
// regular file, open opens it for reading relative to its directory's
// descriptor, never following a symlink (its zero value, for other
// kinds, opens nothing).
type WalkFunc func(rel string, e Entry, open Opener) error

// Opener opens a regular file Walk visits: relative to its directory's
// descriptor, never through a symlink, and only if it is (still) a
// regular file. It is valid only during the WalkFunc call it is passed
// to (the directory's descriptor is closed after).
type Opener struct {
	dirfd int
	name  string
	ok    bool
}

// Valid tells an Opener of a regular file from the zero one.
func (o Opener) Valid() bool { return o.ok }

// Open opens the file as an *os.File. Errors: ErrNotFile (not a regular
// file any more: a symlink, a FIFO, ...; or the zero Opener),
// ErrNotFound, others wrapped.
func (o Opener) Open() (*os.File, error) {
	fd, _, err := o.OpenFD()
	if err != nil {
		return nil, err
	}
	// O_NONBLOCK cleared before it becomes an *os.File: os then neither
	// tries its poller (an epoll_ctl that fails for a regular file) nor
	// clears the flag itself. F_SETFL changes only the status flags, and
	// O_NONBLOCK is the one set: 0 clears it in one call (SetNonblock
	// reads them first).
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFL, 0); err != nil {
		unix.Close(fd)
		return nil, pathErr("fcntl", o.name, err)
	}
	return os.NewFile(uintptr(fd), o.name), nil
}

// OpenFD opens the file and returns its descriptor, which the caller
// closes (unix.Close), with the descriptor's own stat. It is what a
// snapshot reads thousands of small files with: no *os.File (whose
// making and closing cost 2 system calls and a finalizer more each).
//
// The descriptor is opened O_NONBLOCK (so that a FIFO swapped in after
// the walk's stat cannot block the open) and left so: Linux ignores the
// flag for a regular file's reads on local file systems; a reader that
// gets EAGAIN (a network or FUSE file system that heeds it) clears it
// (unix.SetNonblock false) and reads again.
func (o Opener) OpenFD() (int, unix.Stat_t, error) {
	var st unix.Stat_t
	if !o.ok {
		return -1, st, ErrNotFile
	}
	fd, err := unix.Openat(o.dirfd, o.name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ELOOP) {
		return -1, st, ErrNotFile // a symlink now
	}
	if err != nil {
		return -1, st, classify(&os.PathError{Op: "openat", Path: o.name, Err: err})
	}
	// Checked on the descriptor: what is read is what was checked.
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		return -1, st, ErrNotFile
	}
	return fd, st, nil
}

// Walk visits rel and everything below it, parents before children and
// names in byte order (so archives are reproducible). Symlinks are reported
// as entries and never followed; subdirectories are opened with
// openat(O_NOFOLLOW|O_DIRECTORY) relative to their parent, so nothing
// swapped in mid-walk leads out of the root. It stops at ctx's end or the
// first error of fn.
func (r *Root) Walk(ctx context.Context, rel string, fn WalkFunc) error {
	return r.walk(ctx, rel, fn, false)
}

// WalkTypes is Walk for a caller that opens the regular files it meets
// and takes their stat from the descriptor (Opener.OpenFD: a snapshot).
// A regular file's Entry then holds its name and kind only (Mode is the
// zero FileMode: no permission bits, size or times), which the directory
// listing tells (d_type) without a statx of each file: one path lookup
// less for each of a world's thousands of small files. Other entries are
// as Walk gives them, and so is every entry of a file system whose
// listings do not tell kinds (DT_UNKNOWN).
func (r *Root) WalkTypes(ctx context.Context, rel string, fn WalkFunc) error {
	return r.walk(ctx, rel, fn, true)
}

func (r *Root) walk(ctx context.Context, rel string, fn WalkFunc, lazy bool) error {
	e, err := r.Stat(rel)
	if err != nil {
		return err
	}
	if !e.IsDir() {
		dir := path.Dir(rel)
		return r.withDir(dir, func(fd int) error {
			return fn(rel, e, opener(fd, path.Base(rel), e))
		})
	}
	return r.withDir(rel, func(fd int) error {
		if err := fn(rel, e, Opener{}); err != nil {
			if errors.Is(err, ErrSkipDir) {
				return nil
			}
			return err
		}
		dfd, err := unix.Openat(fd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return classify(&os.PathError{Op: "openat", Path: rel, Err: err})
		}
		return r.walkDir(ctx, dfd, rel, fn, lazy)
	})
}

// walkDir walks the directory dfd (which it closes) named rel; lazy is
// WalkTypes'.
func (r *Root) walkDir(ctx context.Context, dfd int, rel string, fn WalkFunc, lazy bool) error {
	f := os.NewFile(uintptr(dfd), rel)
	defer f.Close()
	var names []string
	var regular map[string]bool // lazy: the names the listing says are regular files
	if lazy {
		ents, err := readDirTypes(dfd)
		if err != nil {
			return classify(&os.PathError{Op: "getdents", Path: rel, Err: err})
		}
		regular = make(map[string]bool, len(ents))
		for _, d := range ents {
			names = append(names, d.name)
			if d.typ == unix.DT_REG {
				regular[d.name] = true
			}
		}
	} else {
		var err error
		if names, err = f.Readdirnames(-1); err != nil {
			return classify(err)
		}
	}
	slices.Sort(names)
	for _, name := range names {
		if err := ctx.Err(); err != nil {
			return err
		}
		if quota.Reserved(name) {
			continue // another operation's temporary file
		}
		child := name
		if rel != "." {
			child = rel + "/" + name
		}
		if regular[name] {
			// Its kind from the listing; what it is when opened is
			// checked on the descriptor (OpenFD).
			e := Entry{Name: name}
			if err := fn(child, e, Opener{dirfd: dfd, name: name, ok: true}); err != nil {
				return err
			}
			continue
		}
		e, err := statAt(dfd, name)
		if errors.Is(err, ErrNotFound) {
			continue
		}
		if err != nil {
			return err
		}
		if !e.IsDir() {
			if err := fn(child, e, opener(dfd, name, e)); err != nil {
				return err
			}
			continue
		}
		if err := fn(child, e, Opener{}); err != nil {
			if errors.Is(err, ErrSkipDir) {
				continue
			}
			return err
		}
		sub, err := unix.Openat(dfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			continue // gone, or swapped for a link: not entered
		}
		if err := r.walkDir(ctx, sub, child, fn, lazy); err != nil {
			return err
		}
	}
	return nil
}

// dirent is a directory listing's entry: a name and its d_type.
type dirent struct {
	name string
	typ  uint8
}

// readDirTypes lists directory fd with getdents64, "." and ".." left out:
// names with the kind the file system records (unix.DT_UNKNOWN where it
// records none). os.File.ReadDir would stat an entry of unknown kind by
// a path from the process's working directory, not from fd.
func readDirTypes(fd int) ([]dirent, error) {
	buf := make([]byte, 32<<10)
	var out []dirent
	for {
		n, err := unix.Getdents(fd, buf)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if n <= 0 {
			return out, nil
		}
		// struct linux_dirent64: d_ino (8), d_off (8), d_reclen (2),
		// d_type (1), then the name, NUL-terminated.
		for off := 0; off+19 <= n; {
			reclen := int(binary.NativeEndian.Uint16(buf[off+16:]))
			if reclen < 19 || off+reclen > n {
				return nil, fmt.Errorf("getdents: a record of %d bytes at %d of %d", reclen, off, n)
			}
			name := buf[off+19 : off+reclen]
			if i := bytes.IndexByte(name, 0); i >= 0 {
				name = name[:i]
			}
			if s := string(name); s != "." && s != ".." {
				out = append(out, dirent{name: s, typ: buf[off+18]})
			}
			off += reclen
		}
	}
}

// opener is the Opener of name in directory fd: the zero one unless e
// is a regular file.
func opener(fd int, name string, e Entry) Opener {
	return Opener{dirfd: fd, name: name, ok: e.IsFile()}
}

// Readlink returns the target of symlink rel, as stored.
func (r *Root) Readlink(rel string) (string, error) {
	if err := checkClean(rel); err != nil {
		return "", err
	}
	t, err := r.r.Readlink(rel)
	return t, classify(err)
}

// LinkTarget checks the target of a symlink to be created at rel: it must
// be relative and, resolved lexically from rel's directory, stay inside the
// root. (os.Root never follows a link out anyway; refusing such links keeps
// the tree free of traps for other tools, such as a backup or a user's own
// scripts.)
func LinkTarget(field, rel, target string) error {
	switch {
	case target == "" || len(target) > MaxPathLen || strings.IndexByte(target, 0) >= 0:
		return validate.Errorf(field, "is not a valid link target")
	case strings.HasPrefix(target, "/"):
		return validate.Errorf(field, "links to an absolute path, which would lead outside the server's root")
	}
	j := path.Join(path.Dir(rel), target)
	if j == ".." || strings.HasPrefix(j, "../") {
		return validate.Errorf(field, "links outside the server's root")
	}
	return nil
}

// DotDotsFirst reports whether every ".." segment of a link's target
// comes before its first name. Leading ".." climb the real directories a
// link lies in; a ".." after a name climbs out of whatever that name is,
// perhaps another link ("up" -> "..", then "x" -> "up/../.." stays inside
// on paper and leads out on disk), so links restored or extracted in bulk
// (snapshots, archives), whose neighbours are not known yet, must have
// their ".." first.
func DotDotsFirst(target string) bool {
	named := false
	for seg := range strings.SplitSeq(target, "/") {
		switch seg {
		case "", ".":
		case "..":
			if named {
				return false
			}
		default:
			named = true
		}
	}
	return true
}

// Symlink creates a symbolic link at rel pointing to target, which must
// pass LinkTarget and lead inside the root as the tree is, following the
// links on its way and its directory's (LinkInside: "up" -> ".." and then
// "x" -> "up/y" each look fine alone). An existing entry at rel is
// ErrExists.
func (r *Root) Symlink(target, rel string) error {
	if err := checkClean(rel); err != nil {
		return err
	}
	if err := LinkTarget("target", rel, target); err != nil {
		return err
	}
	if !r.LinkInside(rel, target) {
		return validate.Errorf("target", "leads outside the server's root through the links on its way")
	}
	if _, err := r.mkdirAll(path.Dir(rel), nil); err != nil {
		return err
	}
	if err := r.r.Symlink(target, rel); err != nil {
		return classify(err)
	}
	return r.ownRel(rel)
}
