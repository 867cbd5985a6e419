package quota

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// TempPrefix starts the names of Kiln's writes in flight (see doc.go).
const TempPrefix = ".kiln-tmp-"

// maxOpen is how many directory descriptors a walk keeps open.
const maxOpen = 32

// Walk measures the tree at dir (see Usage) and makes it the account's
// figure, with the commits made while it walked added on top. One walk
// of an account runs at a time; a second waits and walks again.
func (a *Account) Walk(dir string, collectBefore time.Time) (int64, error) {
	a.walk.Lock()
	defer a.walk.Unlock()
	a.mu.Lock()
	a.walking, a.walkAdd, a.staled = true, 0, false
	a.mu.Unlock()
	used, err := usage(dir, collectBefore, a.names, a.inFlight)
	a.mu.Lock()
	defer a.mu.Unlock()
	a.walking = false
	if err != nil {
		return a.used, err
	}
	a.used = max(0, used+a.walkAdd)
	if !a.staled {
		a.walkedAt = time.Now()
	}
	return a.used, nil
}

// frame is one directory of the walk's path.
type frame struct {
	fd       int // -1 while closed (deeper than maxOpen)
	dev, ino uint64
	subdirs  []string // still to visit
}

// Usage adds up what the tree at dir costs (Cost, EntryCost), without
// following symlinks or removing anything (leftovers are the account's
// Walk's to remove: it knows which names are Kiln's). A dir that does not
// exist holds nothing.
func Usage(dir string) (int64, error) {
	return usage(dir, time.Time{}, TempNames{}, nil)
}

// usage is Usage leaving out the temporary entries skip names.
func usage(dir string, collectBefore time.Time, names TempNames, skip func(dev, ino uint64) bool) (int64, error) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return 0, nil
	}
	if err != nil {
		return 0, &os.PathError{Op: "open", Path: dir, Err: err}
	}
	w := &walker{collectBefore: collectBefore, names: names, skip: skip}
	root, err := w.enter(fd)
	if err != nil {
		unix.Close(fd)
		return 0, fmt.Errorf("measure %s: %w", dir, err)
	}
	stack := []*frame{root}
	defer func() {
		for _, f := range stack {
			if f.fd >= 0 {
				unix.Close(f.fd)
			}
		}
	}()
	for len(stack) > 0 {
		top := stack[len(stack)-1]
		if len(top.subdirs) == 0 {
			stack = stack[:len(stack)-1]
			if len(stack) > 0 && stack[len(stack)-1].fd < 0 {
				if err := reopenParent(top, stack[len(stack)-1]); err != nil {
					unix.Close(top.fd)
					return 0, fmt.Errorf("measure %s: %w", dir, err)
				}
			}
			unix.Close(top.fd)
			continue
		}
		name := top.subdirs[len(top.subdirs)-1]
		top.subdirs = top.subdirs[:len(top.subdirs)-1]
		cfd, err := unix.Openat(top.fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			if gone(err) {
				continue // removed or replaced since it was listed
			}
			return 0, fmt.Errorf("measure %s: open %s: %w", dir, name, err)
		}
		f, err := w.enter(cfd)
		if err != nil {
			unix.Close(cfd)
			return 0, fmt.Errorf("measure %s: %w", dir, err)
		}
		stack = append(stack, f)
		if n := len(stack) - 1 - maxOpen; n >= 1 && stack[n].fd >= 0 {
			unix.Close(stack[n].fd)
			stack[n].fd = -1
		}
	}
	return w.total, nil
}

// gone is an error of a directory that vanished or changed kind between
// its listing and its opening.
func gone(err error) bool {
	return errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP)
}

// reopenParent opens child's parent through ".." into parent.fd and checks
// it is the directory the walk came from.
func reopenParent(child, parent *frame) error {
	fd, err := unix.Openat(child.fd, "..", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("climb back: %w", err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return fmt.Errorf("climb back: %w", err)
	}
	if st.Dev != parent.dev || st.Ino != parent.ino {
		unix.Close(fd)
		return errors.New("the tree was moved while it was measured")
	}
	parent.fd = fd
	return nil
}

type walker struct {
	collectBefore time.Time
	names         TempNames // which temporary entries are Kiln's to remove
	skip          func(dev, ino uint64) bool
	total         int64
}

// enter lists directory fd: it adds what its entries cost and returns its
// frame with the subdirectories to visit. It does not close fd.
func (w *walker) enter(fd int) (*frame, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, err
	}
	f := &frame{fd: fd, dev: st.Dev, ino: st.Ino}
	// A duplicate to read from: closing the *os.File closes it, not fd.
	dup, err := unix.Dup(fd)
	if err != nil {
		return nil, err
	}
	unix.CloseOnExec(dup)
	d := os.NewFile(uintptr(dup), ".")
	defer d.Close()
	for {
		names, err := d.Readdirnames(1024)
		for _, name := range names {
			if err := w.entry(f, name); err != nil {
				return nil, err
			}
		}
		if err == io.EOF || (err == nil && len(names) == 0) {
			return f, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

func (w *walker) entry(f *frame, name string) error {
	var st unix.Stat_t
	if err := unix.Fstatat(f.fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil
		}
		return fmt.Errorf("stat %s: %w", name, err)
	}
	isDir := st.Mode&unix.S_IFMT == unix.S_IFDIR
	if strings.HasPrefix(name, TempPrefix) {
		if w.skip != nil && w.skip(st.Dev, st.Ino) {
			return nil // a writer in flight holds its bytes
		}
		if !w.collectBefore.IsZero() && time.Unix(st.Mtim.Unix()).Before(w.collectBefore) && w.names.Ours(name) {
			removeAt(f.fd, name, isDir)
			return nil
		}
	}
	switch {
	case isDir:
		w.total += max(EntryCost, st.Size)
		f.subdirs = append(f.subdirs, name)
	case st.Mode&unix.S_IFMT == unix.S_IFREG:
		w.total += Cost(st.Size)
	default:
		w.total += EntryCost
	}
	return nil
}

// removeAt removes a leftover; what cannot be removed stays (the next
// walk tries again).
func removeAt(dirfd int, name string, isDir bool) {
	if !isDir {
		_ = unix.Unlinkat(dirfd, name, 0)
		return
	}
	_ = RemoveAllAt(dirfd, name)
}

// RemoveAllAt removes name in directory dirfd, a directory with
// everything in it, by descriptor (never through a symlink: a link is
// removed itself), giving each directory its owner's rwx first, so that
// no mode a game server set can make its files undeletable by Kiln. It
// is how Kiln removes trees it does not own the shape of: leftovers of a
// crash, and the files API's delete. A name already gone is not an error.
func RemoveAllAt(dirfd int, name string) error {
	err := unix.Unlinkat(dirfd, name, 0)
	if err == nil || errors.Is(err, unix.ENOENT) {
		return nil
	}
	if !errors.Is(err, unix.EISDIR) && !errors.Is(err, unix.EPERM) {
		return &os.PathError{Op: "unlinkat", Path: name, Err: err}
	}
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil
		}
		return &os.PathError{Op: "openat", Path: name, Err: err}
	}
	// Owner rwx on the directory itself, or its entries cannot go.
	_ = unix.Fchmod(fd, 0o700)
	d := os.NewFile(uintptr(fd), name)
	var first error
	for {
		names, rerr := d.Readdirnames(1024)
		for _, n := range names {
			if err := RemoveAllAt(fd, n); err != nil && first == nil {
				first = err
			}
		}
		if rerr != nil || len(names) == 0 {
			if rerr != nil && rerr != io.EOF && first == nil {
				first = rerr
			}
			break
		}
		if first != nil {
			break
		}
	}
	d.Close()
	if first != nil {
		return first
	}
	if err := unix.Unlinkat(dirfd, name, unix.AT_REMOVEDIR); err != nil && !errors.Is(err, unix.ENOENT) {
		return &os.PathError{Op: "rmdir", Path: name, Err: err}
	}
	return nil
}
