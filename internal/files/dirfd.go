package files

import "os"

// OpenDir opens directory rel (cleaned; followed as every Root path is,
// through symlinks inside the root only) and returns it for work relative
// to its descriptor: openat, mkdirat, renameat2 with O_NOFOLLOW on every
// name below it, as snapshot restore builds and swaps a tree. The caller
// closes it. Errors: ErrNotFound, ErrNotDirectory.
func (r *Root) OpenDir(rel string) (*os.File, error) {
	fd, err := r.openDir(rel)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), rel), nil
}
