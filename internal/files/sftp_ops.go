package files

import (
	"errors"
	"io/fs"
	"path"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kilnhq/kiln/internal/quota"
	"github.com/kilnhq/kiln/internal/validate"
)

// The operations below are the single-entry forms an SFTP client asks
// for (rmdir of an empty directory, remove of one file, mkdir of one
// directory, POSIX rename over an entry, set times, stat through links),
// with the same rules as the rest of this package: every path cleaned and
// resolved inside the root, entries acted on by descriptor, never a link
// followed out, every change told to the disk ledger.

// WritingOn is Writing on a root the caller holds open (an SFTP session
// keeps its root for its life): op runs with a reservation of disk (the
// server's ledger, from an Access for a write), which is committed when
// op succeeds, released when it fails (the ledger made stale if op had
// changed something).
func WritingOn(r *Root, disk *quota.Account, op func(r *Root, res *quota.Reservation) error) error {
	if disk == nil {
		return errors.New("files: a write needs the server's disk ledger (Access with write)")
	}
	res, err := disk.Reserve(0)
	if err != nil {
		return heldIsRestoring(err)
	}
	if err := op(r, res); err != nil {
		if res.Change() != 0 {
			disk.Stale()
		}
		res.Release()
		return err
	}
	res.Commit()
	return nil
}

// StatFollow describes what rel leads to, following symlinks (inside the
// root only: one leading out is ErrNotFound).
func (r *Root) StatFollow(rel string) (Entry, error) {
	if err := checkClean(rel); err != nil {
		return Entry{}, err
	}
	name := path.Base(rel)
	if rel == "." {
		name = "/"
	}
	if !r.beneath {
		fi, err := r.r.Stat(rel)
		if err != nil {
			return Entry{}, classify(err)
		}
		e := Entry{Name: name, Size: fi.Size(), Mode: fi.Mode(), ModTime: fi.ModTime().UTC()}
		e.CreatedAt = e.ModTime
		return e, nil
	}
	// One openat2 of the whole path and a statx of what it found.
	fd, err := r.openBeneath(rel, unix.O_PATH, 0)
	if err != nil {
		return Entry{}, err
	}
	defer unix.Close(fd)
	var st unix.Statx_t
	if err := unix.Statx(fd, "", unix.AT_EMPTY_PATH|unix.AT_STATX_SYNC_AS_STAT, unix.STATX_TYPE|unix.STATX_MODE|unix.STATX_SIZE|unix.STATX_MTIME, &st); err != nil {
		return Entry{}, pathErr("statx", rel, err)
	}
	e := Entry{Name: name, Size: int64(st.Size), Mode: modeOf(uint32(st.Mode))}
	e.ModTime = time.Unix(st.Mtime.Sec, int64(st.Mtime.Nsec)).UTC()
	e.CreatedAt = e.ModTime
	return e, nil
}

// MkdirOne creates directory rel (its parent must exist: ErrNotFound)
// with perm (its owner's rwx always kept), a block of res. An existing
// entry is ErrExists.
func (r *Root) MkdirOne(rel string, perm fs.FileMode, res *quota.Reservation) error {
	if err := checkClean(rel); err != nil {
		return err
	}
	if rel == "." {
		return ErrExists
	}
	if perm&0o7000 != 0 {
		return validate.Errorf("mode", "setuid, setgid and sticky bits are not allowed")
	}
	if perm == 0 {
		perm = 0o755
	}
	return r.withDir(path.Dir(rel), func(dfd int) error {
		if err := res.Grow(quota.EntryCost); err != nil {
			return ErrQuota
		}
		if err := unix.Mkdirat(dfd, path.Base(rel), uint32(perm.Perm()|0o700)); err != nil {
			res.Shrink(quota.EntryCost)
			return pathErr("mkdir", rel, err)
		}
		res.Changed(quota.EntryCost)
		return r.owner.ownAt(dfd, path.Base(rel))
	})
}

// RemoveFile removes entry rel that is not a directory (a file, a link
// itself, a FIFO…): a directory is ErrNotFile, and is never removed even
// if swapped in meanwhile (unlinkat without AT_REMOVEDIR). Its cost is
// given back to res.
func (r *Root) RemoveFile(rel string, res *quota.Reservation) error {
	return r.unlink(rel, false, res)
}

// RemoveDir removes empty directory rel (a non-empty one is refused,
// ENOTEMPTY; anything else is ErrNotDirectory); the root itself cannot be
// removed.
func (r *Root) RemoveDir(rel string, res *quota.Reservation) error {
	return r.unlink(rel, true, res)
}

func (r *Root) unlink(rel string, dir bool, res *quota.Reservation) error {
	if err := checkClean(rel); err != nil {
		return err
	}
	if rel == "." {
		return validate.Errorf("files", "the server's root directory cannot be deleted")
	}
	return r.withDir(path.Dir(rel), func(dfd int) error {
		name := path.Base(rel)
		e, err := statAt(dfd, name)
		if err != nil {
			return err
		}
		flags := 0
		switch {
		case dir && !e.IsDir():
			return ErrNotDirectory
		case dir:
			flags = unix.AT_REMOVEDIR
		case e.IsDir():
			return ErrNotFile
		}
		if err := unix.Unlinkat(dfd, name, flags); err != nil {
			return pathErr("remove", rel, err)
		}
		res.Changed(-entryCost(e))
		return nil
	})
}

// entryCost is what the ledger charges for e (quota.Cost of a file's size,
// a block for anything else).
func entryCost(e Entry) int64 {
	if e.IsFile() {
		return quota.Cost(e.Size)
	}
	return quota.EntryCost
}

// RenameReplace moves from to to as rename(2) does (SFTP's
// posix-rename@openssh.com): an existing file or link at to is replaced
// atomically, an empty directory by a directory; to's directory must
// exist. As Rename, it acts on links themselves, refuses a move that
// would leave a moved link pointing outside the root, and never moves or
// replaces the root. The replaced entry's cost is given back to res.
func (r *Root) RenameReplace(from, to string, res *quota.Reservation) error {
	if same, err := r.checkMove(from, to); same || err != nil {
		return err
	}
	return r.withDir(path.Dir(from), func(ffd int) error {
		if _, err := statAt(ffd, path.Base(from)); err != nil {
			return err
		}
		return r.withDir(path.Dir(to), func(tfd int) error {
			old, err := statAt(tfd, path.Base(to))
			replaced := err == nil
			if err != nil && !errors.Is(err, ErrNotFound) {
				return err
			}
			if err := unix.Renameat(ffd, path.Base(from), tfd, path.Base(to)); err != nil {
				return pathErr("rename", to, err)
			}
			if replaced {
				res.Changed(-entryCost(old))
			}
			return nil
		})
	})
}

// Chtimes sets the access and modification times of rel (the root
// itself included). A symlink is refused (ErrSymlink: its target's times
// are not changed through it), as is a file with other hard links
// (ErrHardLink: it may be outside the root). It acts on an O_PATH
// descriptor of the entry, as Chmod does.
func (r *Root) Chtimes(rel string, atime, mtime time.Time) error {
	if err := checkClean(rel); err != nil {
		return err
	}
	fd, st, err := r.entryRef(rel)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFLNK:
		return ErrSymlink
	case unix.S_IFDIR:
	case unix.S_IFREG:
		if st.Nlink > 1 {
			return ErrHardLink
		}
	default:
		return ErrNotFile
	}
	ts := []unix.Timespec{unix.NsecToTimespec(atime.UnixNano()), unix.NsecToTimespec(mtime.UnixNano())}
	if err := unix.UtimesNanoAt(unix.AT_FDCWD, "/proc/self/fd/"+strconv.Itoa(fd), ts, 0); err != nil {
		return pathErr("utimensat", rel, err)
	}
	return nil
}
