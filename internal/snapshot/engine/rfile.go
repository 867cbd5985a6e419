package engine

import (
	"errors"
	"io"

	"golang.org/x/sys/unix"
)

// rfile is a regular file Create reads, by the descriptor the walk opened
// (files.Opener.OpenFD) rather than an *os.File: a world's thousands of
// small files each cost 2 system calls (fcntl) and a finalizer less.
type rfile struct {
	fd int // -1: none
}

// Read is io.Reader's: (0, io.EOF) at the end. A read interrupted by a
// signal is made again; EAGAIN (a file system that heeds the O_NONBLOCK
// the descriptor was opened with) clears the flag, then reads again.
func (f *rfile) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	cleared := false
	for {
		n, err := unix.Read(f.fd, p)
		switch {
		case err == nil && n == 0:
			return 0, io.EOF
		case err == nil:
			return n, nil
		case errors.Is(err, unix.EINTR):
		case errors.Is(err, unix.EAGAIN) && !cleared:
			if serr := unix.SetNonblock(f.fd, false); serr != nil {
				return 0, serr
			}
			cleared = true
		default:
			return 0, err
		}
	}
}

// Close closes the descriptor once; later calls do nothing.
func (f *rfile) Close() {
	if f.fd >= 0 {
		_ = unix.Close(f.fd) // read only: nothing to lose
		f.fd = -1
	}
}
