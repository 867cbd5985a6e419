package instance

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// LockFile is the name of the lock in a data directory.
const LockFile = "kiln.lock"

// InUseError says that another process holds a data directory's lock.
type InUseError struct {
	Dir string // as the caller named it
	PID int    // the holder's pid; 0 when it could not be read
}

func (e *InUseError) Error() string {
	if e.PID == 0 {
		return fmt.Sprintf("data dir %s is in use by another kiln serve", e.Dir)
	}
	return fmt.Sprintf("data dir %s is in use by another kiln serve (pid %d)", e.Dir, e.PID)
}

// Lock is this process's exclusive hold on a data directory.
type Lock struct{ f *os.File }

// LockDir creates dir if needed and takes the exclusive lock on
// dir/kiln.lock without waiting, then writes this process's pid into the
// file. It returns *InUseError when another process holds it. The lock
// ends with Close or with the process (kill -9 included): the kernel
// releases a flock with its last descriptor, and the descriptor is
// close-on-exec, so game servers started by kiln do not inherit it.
func LockDir(dir string, pid int) (*Lock, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create data directory: %w", err)
	}
	path := filepath.Join(dir, LockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	if err := flock(f); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, &InUseError{Dir: dir, PID: holder(path)}
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	err = f.Truncate(0)
	if err == nil {
		_, err = f.WriteAt([]byte(strconv.Itoa(pid)+"\n"), 0)
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("write %s: %w", path, err)
	}
	return &Lock{f: f}, nil
}

func flock(f *os.File) error {
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}

// holder reads the pid the holder wrote. The holder writes it just after
// taking the lock, so a start racing with another one may find the file
// still empty for a moment: it looks again for up to 100 ms, then gives up
// (0, "pid unknown") rather than delay the refusal.
func holder(path string) int {
	for range 20 {
		b, err := os.ReadFile(path)
		if err != nil {
			return 0
		}
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid > 0 {
			return pid
		}
		time.Sleep(5 * time.Millisecond)
	}
	return 0
}

// Close releases the lock. The file stays, with the last holder's pid.
func (l *Lock) Close() error { return l.f.Close() }
