package files

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/kilnhq/kiln/internal/quota"
)

// WriteFlags say how OpenWrite opens a file, as an SFTP client asks.
type WriteFlags struct {
	Read      bool        // the handle reads too
	Create    bool        // a missing file is created
	Exclusive bool        // an existing file is ErrExists (with Create)
	Truncate  bool        // an existing file is emptied first
	Perm      fs.FileMode // a created file's permission bits (0: 0644)
}

// WriteHandle is a regular file of a root open for writes at offsets (an
// SFTP client's upload, resumed uploads included). Every byte it writes
// is drawn from the server's disk ledger before it is written: a write
// that would pass the limit writes nothing and fails with ErrQuota,
// what was written before stays. Close commits what the file really
// changed (its cost as it is then, less its cost when opened), so the
// ledger stays exact. WriteAt and ReadAt may be called from several
// goroutines at once.
type WriteHandle struct {
	f    *os.File
	name string
	res  *quota.Reservation
	disk *quota.Account

	mu     sync.Mutex
	base   int64 // the file's cost in the ledger when opened (0: created)
	cost   int64 // the cost held for the file so far (base included)
	size   int64 // the largest size the handle's writes reached
	closed bool
}

// OpenWrite opens regular file rel (cleaned) for writing at offsets,
// drawing on disk (the server's ledger, from an Access for a write) as it
// writes. rel's directory is reached as every Root path is (links inside
// followed, openBeneath); rel itself is never followed. With Create, a
// new file is made first, in one openat2 of the whole path with
// O_CREAT|O_EXCL|O_NOFOLLOW (nothing that exists is opened that way, a
// planted link included), its block reserved before (ErrQuota). An
// existing file (without Create, or when that create finds one) is opened
// by an O_PATH descriptor (O_NOFOLLOW), checked on that descriptor — a
// symlink is ErrSymlink, a directory, FIFO, socket or device ErrNotFile, a
// file with other hard links ErrHardLink — and only then opened for
// writing through that descriptor, so what was checked is what is
// written. A truncation happens after the checks. Errors: ErrNotFound (no
// such file without Create, or a missing directory), ErrExists,
// ErrSymlink, ErrNotFile, ErrHardLink, ErrQuota.
func (r *Root) OpenWrite(rel string, fl WriteFlags, disk *quota.Account) (*WriteHandle, error) {
	if err := checkClean(rel); err != nil {
		return nil, err
	}
	if rel == "." {
		return nil, ErrNotFile
	}
	if disk == nil {
		return nil, errors.New("files: a write needs the server's disk ledger (Access with write)")
	}
	res, err := disk.Reserve(0)
	if err != nil {
		return nil, heldIsRestoring(err)
	}
	h := &WriteHandle{name: rel, res: res, disk: disk}
	if err := h.open(r, fl); err != nil {
		res.Release()
		return nil, err
	}
	return h, nil
}

// open opens h.name of r into h (see OpenWrite).
func (h *WriteHandle) open(r *Root, fl WriteFlags) error {
	mode := unix.O_WRONLY
	if fl.Read {
		mode = unix.O_RDWR
	}
	for range 3 {
		quotaErr := error(nil)
		if fl.Create {
			err := h.create(r, mode, fl.Perm)
			switch {
			case err == nil:
				return nil
			case errors.Is(err, ErrQuota):
				// No block for a new file; an existing one may still be
				// opened (and truncated) without one.
				quotaErr = err
			case !errors.Is(err, ErrExists):
				return err
			case fl.Exclusive:
				return ErrExists
			}
		}
		pfd, err := r.openBeneath(h.name, unix.O_PATH|unix.O_NOFOLLOW, 0)
		if errors.Is(err, ErrNotFound) && fl.Create {
			if quotaErr != nil {
				return quotaErr
			}
			continue // removed since the create found it: create again
		}
		if err != nil {
			return err
		}
		if fl.Create && fl.Exclusive {
			unix.Close(pfd)
			return ErrExists
		}
		err = h.reopen(pfd, h.name, mode)
		unix.Close(pfd)
		if err != nil {
			return err
		}
		if fl.Truncate && h.size > 0 {
			if err := h.f.Truncate(0); err != nil {
				h.f.Close()
				return fmt.Errorf("truncate %s: %w", Display(h.name), err)
			}
			h.size = 0
		}
		return nil
	}
	return fmt.Errorf("open %s: %w", Display(h.name), ErrExists)
}

// create makes h.name exclusively (one openat2 of the whole path), its
// block reserved first. Errors: ErrQuota (no block: nothing tried),
// ErrExists (something is there, a link or a directory included), and
// those of openBeneath.
func (h *WriteHandle) create(r *Root, mode int, perm fs.FileMode) error {
	if err := h.res.Grow(quota.Cost(0)); err != nil {
		return ErrQuota
	}
	if perm == 0 {
		perm = 0o644
	}
	fd, err := r.openBeneath(h.name, mode|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW, uint32(perm.Perm()))
	if err != nil {
		h.res.Shrink(quota.Cost(0))
		return err
	}
	// The umask may have narrowed perm: set it as asked.
	_ = unix.Fchmod(fd, uint32(perm.Perm()))
	if err := r.owner.ownFD(fd); err != nil {
		unix.Close(fd)
		h.res.Shrink(quota.Cost(0))
		return err
	}
	h.f = os.NewFile(uintptr(fd), h.name)
	h.base, h.cost, h.size = 0, quota.Cost(0), 0
	return nil
}

// reopen checks the entry pfd (an O_PATH descriptor) and opens it for
// writing through /proc/self/fd, so that the inode checked is the inode
// opened even if the name is swapped meanwhile.
func (h *WriteHandle) reopen(pfd int, name string, mode int) error {
	var st unix.Stat_t
	if err := unix.Fstat(pfd, &st); err != nil {
		return pathErr("fstat", name, err)
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
	case unix.S_IFLNK:
		return ErrSymlink
	default:
		return ErrNotFile
	}
	if st.Nlink > 1 {
		return ErrHardLink
	}
	fd, err := unix.Open("/proc/self/fd/"+strconv.Itoa(pfd), mode|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return pathErr("open", name, err)
	}
	var st2 unix.Stat_t
	if err := unix.Fstat(fd, &st2); err != nil || st2.Dev != st.Dev || st2.Ino != st.Ino || st2.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		return ErrNotFile
	}
	_ = unix.SetNonblock(fd, false)
	h.f = os.NewFile(uintptr(fd), name)
	h.base = quota.Cost(st2.Size)
	h.cost, h.size = h.base, st2.Size
	return nil
}

// WriteAt writes p at off, after drawing what the file will then cost
// from the ledger. Passing the limit writes nothing: ErrQuota.
func (h *WriteHandle) WriteAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, fmt.Errorf("write %s: negative offset", Display(h.name))
	}
	end := off + int64(len(p))
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return 0, os.ErrClosed
	}
	if want := quota.Cost(max(end, h.size)); want > h.cost {
		if err := h.res.Grow(want - h.cost); err != nil {
			h.mu.Unlock()
			return 0, ErrQuota
		}
		h.cost = want
	}
	h.mu.Unlock()
	n, err := h.f.WriteAt(p, off)
	h.mu.Lock()
	h.size = max(h.size, off+int64(n))
	h.mu.Unlock()
	if err != nil {
		if quota.IsDiskFull(err) {
			return n, fmt.Errorf("write %s: %w", Display(h.name), quota.ErrDiskFull)
		}
		return n, fmt.Errorf("write %s: %w", Display(h.name), err)
	}
	return n, nil
}

// ReadAt reads from the file (a handle opened with Read).
func (h *WriteHandle) ReadAt(p []byte, off int64) (int, error) { return h.f.ReadAt(p, off) }

// Name is the file's root-relative path.
func (h *WriteHandle) Name() string { return h.name }

// Close closes the file and commits what it changed in the root: its
// cost now (measured on the open file) less its cost when opened.
func (h *WriteHandle) Close() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil
	}
	h.closed = true
	var st unix.Stat_t
	serr := unix.Fstat(int(h.f.Fd()), &st)
	cerr := h.f.Close()
	if serr != nil {
		// Unknown effect: measure the root again before trusting it.
		h.res.Release()
		h.disk.Stale()
		return fmt.Errorf("close %s: %w", Display(h.name), serr)
	}
	h.res.Changed(quota.Cost(st.Size) - h.base)
	h.res.Commit()
	if cerr != nil {
		return fmt.Errorf("close %s: %w", Display(h.name), cerr)
	}
	return nil
}

// Truncate sets regular file rel's size (an SFTP setstat), drawing a
// growth from res first (ErrQuota) and recording the change. The file is
// checked and changed as OpenWrite does: never through a link (ErrSymlink),
// never a file with other hard links (ErrHardLink) or anything but a
// regular file (ErrNotFile).
func (r *Root) Truncate(rel string, size int64, res *quota.Reservation) error {
	if err := checkClean(rel); err != nil {
		return err
	}
	if rel == "." {
		return ErrNotFile
	}
	if size < 0 {
		return fmt.Errorf("truncate %s: negative size", Display(rel))
	}
	pfd, err := r.openBeneath(rel, unix.O_PATH|unix.O_NOFOLLOW, 0)
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	h := &WriteHandle{name: rel}
	if err := h.reopen(pfd, rel, unix.O_WRONLY); err != nil {
		return err
	}
	defer h.f.Close()
	delta := quota.Cost(size) - h.base
	if err := res.Grow(delta); err != nil {
		return ErrQuota
	}
	if err := h.f.Truncate(size); err != nil {
		return fmt.Errorf("truncate %s: %w", Display(rel), err)
	}
	res.Changed(delta)
	return nil
}
