package files

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/kilnhq/kiln/internal/quota"
)

// quotaWriter grows the reservation by what the file will cost before
// each write passes it on: the limit is enforced on bytes actually
// written, never on a size someone claimed.
type quotaWriter struct {
	w io.Writer
	q *quota.Writer
}

func (q *quotaWriter) Write(p []byte) (int, error) {
	if err := q.q.Reserve(int64(len(p))); err != nil {
		return 0, err
	}
	return q.w.Write(p)
}

// WriteFile replaces (or creates) regular file rel with what src yields,
// atomically: the data goes to a temporary file in the same directory,
// is synced, then renamed over rel, so readers see the old or the new file,
// never half. Parents are created. A symlink at rel is replaced, never
// written through; a directory there is ErrNotFile. res is the server's
// disk reservation: the write grows it as bytes arrive (the replaced
// file's cost is spent first) and records its change (Changed); passing
// the limit stops the write, removes the temporary file and returns
// ErrQuota. The caller commits or releases res. An existing file keeps
// its permission bits.
func (r *Root) WriteFile(rel string, src io.Reader, res *quota.Reservation) (Entry, error) {
	e, err := r.write(rel, "", src, res, 0)
	return e, err
}

// WriteFilePrivate is WriteFile for a file holding a secret: written 0600
// whatever the file's mode was, and created so, never readable by others
// between its write and a chmod.
func (r *Root) WriteFilePrivate(rel string, src io.Reader, res *quota.Reservation) (Entry, error) {
	return r.write(rel, "", src, res, 0o600)
}

// WriteFileTemp is WriteFile with a known temporary file name (res's
// TempName of tag, e.g. a download id) instead of a random one, so that
// an operation interrupted by a crash can find and remove its partial
// file later (RemoveTemp). tag must be a plain name without "/".
func (r *Root) WriteFileTemp(rel, tag string, src io.Reader, res *quota.Reservation) (Entry, error) {
	if tag == "" || strings.ContainsAny(tag, "/\x00") || len(tag) > 64 {
		return Entry{}, fmt.Errorf("files: bad temporary file tag %q", tag)
	}
	return r.write(rel, tag, src, res, 0)
}

// RemoveTemp removes the temporary file of tag in directory dir, if any:
// the one WriteFileTemp made under a reservation of an account of names.
func (r *Root) RemoveTemp(dir, tag string, names quota.TempNames) error {
	if err := checkClean(dir); err != nil {
		return err
	}
	err := r.r.Remove(path.Join(dir, names.Name(tag)))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return classify(err)
}

// copyBuffers are the buffers of write's copy: 256 KiB (a quarter of the
// syscalls of io.Copy's 32 KiB) and reused, since fresh memory costs page
// faults on every request.
var copyBuffers = sync.Pool{New: func() any { b := make([]byte, 256<<10); return &b }}

// writeBehindChunk is how much write lets pile up before asking the kernel
// to start writing it back.
const writeBehindChunk = 256 << 10

// writeBehind writes to f and, every writeBehindChunk bytes, starts the
// kernel's writeback of what came before (sync_file_range, without
// waiting): the disk works while the rest of the body is still arriving,
// so the fsync before the rename waits for the tail and the journal only.
type writeBehind struct {
	f       *os.File
	off     int64 // bytes written
	started int64 // bytes handed to writeback
	head    [sniffLen]byte
	nhead   int // bytes of head filled: the file's start, for its MIME type
}

func (w *writeBehind) Write(p []byte) (int, error) {
	if w.nhead < len(w.head) {
		w.nhead += copy(w.head[w.nhead:], p)
	}
	n, err := w.f.Write(p)
	w.off += int64(n)
	if w.off-w.started >= writeBehindChunk {
		if rc, cerr := w.f.SyscallConn(); cerr == nil {
			_ = rc.Control(func(fd uintptr) {
				// Only a hint: an error leaves the work to the fsync.
				_ = unix.SyncFileRange(int(fd), w.started, w.off-w.started, unix.SYNC_FILE_RANGE_WRITE)
			})
		}
		w.started = w.off
	}
	return n, err
}

// holdMin is the size from which write keeps the replaced file's inode
// open across the rename: freeing a file's blocks is the filesystem's work
// at the last reference's drop (ext4: ~0.8 ms for 1 MiB here, inside
// rename(2)); held, it happens at the hold's close, in the background,
// after the new file is in place.
const holdMin = 64 << 10

// write is WriteFile, WriteFilePrivate and WriteFileTemp: the new file
// gets mode (0: the old file's, or 0644).
func (r *Root) write(rel, tag string, src io.Reader, res *quota.Reservation, mode fs.FileMode) (Entry, error) {
	if err := checkClean(rel); err != nil {
		return Entry{}, err
	}
	if rel == "." {
		return Entry{}, ErrNotFile
	}
	perm := fs.FileMode(0o644)
	if mode != 0 {
		perm = mode
	}
	var credit int64
	var hold *os.File
	if old, err := r.Stat(rel); err == nil {
		switch {
		case old.IsDir():
			return Entry{}, ErrNotFile
		case old.IsFile():
			if mode == 0 {
				perm = old.Mode.Perm()
			}
			credit = quota.Cost(old.Size)
			if old.Size >= holdMin {
				// O_PATH: a reference to the inode, nothing opened (no
				// device's open runs should the path have been swapped).
				hold, _ = r.r.OpenFile(rel, unix.O_PATH|unix.O_NOFOLLOW, 0)
			}
		default: // a symlink or another entry: replaced, its block freed
			credit = quota.EntryCost
		}
	} else if !errors.Is(err, ErrNotFound) {
		return Entry{}, err
	}
	if hold != nil {
		defer func() { go hold.Close() }()
	}
	dir := path.Dir(rel)
	tmp, f, err := r.createTemp(dir, tag, perm, res)
	var dirs int64
	if errors.Is(err, ErrNotFound) {
		// A parent is missing: make them (only now: in the common case
		// they exist, and MkdirAll costs two system calls to find that),
		// each a block of the limit.
		if dirs, err = r.mkdirAll(dir, res); err != nil {
			return Entry{}, err
		}
		tmp, f, err = r.createTemp(dir, tag, perm, res)
	}
	if err != nil {
		return Entry{}, err
	}
	committed := false
	defer func() {
		if !committed {
			f.Close()
			_ = r.r.Remove(tmp)
		}
	}()
	bufp := copyBuffers.Get().(*[]byte)
	defer copyBuffers.Put(bufp)
	wb := &writeBehind{f: f}
	qw := &quota.Writer{Res: res, Credit: credit}
	if err := qw.Reserve(0); err != nil { // an empty file costs a block too
		return Entry{}, err
	}
	if _, err := io.CopyBuffer(&quotaWriter{w: wb, q: qw}, src, *bufp); err != nil {
		qw.Abandon() // the temporary file goes (deferred above)
		if errors.Is(err, quota.ErrQuota) {
			return Entry{}, ErrQuota
		}
		return Entry{}, fmt.Errorf("write %s: %w", Display(rel), err)
	}
	if err := f.Sync(); err != nil {
		return Entry{}, fmt.Errorf("write %s: %w", Display(rel), err)
	}
	// Described from the open file (the rename changes nothing of it):
	// no second path lookup.
	e, err := statFile(f, path.Base(rel))
	if err != nil {
		return Entry{}, fmt.Errorf("write %s: %w", Display(rel), err)
	}
	e.MIME = typeOf(e, func() []byte { return wb.head[:wb.nhead] })
	if err := f.Close(); err != nil {
		return Entry{}, fmt.Errorf("write %s: %w", Display(rel), err)
	}
	if err := r.r.Rename(tmp, rel); err != nil {
		return Entry{}, classify(err)
	}
	committed = true
	res.Changed(qw.Delta() + dirs*quota.EntryCost)
	return e, nil
}

// mkdirAll creates directory rel and its missing parents, reserving a
// block of res for each one it creates, and returns how many it created.
func (r *Root) mkdirAll(rel string, res *quota.Reservation) (int64, error) {
	var missing int64
	for d := rel; d != "."; d = path.Dir(d) {
		_, err := r.Stat(d)
		if err == nil {
			// A directory, or a link or file MkdirAll will judge (a link
			// inside is followed, one leading out is ErrNotFound).
			break
		}
		if !errors.Is(err, ErrNotFound) {
			return 0, err
		}
		missing++
	}
	if missing == 0 {
		return 0, nil
	}
	if err := res.Grow(missing * quota.EntryCost); err != nil {
		return 0, ErrQuota
	}
	if err := r.r.MkdirAll(rel, 0o755); err != nil {
		return 0, classify(err)
	}
	// The missing directories were the last ones of rel.
	for p, i := rel, int64(0); i < missing && p != "."; p, i = path.Dir(p), i+1 {
		if err := r.ownRel(p); err != nil {
			return 0, err
		}
	}
	return missing, nil
}

// statFile describes the open file f under name.
func statFile(f *os.File, name string) (Entry, error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return Entry{}, err
	}
	var st unix.Statx_t
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = unix.Statx(int(fd), "", unix.AT_EMPTY_PATH|unix.AT_STATX_SYNC_AS_STAT, statxMask, &st)
	}); err != nil {
		return Entry{}, err
	}
	if serr != nil {
		return Entry{}, &os.PathError{Op: "statx", Path: name, Err: serr}
	}
	return fromStatx(name, &st), nil
}

// createTemp makes a new, exclusive temporary file in dir: res's
// TempName of tag, or of a random body when tag is empty (names only Kiln
// can make: quota.TempNames). A leftover file of the same tag (a crash) is
// replaced.
func (r *Root) createTemp(dir, tag string, perm fs.FileMode, res *quota.Reservation) (string, *os.File, error) {
	if tag != "" {
		_ = r.r.Remove(path.Join(dir, res.TempName(tag)))
	}
	for range 10 {
		var b [8]byte
		_, _ = rand.Read(b[:])
		name := path.Join(dir, res.TempName(hex.EncodeToString(b[:])))
		if tag != "" {
			name = path.Join(dir, res.TempName(tag))
		}
		f, err := r.r.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err != nil {
			return "", nil, classify(err)
		}
		// The umask may have narrowed perm; set it as asked. Tracked: a
		// walk leaves it out, its bytes are in res. The server's user
		// owns it (its game may rewrite it in place).
		err = f.Chmod(perm)
		if err == nil {
			err = r.owner.ownFD(int(f.Fd()))
		}
		if err == nil {
			err = res.Track(int(f.Fd()))
		}
		if err != nil {
			f.Close()
			_ = r.r.Remove(name)
			return "", nil, err
		}
		return name, f, nil
	}
	return "", nil, errors.New("no free temporary file name")
}
