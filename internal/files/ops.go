package files

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/kilnhq/kiln/internal/validate"
)

// Mkdir creates directory rel and its parents. An existing directory is
// fine; an existing file is ErrExists.
func (r *Root) Mkdir(rel string) error {
	if err := checkClean(rel); err != nil {
		return err
	}
	if e, err := r.Stat(rel); err == nil {
		if e.IsDir() {
			return nil
		}
		return ErrExists
	}
	return classify(r.r.MkdirAll(rel, 0o755))
}

// Rename moves from to to (also across directories, creating the
// destination's parents). It acts on a symlink itself, never on its
// target; an existing destination is ErrExists (nothing is overwritten by
// a rename: renameat2(RENAME_NOREPLACE), so an entry created at to
// meanwhile is not replaced either); the root itself cannot be moved.
func (r *Root) Rename(from, to string) error {
	if err := checkClean(from, to); err != nil {
		return err
	}
	if from == "." || to == "." {
		return validate.Errorf("files", "the server's root directory cannot be moved or replaced")
	}
	if from == to {
		return nil
	}
	if strings.HasPrefix(to+"/", from+"/") {
		return validate.Errorf("files", "cannot move %s into itself", Display(from))
	}
	return r.withDir(path.Dir(from), func(ffd int, _ *os.File) error {
		if _, err := statAt(ffd, path.Base(from)); err != nil {
			return err
		}
		if err := r.r.MkdirAll(path.Dir(to), 0o755); err != nil {
			return classify(err)
		}
		return r.withDir(path.Dir(to), func(tfd int, _ *os.File) error {
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
// itself, never what it points to. The root itself cannot be deleted.
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
	return classify(r.r.RemoveAll(rel))
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
// target instead is exactly how panels were made to chmod host files.
func (r *Root) Chmod(rel string, mode fs.FileMode) error {
	if err := checkClean(rel); err != nil {
		return err
	}
	e, err := r.Stat(rel)
	if err != nil {
		return err
	}
	if e.IsSymlink() {
		return ErrSymlink
	}
	if !e.IsDir() && !e.IsFile() {
		return ErrNotFile
	}
	return classify(r.r.Chmod(rel, mode))
}

// Copy copies regular file rel next to itself as "name copy.ext", then
// "name copy 2.ext" and so on, and returns the copy. free is what the
// server may still grow by (ErrQuota beyond, nothing left behind).
func (r *Root) Copy(rel string, free int64) (Entry, error) {
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
		if e.Size > free {
			return Entry{}, ErrQuota
		}
		out, err := r.WriteFile(dst, src, free)
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
