package files

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/kilnhq/kiln/internal/quota"
	"github.com/kilnhq/kiln/internal/validate"
)

// Mkdir creates directory rel and its parents, each a block of res (it
// records the change; the caller commits). An existing directory is fine;
// an existing file is ErrExists.
func (r *Root) Mkdir(rel string, res *quota.Reservation) error {
	if err := checkClean(rel); err != nil {
		return err
	}
	if e, err := r.Stat(rel); err == nil {
		if e.IsDir() {
			return nil
		}
		return ErrExists
	}
	n, err := r.mkdirAll(rel, res)
	if err != nil {
		return err
	}
	res.Changed(n * quota.EntryCost)
	return nil
}

// Rename moves from to to (also across directories, creating the
// destination's parents). It acts on a symlink itself, never on its
// target, and refuses a move after which a moved link would point outside
// the root (checkMovedLinks); an existing destination is ErrExists (nothing is overwritten by
// a rename: renameat2(RENAME_NOREPLACE), so an entry created at to
// meanwhile is not replaced either); the root itself cannot be moved.
func (r *Root) Rename(from, to string) error {
	if same, err := r.checkMove(from, to); same || err != nil {
		return err
	}
	return r.withDir(path.Dir(from), func(ffd int) error {
		if _, err := statAt(ffd, path.Base(from)); err != nil {
			return err
		}
		if _, err := r.mkdirAll(path.Dir(to), nil); err != nil {
			return err
		}
		return r.withDir(path.Dir(to), func(tfd int) error {
			return renameNoReplace(ffd, path.Base(from), tfd, path.Base(to))
		})
	})
}

// renameNoReplace renames name from in directory fromfd to name to in
// tofd, failing with ErrExists when to exists (whatever it is: a dangling
// symlink too). Where the file system has no RENAME_NOREPLACE (EINVAL:
// ZFS before 2.2, some FUSE file systems) it falls back to a check and a
// rename, which a racing creation can slip between.
func renameNoReplace(fromfd int, from string, tofd int, to string) error {
	err := unix.Renameat2(fromfd, from, tofd, to, unix.RENAME_NOREPLACE)
	if errors.Is(err, unix.EINVAL) {
		var st unix.Stat_t
		switch serr := unix.Fstatat(tofd, to, &st, unix.AT_SYMLINK_NOFOLLOW); {
		case serr == nil:
			return ErrExists
		case !errors.Is(serr, unix.ENOENT):
			return pathErr("fstatat", to, serr)
		}
		err = unix.Renameat(fromfd, from, tofd, to)
	}
	if err != nil {
		return pathErr("rename", to, err)
	}
	return nil
}

// Delete removes rel, directories recursively; a symlink is removed
// itself, never what it points to. The root itself cannot be deleted. The
// tree is removed by descriptor, each directory given its owner's rwx
// first (quota.RemoveAllAt): whatever modes a game server set, and however
// deep its tree, Kiln can delete it.
func (r *Root) Delete(rel string) error {
	if err := checkClean(rel); err != nil {
		return err
	}
	if rel == "." {
		return validate.Errorf("files", "the server's root directory cannot be deleted")
	}
	if _, err := r.Stat(rel); err != nil {
		return err
	}
	return r.withDir(path.Dir(rel), func(fd int) error {
		if err := quota.RemoveAllAt(fd, path.Base(rel)); err != nil {
			return fmt.Errorf("delete %s: %w", Display(rel), classify(err))
		}
		return nil
	})
}

// ParseMode reads an octal permission string ("644", "0755"). Setuid,
// setgid and sticky bits are refused: a game server has no use for them
// and they are how a file turns into a privilege.
func ParseMode(field, s string) (fs.FileMode, error) {
	if len(s) < 3 || len(s) > 4 {
		return 0, validate.Errorf(field, "must be an octal mode like \"644\" or \"0755\"")
	}
	n, err := strconv.ParseUint(s, 8, 32)
	if err != nil {
		return 0, validate.Errorf(field, "must be an octal mode like \"644\" or \"0755\"")
	}
	if n&0o7000 != 0 {
		return 0, validate.Errorf(field, "setuid, setgid and sticky bits are not allowed")
	}
	return fs.FileMode(n), nil
}

// Chmod sets the permission bits of rel. A symbolic link is refused
// (ErrSymlink): Linux cannot change a link's own mode, and acting on its
// target instead is exactly how panels were made to chmod host files. A
// file with other hard links is refused (ErrHardLink: one of them may be
// outside the root). The root itself is refused, and a directory always
// keeps its owner's rwx (the bits asked for are added to 0700), so no
// chmod makes a server's files unreadable or undeletable by Kiln.
func (r *Root) Chmod(rel string, mode fs.FileMode) error {
	if err := checkClean(rel); err != nil {
		return err
	}
	if rel == "." {
		return validate.Errorf("files", "the server's root directory keeps its mode")
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
		mode |= 0o700
	case unix.S_IFREG:
		if st.Nlink > 1 {
			return ErrHardLink
		}
	default:
		return ErrNotFile
	}
	// fchmod does not take an O_PATH descriptor; its /proc name is
	// the inode itself (how glibc's fchmodat(AT_SYMLINK_NOFOLLOW) does it).
	if err := unix.Chmod("/proc/self/fd/"+strconv.Itoa(fd), uint32(mode.Perm())); err != nil {
		return classify(pathErr("chmod", rel, err))
	}
	return nil
}

// Copy copies regular file rel next to itself as "name copy.ext", then
// "name copy 2.ext" and so on, and returns the copy, written through res
// as WriteFile does (ErrQuota beyond the limit, nothing left behind).
func (r *Root) Copy(rel string, res *quota.Reservation) (Entry, error) {
	src, e, err := r.OpenRead(rel)
	if err != nil {
		return Entry{}, err
	}
	defer src.Close()
	dir, name := path.Split(rel)
	ext := path.Ext(name)
	stem := strings.TrimSuffix(name, ext)
	if stem == "" { // ".bashrc": the whole name is the stem
		stem, ext = name, ""
	}
	for i := 1; i < 1000; i++ {
		cand := stem + " copy" + ext
		if i > 1 {
			cand = stem + " copy " + strconv.Itoa(i) + ext
		}
		dst := path.Join(dir, cand)
		if _, err := r.Stat(dst); err == nil {
			continue
		} else if !errors.Is(err, ErrNotFound) {
			return Entry{}, err
		}
		out, err := r.WriteFile(dst, src, res)
		if err != nil {
			return Entry{}, err
		}
		if err := r.r.Chmod(dst, e.Mode.Perm()); err != nil {
			return Entry{}, classify(err)
		}
		out.Mode = out.Mode&^fs.ModePerm | e.Mode.Perm()
		return out, nil
	}
	return Entry{}, fmt.Errorf("copy %s: %w", Display(rel), ErrExists)
}

// checkMove is what Rename and RenameReplace refuse before they touch
// anything: unclean paths, the root, a directory into itself, a move
// after which a moved link would lead outside. same is true when from
// and to are one path (nothing to do).
func (r *Root) checkMove(from, to string) (same bool, err error) {
	if err := checkClean(from, to); err != nil {
		return false, err
	}
	if from == "." || to == "." {
		return false, validate.Errorf("files", "the server's root directory cannot be moved or replaced")
	}
	if from == to {
		return true, nil
	}
	if strings.HasPrefix(to+"/", from+"/") {
		return false, validate.Errorf("files", "cannot move %s into itself", Display(from))
	}
	// A link's relative target changes meaning with its place: the moved
	// link, or every link in a moved directory, must still lead inside.
	return false, r.checkMovedLinks(from, to)
}

// entryRef opens an O_PATH reference to the entry rel itself (never
// through a link) and describes it: what Chmod and Chtimes check is then
// what they change, even if the name is swapped for a link meanwhile.
// The caller closes fd.
func (r *Root) entryRef(rel string) (fd int, st unix.Stat_t, err error) {
	fd, err = r.openBeneath(rel, unix.O_PATH|unix.O_NOFOLLOW, 0)
	if err != nil {
		return -1, st, err
	}
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return -1, st, classify(pathErr("fstat", rel, err))
	}
	return fd, st, nil
}
