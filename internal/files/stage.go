package files

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"slices"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/kilnhq/kiln/internal/quota"
)

// stageCacheMax is how many directory descriptors a Stager keeps open per
// tree (the staging tree, and the destination while committing): enough
// for the directories an archive fills at once (it names them in order),
// few enough that many operations at once stay far from the descriptor
// limit.
const stageCacheMax = 256

// Stager builds a new tree in a private staging directory of a Root and
// then moves it into place (Commit): an extraction (archive's Decompress)
// creates everything through it, and nothing is visible at the
// destination before Commit.
//
// Entries are created relative to open descriptors of the staging tree's
// directories (openat, mkdirat, symlinkat), kept in a bounded cache: one
// openat per file rather than a path lookup from the root, and no
// temporary file, fsync and rename per file (the staging directory is
// private: Commit is what makes entries visible, after one Sync). No
// component is ever followed if it is a symlink (O_NOFOLLOW on every
// directory, O_CREAT|O_EXCL|O_NOFOLLOW on files), so nothing is created
// through a link, even one planted in the staging tree meanwhile.
//
// Paths given to its methods are relative to the staging tree (and, the
// same, to the destination), cleaned (Clean, Join), never ".". Create,
// Mkdir, Symlink and Open are safe for concurrent use; Sync, Commit and
// Close are not (call them once the others have returned).
type Stager struct {
	r     *Root
	dest  string // root-relative directory the tree goes to
	name  string // the staging directory's name in dest
	dfd   int    // dest's descriptor
	sfd   int    // the staging directory's descriptor
	stage *dirCache
	res   *quota.Reservation
	used  atomic.Int64

	physOnce sync.Once // pdest: where dest really is, resolved once
	pdest    string
	pdestOK  bool

	closeOnce sync.Once
	closeErr  error
}

// Stage creates a staging directory (res.TempName("stage-<random>"): invisible
// to Walk, on the same file system as dest so that Commit moves by
// renaming) in directory dest and returns a Stager on it. Every file,
// directory and link it creates is reserved from res first, by what it
// costs (ErrQuota beyond the limit), and recorded as a change of res once
// made; the caller commits res after Commit, or releases it. The caller
// closes the Stager, which removes the staging directory.
//
// Errors: ErrNotFound (dest missing, or reached through a link out of the
// root), ErrNotDirectory.
func (r *Root) Stage(dest string, res *quota.Reservation) (*Stager, error) {
	dfd, err := r.openDir(dest)
	if err != nil {
		return nil, err
	}
	for range 10 {
		var b [8]byte
		_, _ = rand.Read(b[:])
		name := res.TempName("stage-" + hex.EncodeToString(b[:]))
		if err := unix.Mkdirat(dfd, name, 0o700); errors.Is(err, unix.EEXIST) {
			continue
		} else if err != nil {
			_ = unix.Close(dfd)
			return nil, fmt.Errorf("stage in %s: %w", Display(dest), pathErr("mkdirat", name, err))
		}
		sfd, err := openDirAt(dfd, name, false)
		if err == nil {
			err = res.Track(sfd) // a walk leaves the staging tree out
		}
		if err != nil {
			_ = unix.Unlinkat(dfd, name, unix.AT_REMOVEDIR)
			_ = unix.Close(dfd)
			return nil, fmt.Errorf("stage in %s: %w", Display(dest), err)
		}
		st := &Stager{r: r, dest: dest, name: name, dfd: dfd, sfd: sfd,
			stage: newDirCache(sfd, stageCacheMax, r.owner), res: res}
		st.stage.made = st.madeDir
		return st, nil
	}
	_ = unix.Close(dfd)
	return nil, errors.New("stage: no free staging directory name")
}

// madeDir reserves a directory's block before it is made and records it
// once made.
func (s *Stager) madeDir(ok bool) error {
	if ok {
		s.res.Changed(quota.EntryCost)
		return nil
	}
	if err := s.res.Grow(quota.EntryCost); err != nil {
		return ErrQuota
	}
	return nil
}

// Dir is the staging directory, root-relative (for messages and tests).
func (s *Stager) Dir() string { return join(s.dest, s.name) }

// Written is what Create wrote so far, in bytes (files it removed after
// a failure not counted).
func (s *Stager) Written() int64 { return s.used.Load() }

// check refuses a path that did not come from Clean, and ".".
func (s *Stager) check(rel string) error {
	if err := checkClean(rel); err != nil {
		return err
	}
	if rel == "." {
		return fmt.Errorf("%w: the staging directory itself", errUnclean)
	}
	return nil
}

// Mkdir creates directory rel (and missing parents) with permission bits
// perm, plus the owner's rwx (a directory the server cannot enter or
// write to would stop the extraction and the move); setuid, setgid and
// sticky bits are dropped. An existing directory gets perm. A symlink on
// the way or at rel is ErrSymlink, a file ErrNotDirectory.
func (s *Stager) Mkdir(rel string, perm fs.FileMode) error {
	if err := s.check(rel); err != nil {
		return err
	}
	d, err := s.stage.acquire(rel, true)
	if err != nil {
		return err
	}
	defer s.stage.release(d)
	// The umask may have narrowed the mode mkdirat was given.
	if err := unix.Fchmod(d.fd, uint32(perm.Perm()|0o700)); err != nil {
		return fmt.Errorf("mkdir %s: %w", rel, err)
	}
	return nil
}

// Create creates regular file rel (and missing parents) with permission
// bits perm (setuid, setgid and sticky dropped) and what src yields, and
// returns the bytes written. The name must be new (O_CREAT|O_EXCL|
// O_NOFOLLOW: an existing file, or a symlink, is ErrExists, never written
// through); a symlink on the way is ErrSymlink. Passing the disk limit
// stops the write before the bytes that would pass it: ErrQuota.
// On any error the partial file is removed (and its bytes given back).
func (s *Stager) Create(rel string, src io.Reader, perm fs.FileMode) (int64, error) {
	if err := s.check(rel); err != nil {
		return 0, err
	}
	d, err := s.stage.acquire(path.Dir(rel), true)
	if err != nil {
		return 0, err
	}
	defer s.stage.release(d)
	name := path.Base(rel)
	fd, err := openAt(d.fd, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, uint32(perm.Perm()))
	if err != nil {
		return 0, pathErr("create", rel, err)
	}
	// The umask may have narrowed the mode openat was given.
	err = unix.Fchmod(fd, uint32(perm.Perm()))
	if err == nil {
		err = s.r.owner.ownFD(fd)
	}
	var n int64
	qw := &quota.Writer{Res: s.res}
	if err == nil {
		err = qw.Reserve(0) // an empty file costs a block too
	}
	if err == nil {
		n, err = io.Copy(&stageWriter{fd: fd, s: s, q: qw}, src)
	}
	if cerr := unix.Close(fd); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		_ = unix.Unlinkat(d.fd, name, 0)
		s.used.Add(-n) // removed: what it wrote is not on the disk any more
		qw.Abandon()
		if errors.Is(err, ErrQuota) {
			return n, ErrQuota
		}
		return n, fmt.Errorf("write %s: %w", rel, err)
	}
	s.res.Changed(qw.Delta())
	return n, nil
}

// stageWriter writes to a new file of a Stager, counting every byte
// against its budget before writing it.
type stageWriter struct {
	fd int
	s  *Stager
	q  *quota.Writer
}

func (w *stageWriter) Write(p []byte) (int, error) {
	if err := w.q.Reserve(int64(len(p))); err != nil {
		return 0, ErrQuota
	}
	w.s.used.Add(int64(len(p)))
	n := 0
	for n < len(p) {
		k, err := unix.Write(w.fd, p[n:])
		if err == unix.EINTR {
			continue
		}
		if err != nil || k == 0 {
			w.s.used.Add(-int64(len(p) - n))
			if err == nil {
				err = io.ErrShortWrite
			}
			return n, err
		}
		n += k
	}
	return n, nil
}

// Symlink creates a symbolic link at rel (and missing parents) pointing to
// target, which must pass LinkTarget from rel's final place in the
// destination (in the staging tree, one level deeper, it then stays
// inside too). An existing entry at rel is ErrExists.
func (s *Stager) Symlink(target, rel string) error {
	if err := s.check(rel); err != nil {
		return err
	}
	// From where the destination really is: dest may be reached through
	// a link inside, and ".." climbs the real directories.
	s.physOnce.Do(func() { s.pdest, s.pdestOK = s.r.Physical(s.dest) })
	if !s.pdestOK {
		return ErrNotFound
	}
	if err := LinkTarget("target", join(s.pdest, rel), target); err != nil {
		return err
	}
	d, err := s.stage.acquire(path.Dir(rel), true)
	if err != nil {
		return err
	}
	defer s.stage.release(d)
	if err := s.res.Grow(quota.EntryCost); err != nil {
		return ErrQuota
	}
	if err := unix.Symlinkat(target, d.fd, path.Base(rel)); err != nil {
		return pathErr("symlink", rel, err)
	}
	s.res.Changed(quota.EntryCost)
	return s.r.owner.ownAt(d.fd, path.Base(rel))
}

// Open opens regular file rel of the staging tree for reading (a hard
// link extracted as a copy reads its staged target). It never follows a
// symlink; anything but a regular file is ErrNotFile.
func (s *Stager) Open(rel string) (*os.File, error) {
	if err := s.check(rel); err != nil {
		return nil, err
	}
	d, err := s.stage.acquire(path.Dir(rel), false)
	if err != nil {
		return nil, err
	}
	defer s.stage.release(d)
	fd, err := openAt(d.fd, path.Base(rel), unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ELOOP) {
		return nil, ErrNotFile // a symlink
	}
	if err != nil {
		return nil, pathErr("open", rel, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		_ = unix.Close(fd)
		return nil, ErrNotFile
	}
	_ = unix.SetNonblock(fd, false)
	return os.NewFile(uintptr(fd), rel), nil
}

// openAt is openat, retried on EINTR.
func openAt(dirfd int, name string, flags int, mode uint32) (int, error) {
	for {
		fd, err := unix.Openat(dirfd, name, flags, mode)
		if err != unix.EINTR {
			return fd, err
		}
	}
}

// Sync makes everything created so far durable: one syncfs(2) of the
// file system the staging directory is on (see doc.go for why not an
// fsync per file). Since Linux 5.8 syncfs reports write-back errors of
// the file system, so a failed write is not silently lost.
func (s *Stager) Sync() error {
	if err := unix.Syncfs(s.sfd); err != nil {
		return fmt.Errorf("sync %s: %w", Display(s.Dir()), err)
	}
	return nil
}

// stagedMove is one step of Commit: staged entry rel goes to the same
// place in the destination.
type stagedMove struct {
	rel string
	how moveKind
	dir bool // a directory: moved with everything in it
}

type moveKind int

const (
	moveNew        moveKind = iota // nothing there: rename, never replacing
	moveReplace                    // a file or symlink over a file or symlink: one rename, atomic
	moveDirOverNon                 // a directory over a file or symlink: unlink, then rename
)

// Commit makes the staged tree durable (Sync), then moves it into the
// destination. An entry whose place is free is moved whole (a directory
// with everything in it: one rename); a directory over an existing
// directory is merged (its entries are moved one by one); a file or
// symlink over a file or symlink replaces it with one rename (readers see
// the old or the new one, never neither); a directory over a file or
// symlink replaces it (the link itself, never what it points to). A file
// or symlink over an existing directory is ErrExists, and every such
// conflict is looked for before the first move: when Commit returns
// ErrExists, nothing moved. The destination is descended only through
// directories (O_NOFOLLOW), never through a symlink.
//
// What Commit cannot make atomic: the moves are one rename each, so a
// crash (or a failure of the file system) during them leaves the entries
// moved so far in place and the rest in the staging directory, and an
// entry created in the destination by someone else between the check and
// its move makes that move fail (ErrExists, or the directory's error)
// rather than be overwritten. ctx is heeded until the first move. More
// than one move is a batch of the reservation (quota.Reservation.Batch):
// a snapshot walking the root meanwhile sees that it changed.
func (s *Stager) Commit(ctx context.Context) error {
	if err := s.Sync(); err != nil {
		return err
	}
	dest := newDirCache(s.dfd, stageCacheMax, s.r.owner)
	defer dest.close()
	var moves []stagedMove
	if err := s.plan(ctx, dest, ".", &moves); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if len(moves) > 1 {
		// Moved one by one, the tree is a batch to whoever reads the root
		// whole meanwhile (a snapshot's walk reads it again).
		end := s.res.Batch()
		defer end()
	}
	for _, m := range moves {
		if err := s.move(dest, m); err != nil {
			return err
		}
	}
	return nil
}

// plan appends the moves of staged directory rel's entries, then
// descends into the directories that exist on both sides (with no
// descriptor held: depth costs memory, not descriptors).
func (s *Stager) plan(ctx context.Context, dest *dirCache, rel string, moves *[]stagedMove) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	merge, err := s.planDir(dest, rel, moves)
	if err != nil {
		return err
	}
	for _, child := range merge {
		if err := s.plan(ctx, dest, child, moves); err != nil {
			return err
		}
	}
	return nil
}

// planDir compares staged directory rel with the destination's: it
// appends a move for each entry and returns the directories to merge.
func (s *Stager) planDir(dest *dirCache, rel string, moves *[]stagedMove) ([]string, error) {
	names, err := s.readDir(rel)
	if err != nil {
		return nil, err
	}
	slices.Sort(names)
	sd, err := s.stage.acquire(rel, false)
	if err != nil {
		return nil, err
	}
	defer s.stage.release(sd)
	dd, err := dest.acquire(rel, false)
	if err != nil {
		return nil, fmt.Errorf("merge into %s: %w", Display(join(s.dest, rel)), err)
	}
	defer dest.release(dd)
	var merge []string
	for _, n := range names {
		child := join(rel, n)
		var st, old unix.Stat_t
		if err := unix.Fstatat(sd.fd, n, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return nil, pathErr("fstatat", child, err)
		}
		isDir := st.Mode&unix.S_IFMT == unix.S_IFDIR
		err := unix.Fstatat(dd.fd, n, &old, unix.AT_SYMLINK_NOFOLLOW)
		switch {
		case errors.Is(err, unix.ENOENT):
			*moves = append(*moves, stagedMove{child, moveNew, isDir})
		case err != nil:
			return nil, pathErr("fstatat", join(s.dest, child), err)
		case old.Mode&unix.S_IFMT == unix.S_IFDIR && isDir:
			merge = append(merge, child)
		case old.Mode&unix.S_IFMT == unix.S_IFDIR:
			return nil, fmt.Errorf("move %s over a directory: %w", Display(join(s.dest, child)), ErrExists)
		case isDir:
			*moves = append(*moves, stagedMove{child, moveDirOverNon, true})
		default:
			*moves = append(*moves, stagedMove{child, moveReplace, false})
		}
	}
	return merge, nil
}

// readDir lists staged directory rel.
func (s *Stager) readDir(rel string) ([]string, error) {
	d, err := s.stage.acquire(rel, false)
	if err != nil {
		return nil, err
	}
	fd, err := openAt(d.fd, ".", dirFlags, 0)
	s.stage.release(d)
	if err != nil {
		return nil, pathErr("openat", rel, err)
	}
	f := os.NewFile(uintptr(fd), rel)
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", rel, err)
	}
	return names, nil
}

// move carries out one step of Commit.
func (s *Stager) move(dest *dirCache, m stagedMove) error {
	dir, name := path.Dir(m.rel), path.Base(m.rel)
	sd, err := s.stage.acquire(dir, false)
	if err != nil {
		return err
	}
	defer s.stage.release(sd)
	dd, err := dest.acquire(dir, false)
	if err != nil {
		return fmt.Errorf("move into %s: %w", Display(join(s.dest, dir)), err)
	}
	defer dest.release(dd)
	to := join(s.dest, m.rel)
	switch m.how {
	case moveReplace:
		if err := unix.Renameat(sd.fd, name, dd.fd, name); err != nil {
			return fmt.Errorf("move %s: %w", Display(to), pathErr("rename", to, err))
		}
		return nil
	case moveDirOverNon:
		// unlinkat without AT_REMOVEDIR never removes a directory: one
		// put there meanwhile makes this fail rather than disappear.
		if err := unix.Unlinkat(dd.fd, name, 0); err != nil && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("replace %s: %w", Display(to), pathErr("unlink", to, err))
		}
	}
	if err := renameNoReplace(sd.fd, name, dd.fd, name); err != nil {
		return fmt.Errorf("move %s: %w", Display(to), err)
	}
	if m.dir {
		s.stage.forget(m.rel) // moved away: its descriptors now lie in the destination
	}
	return nil
}

// Close removes the staging directory with whatever is still in it (all
// of it, without Commit) and releases the descriptors. It is idempotent.
func (s *Stager) Close() error {
	s.closeOnce.Do(func() {
		s.stage.close()
		_ = unix.Close(s.sfd)
		err := s.r.r.RemoveAll(join(s.dest, s.name))
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			s.closeErr = fmt.Errorf("remove %s: %w", Display(s.Dir()), classify(err))
		}
		_ = unix.Close(s.dfd)
	})
	return s.closeErr
}

// join joins a root-relative directory and a cleaned relative path.
func join(dir, rel string) string {
	switch {
	case dir == ".":
		return rel
	case rel == ".":
		return dir
	}
	return dir + "/" + rel
}
