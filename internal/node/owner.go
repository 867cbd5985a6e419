package node

import (
	"errors"
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// OwnTree gives every entry of the tree at dir, dir included, to uid and
// gid, without following a symlink (a link is changed itself) and relative
// to descriptors of the directories (a directory swapped for a link while
// it runs is not followed). Regular files with more than one link are
// left as they are (ErrHardLink's rule: another name may be outside the
// root) and counted in skipped; so are entries deeper than 512 levels.
// Chown clears the setuid and setgid bits of an executable, as for any
// chown. It is how a server's root is made its user's before each start,
// whatever wrote into it since as Kiln's user (an installer, a restore,
// an older Kiln).
func OwnTree(dir string, uid, gid int) (changed, skipped int, err error) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, 0, &os.PathError{Op: "open", Path: dir, Err: err}
	}
	defer unix.Close(fd)
	o := ownTree{uid: uid, gid: gid}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return 0, 0, &os.PathError{Op: "fstat", Path: dir, Err: err}
	}
	if int(st.Uid) != uid || int(st.Gid) != gid {
		if err := unix.Fchown(fd, uid, gid); err != nil {
			return 0, 0, &os.PathError{Op: "fchown", Path: dir, Err: err}
		}
		o.changed++
	}
	err = o.dir(fd, 0)
	return o.changed, o.skipped, err
}

type ownTree struct {
	uid, gid         int
	changed, skipped int
}

// maxOwnDepth bounds OwnTree's descent (one descriptor per level).
const maxOwnDepth = 512

func (o *ownTree) dir(fd, depth int) error {
	dup, err := unix.Dup(fd)
	if err != nil {
		return err
	}
	d := os.NewFile(uintptr(dup), ".")
	defer d.Close()
	for {
		names, err := d.Readdirnames(512)
		for _, name := range names {
			if err := o.entry(fd, name, depth); err != nil {
				return err
			}
		}
		if errors.Is(err, io.EOF) || (err == nil && len(names) == 0) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("list: %w", err)
		}
	}
}

func (o *ownTree) entry(dirfd int, name string, depth int) error {
	var st unix.Stat_t
	if err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil
		}
		return atErr("fstatat", name, err)
	}
	kind := st.Mode & unix.S_IFMT
	if kind == unix.S_IFREG && st.Nlink > 1 {
		o.skipped++
		return nil
	}
	if kind == unix.S_IFDIR {
		if depth >= maxOwnDepth {
			o.skipped++
			return nil
		}
		cfd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
				return nil // gone or swapped since the stat
			}
			return atErr("openat", name, err)
		}
		defer unix.Close(cfd)
		if int(st.Uid) != o.uid || int(st.Gid) != o.gid {
			if err := unix.Fchown(cfd, o.uid, o.gid); err != nil {
				return atErr("fchown", name, err)
			}
			o.changed++
		}
		if err := o.dir(cfd, depth+1); err != nil {
			return fmt.Errorf("%s/%w", name, err)
		}
		return nil
	}
	if int(st.Uid) == o.uid && int(st.Gid) == o.gid {
		return nil
	}
	if err := unix.Fchownat(dirfd, name, o.uid, o.gid, unix.AT_SYMLINK_NOFOLLOW); err != nil && !errors.Is(err, unix.ENOENT) {
		return atErr("fchownat", name, err)
	}
	o.changed++
	return nil
}

func atErr(op, name string, err error) error { return &os.PathError{Op: op, Path: name, Err: err} }
