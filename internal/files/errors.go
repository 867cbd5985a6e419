package files

import (
	"errors"
	"io/fs"
	"syscall"

	"github.com/kilnhq/kiln/internal/quota"
)

// Errors callers tell apart. Bad paths are *validate.Error.
var (
	// ErrNotFound: nothing there, or the path leads outside the root
	// (through a symlink): both answer the same, so a user learns nothing
	// about what lies outside.
	ErrNotFound = errors.New("file not found")
	// ErrNotDirectory: a directory was expected.
	ErrNotDirectory = errors.New("not a directory")
	// ErrNotFile: a regular file was expected (a directory, a symlink, a
	// device, a pipe or a socket was found).
	ErrNotFile = errors.New("not a regular file")
	// ErrExists: the destination already exists.
	ErrExists = errors.New("the destination already exists")
	// ErrTooLarge: the file is over the size the operation accepts.
	ErrTooLarge = errors.New("file too large")
	// ErrQuota: the operation would pass the server's disk limit; what it
	// had written was removed.
	ErrQuota = quota.ErrQuota
	// ErrSymlink: the operation does not act through or on symbolic links.
	ErrSymlink = errors.New("is a symbolic link")
	// ErrHardLink: a regular file with other hard links, which may be
	// outside the root (a game server can plant one): never read, archived
	// or changed by Kiln.
	ErrHardLink = errors.New("has other hard links")
)

// classify turns a file system error into one of the errors above when it
// is one, keeping the original for anything else (an I/O error stays an
// I/O error and becomes a 500).
//
// os.Root reports an escape (a symlink or ".." leading outside) with an
// unexported error value in a *PathError whose Err is not an errno: that
// shape is what is matched, never the message text.
func classify(err error) error {
	if err == nil {
		return nil
	}
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return ErrNotFound
	case errors.Is(err, fs.ErrExist):
		return ErrExists
	case errors.Is(err, syscall.ENOTDIR):
		return ErrNotDirectory
	case errors.Is(err, syscall.EISDIR):
		return ErrNotFile
	case errors.Is(err, syscall.ELOOP):
		return ErrNotFound // a symlink loop, or O_NOFOLLOW met a link
	case errors.Is(err, syscall.ENAMETOOLONG):
		return ErrNotFound
	}
	var pe *fs.PathError
	if errors.As(err, &pe) {
		if _, isErrno := pe.Err.(syscall.Errno); !isErrno {
			return ErrNotFound // os.Root: path escapes from parent
		}
	}
	return err
}
