package files

import (
	"errors"
	"os"
	"path"

	"golang.org/x/sys/unix"
)

// resolveHow is how openat2 resolves a root-relative path: every
// component beneath the root's descriptor (RESOLVE_BENEATH: an absolute
// symlink, or a ".." — from a symlink's target — that would climb above
// the root, fails with EXDEV, also when a concurrent rename would make it
// escape), and never through a /proc magic link. Symlinks that stay
// beneath are followed, as os.Root follows them.
const resolveHow = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_MAGICLINKS

// beneathTries bounds the retries of an openat2 that answered EAGAIN (a
// rename or mount somewhere during a resolution through ".."); after
// them the path is resolved as without openat2.
const beneathTries = 8

// probeBeneath reports whether openat2 with resolveHow works on the root
// descriptor fd: Linux 5.6 and later, unless a seccomp filter refuses it
// (some container runtimes' older profiles answer ENOSYS or EPERM).
func probeBeneath(fd int) bool {
	pfd, err := unix.Openat2(fd, ".", &unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: resolveHow})
	if err != nil {
		return false
	}
	_ = unix.Close(pfd)
	return true
}

// openBeneath opens rel (cleaned) below the root with open(2) flags (and
// mode, for O_CREAT) and returns the descriptor (close-on-exec). The
// whole path is resolved by the kernel in one openat2 call: one system
// call where a walk opened each directory on the way. A path that leads
// out of the root is ErrNotFound (as a missing one: the user learns
// nothing of what lies outside); flags govern the last component as in
// openat (O_NOFOLLOW: a symlink there is not followed; O_CREAT|O_EXCL:
// nothing that exists is opened, a symlink included). Other errors are
// classified (ErrNotFound, ErrExists, ErrNotDirectory…).
//
// Without openat2, or after beneathTries answers of EAGAIN, the
// directory is reached by os.Root and the last component opened with
// openat from it (walkOpen): the same rules, more system calls.
func (r *Root) openBeneath(rel string, flags int, mode uint32) (int, error) {
	flags |= unix.O_CLOEXEC
	if r.beneath {
		how := unix.OpenHow{Flags: uint64(flags), Resolve: resolveHow}
		if flags&(unix.O_CREAT|unix.O_TMPFILE) != 0 {
			how.Mode = uint64(mode)
		}
		for range beneathTries {
			fd, err := unix.Openat2(r.fd, rel, &how)
			switch {
			case err == nil:
				return fd, nil
			case err == unix.EINTR || err == unix.EAGAIN:
				continue
			case err == unix.EXDEV:
				return -1, ErrNotFound // leads outside the root
			}
			return -1, pathErr("open", rel, err)
		}
	}
	return r.walkOpen(rel, flags, mode)
}

// walkOpen is openBeneath without openat2: os.Root resolves the path (a
// following open of the whole path; not with O_PATH), or its directory
// when the last component is not to be followed (O_NOFOLLOW, or
// O_CREAT|O_EXCL), which is then opened with openat relative to that
// directory's descriptor.
func (r *Root) walkOpen(rel string, flags int, mode uint32) (int, error) {
	if flags&unix.O_NOFOLLOW == 0 && flags&(unix.O_CREAT|unix.O_EXCL) != unix.O_CREAT|unix.O_EXCL {
		if flags&unix.O_PATH != 0 {
			// os.Root opens the last component O_NOFOLLOW and follows a
			// link only when that fails, which O_PATH never does: it
			// would describe the link, not what it leads to.
			return -1, errors.New("files: a following O_PATH open needs openat2")
		}
		f, err := r.r.OpenFile(rel, flags&^unix.O_CLOEXEC, os.FileMode(mode))
		if err != nil {
			return -1, classify(err)
		}
		defer f.Close()
		fd, err := unix.FcntlInt(f.Fd(), unix.F_DUPFD_CLOEXEC, 0)
		if err != nil {
			return -1, pathErr("open", rel, err)
		}
		return fd, nil
	}
	dfd, err := r.openDir(path.Dir(rel))
	if err != nil {
		return -1, err
	}
	defer unix.Close(dfd)
	for {
		fd, err := unix.Openat(dfd, path.Base(rel), flags, mode)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return -1, pathErr("open", rel, err)
		}
		return fd, nil
	}
}

// openDir opens directory rel (cleaned; symlinks inside the root
// followed) for reading and for work relative to it, and returns its
// descriptor. Errors: ErrNotFound, ErrNotDirectory.
func (r *Root) openDir(rel string) (int, error) {
	return r.openBeneath(rel, unix.O_RDONLY|unix.O_DIRECTORY, 0)
}
