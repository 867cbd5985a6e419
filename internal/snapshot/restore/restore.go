package restore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/klauspost/compress/zstd"
	"golang.org/x/sync/errgroup"
	"golang.org/x/sync/semaphore"
	"golang.org/x/sys/unix"

	"github.com/kilnhq/kiln/internal/files"
	"github.com/kilnhq/kiln/internal/panics"
	"github.com/kilnhq/kiln/internal/quota"
	"github.com/kilnhq/kiln/internal/snapshot/engine"
	"github.com/kilnhq/kiln/internal/snapshot/manifest"
)

// ErrPending is returned by Restore when the root holds a restore
// cut during its swap (a crash, or an I/O error): Recover must finish it
// first, or it would later replay its old swap over the new restore.
var ErrPending = errors.New("an interrupted restore must be recovered first")

// Options are a restore's settings.
type Options struct {
	// Ignore is the snapshot's exclusions: entries of the tree it
	// excludes, and that the snapshot does not hold, are left as they are.
	// nil excludes none (the tree becomes exactly the snapshot).
	Ignore engine.IgnoreFunc
	// Progress, when set, is called with the bytes of file content
	// written into the staging tree so far and the snapshot's total, one
	// call at a time (from any goroutine): it must not block.
	Progress func(done, total int64)
	// Workers fetch, check and write chunks, and hash the extents of a
	// file of the tree being proven equal; 0 means runtime.NumCPU().
	Workers int
	// Only narrows the restore to one path of the snapshot and what is
	// under it (clean and relative, files.Clean's; "" or "." for all):
	// that path becomes what the snapshot holds there, everything else of
	// the tree is left as it is (the directories leading to it get the
	// snapshot's mode and mtime). A path the snapshot does not hold is
	// files.ErrNotFound, before anything is written.
	Only string
}

// Result describes a restore done.
type Result struct {
	Files, Dirs, Symlinks int
	SizeBytes             int64 // content of the files restored
	// Replaced counts the entries of the tree that were replaced or
	// removed (a directory with everything in it counts once).
	Replaced int
	// Kept counts the files of the tree proven equal to the snapshot's
	// and left in place (their mode and mtime set if they differed), and
	// KeptBytes their content: neither fetched nor written.
	Kept      int
	KeptBytes int64
}

// Names inside the root: the restore's directory (TempPrefix: invisible to
// Walk, tracked by the reservation while the restore runs) and, inside it,
// the staged tree, the entries swapped out, and the journal.
const (
	restoreBody   = "restore-"                     // then random hex: quota.TempNames.Name's body
	restorePrefix = quota.TempPrefix + restoreBody // what every restore directory's name starts with
	stageTree     = "tree"
	stageTrash    = "trash"
	journalName   = "journal"
	journalTemp   = "journal.tmp"
)

// Run makes the tree of root equal to the snapshot stored under
// manifestKey (see doc.go): every path the snapshot holds gets
// its content, mode and mtime; every other path is removed unless
// opts.Ignore excludes it, which is left as it is. The manifest is read
// and checked whole first (manifest.ErrInvalid, nothing written); the tree
// is then built in a staging directory inside the root, every chunk
// checked against its name (ErrCorruptChunk), and swapped in under a
// journal. Until the journal is written (the commit point) an error or
// ctx's end leaves the tree as it was; after it, the swap is finished
// even if ctx ends, and a crash is finished by Recover.
//
// res is the server's disk reservation: the staged tree is reserved as it
// is written (files.ErrQuota beyond the limit; the sizes the manifest
// claims are checked against the free space first). What the swap
// removed is recorded as a negative change. The caller commits or
// releases res.
//
// Errors: manifest.ErrInvalid, ErrCorruptChunk, files.ErrQuota,
// ErrPending, the store's errors (blob.ErrNotFound for a missing manifest or chunk),
// ctx.Err(), file system errors; all wrapped.
func Run(ctx context.Context, root *files.Root, res *quota.Reservation, store engine.Store, manifestKey string, opts Options) (Result, error) {
	var out Result
	rootDir, err := root.OpenDir(".")
	if err != nil {
		return Result{}, fmt.Errorf("restore %s: %w", manifestKey, err)
	}
	defer rootDir.Close()
	rootFD := int(rootDir.Fd())
	// First pass: the whole manifest checked, nothing written. What the
	// staged tree will need is estimated: a file of the tree of the
	// entry's size may stay in place (the second pass proves it, or
	// reserves it as it stages it: the limit holds either way).
	var need int64
	found := false
	live := newLiveDirs(rootFD)
	defer live.close()
	info, err := engine.Scan(ctx, store, manifestKey, func(en *manifest.Entry) error {
		under, lead := engine.OnPath(opts.Only, en.Path)
		if !under && !(lead && en.Kind == manifest.KindDir) {
			return nil
		}
		found = found || under
		switch en.Kind {
		case manifest.KindFile:
			if !live.maySkip(en) {
				need += quota.Cost(en.Size)
			}
			out.Files++
			out.SizeBytes += en.Size
		case manifest.KindDir:
			live.enter(en.Path)
			need += quota.EntryCost
			out.Dirs++
		case manifest.KindLink:
			need += quota.EntryCost
			out.Symlinks++
		}
		return nil
	})
	live.close()
	if err != nil {
		return Result{}, fmt.Errorf("restore %s: %w", manifestKey, err)
	}
	if opts.Only != "" && opts.Only != "." && !found {
		return Result{}, fmt.Errorf("restore %s: the snapshot holds no %s: %w", manifestKey, files.Display(opts.Only), files.ErrNotFound)
	}
	info.Totals.Bytes = out.SizeBytes // what the progress counts to
	if need > res.Free() {
		return Result{}, fmt.Errorf("restore %s: %w", manifestKey, files.ErrQuota)
	}

	if pending, err := journaled(rootDir, res.Names()); err != nil || pending {
		return Result{}, fmt.Errorf("restore %s: %w", manifestKey, errors.Join(err, ErrPending))
	}
	st, p, err := prepare(ctx, rootFD, res, store, manifestKey, info, opts)
	if err != nil {
		return Result{}, fmt.Errorf("restore %s: %w", manifestKey, err)
	}
	out.Kept, out.KeptBytes = p.kept, p.keptBytes
	defer st.close()
	if err := finish(rootFD, st.name, st.fd, res.Names(), -1); err != nil {
		return Result{}, fmt.Errorf("restore %s: swap (Recover finishes it): %w", manifestKey, err)
	}
	res.Changed(-p.removedCost)
	out.Replaced = p.replaced
	return out, nil
}

// prepare is Restore up to its commit point: the tree staged and synced,
// the swap planned and its journal in place. On error it leaves nothing
// behind.
func prepare(ctx context.Context, rootFD int, res *quota.Reservation, store engine.Store, key string, info manifest.Info, opts Options) (*staging, swapPlan, error) {
	st, err := newStaging(rootFD, res)
	if err != nil {
		return nil, swapPlan{}, err
	}
	committed := false
	defer func() {
		if !committed {
			st.discard(rootFD)
		}
	}()
	// Second pass: the tree built in the staging directory.
	if err := st.build(ctx, rootFD, store, key, info, opts); err != nil {
		return nil, swapPlan{}, err
	}
	if err := unix.Syncfs(st.fd); err != nil {
		return nil, swapPlan{}, fmt.Errorf("sync the staged tree: %w", err)
	}
	ignore := opts.Ignore
	if only := opts.Only; only != "" && only != "." {
		// Outside the path and the directories leading to it, the tree
		// is left as it is.
		ignore = func(rel string, isDir bool) bool {
			if under, lead := engine.OnPath(only, rel); !under && !lead {
				return true
			}
			return opts.Ignore != nil && opts.Ignore(rel, isDir)
		}
	}
	p, err := st.plan(ctx, rootFD, ignore, res.Names())
	if err != nil {
		return nil, swapPlan{}, err
	}
	if err := ctx.Err(); err != nil {
		return nil, swapPlan{}, err
	}
	// The commit point: from here on, the swap is finished, now or by
	// Recover.
	if err := st.commitJournal(); err != nil {
		return nil, swapPlan{}, err
	}
	committed = true
	return st, p, nil
}

// staging is a restore's directory in the root.
type staging struct {
	name    string // in the root
	fd      int
	tree    int // fd of stageTree
	res     *quota.Reservation
	changed atomic.Int64 // what was recorded on res (undone on discard)
}

// newStaging makes the restore's directory and its tree directory.
func newStaging(rootFD int, res *quota.Reservation) (*staging, error) {
	for range 10 {
		var b [8]byte
		_, _ = rand.Read(b[:])
		name := res.TempName(restoreBody + hex.EncodeToString(b[:]))
		if err := unix.Mkdirat(rootFD, name, 0o700); errors.Is(err, unix.EEXIST) {
			continue
		} else if err != nil {
			return nil, fmt.Errorf("make the staging directory: %w", err)
		}
		st := &staging{name: name, fd: -1, tree: -1, res: res}
		var err error
		if st.fd, err = openDirAt(rootFD, name); err == nil {
			err = res.Track(st.fd) // a walk leaves the staged tree out: res holds its bytes
		}
		if err == nil {
			err = unix.Mkdirat(st.fd, stageTree, 0o700)
		}
		if err == nil {
			err = unix.Mkdirat(st.fd, stageTrash, 0o700)
		}
		if err == nil {
			st.tree, err = openDirAt(st.fd, stageTree)
		}
		if err != nil {
			st.discard(rootFD)
			return nil, fmt.Errorf("make the staging directory: %w", err)
		}
		return st, nil
	}
	return nil, errors.New("make the staging directory: no free name")
}

// close releases the descriptors.
func (s *staging) close() {
	if s.tree >= 0 {
		unix.Close(s.tree)
		s.tree = -1
	}
	if s.fd >= 0 {
		unix.Close(s.fd)
		s.fd = -1
	}
}

// discard removes the staging directory and undoes what was recorded on
// the reservation: the restore failed before its commit point.
func (s *staging) discard(rootFD int) {
	s.close()
	_ = quota.RemoveAllAt(rootFD, s.name)
	s.res.Changed(-s.changed.Load())
}

// grow reserves n bytes for something about to be staged.
func (s *staging) grow(n int64) error {
	if err := s.res.Grow(n); err != nil {
		return files.ErrQuota
	}
	return nil
}

// made records n bytes staged.
func (s *staging) made(n int64) {
	s.res.Changed(n)
	s.changed.Add(n)
}

// dirFlags open a directory to work relative to it, never through a
// symlink.
const dirFlags = unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC

// openDirAt opens directory name of dirfd, never following a symlink.
func openDirAt(dirfd int, name string) (int, error) {
	for {
		fd, err := unix.Openat(dirfd, name, dirFlags, 0)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return -1, &os.PathError{Op: "openat", Path: name, Err: err}
		}
		return fd, nil
	}
}

// timespec is an mtime in the form utimensat takes (atime = mtime).
func timespec(ns int64) []unix.Timespec {
	t := unix.NsecToTimespec(ns)
	return []unix.Timespec{t, t}
}

// builder builds the staged tree from the manifest's entries, in order.
// Directories, links and empty files are made by the reading goroutine;
// file content is fetched, checked and written (pwrite at the chunk's
// offset) by the workers, so the chunks of one file are fetched in
// parallel too.
type builder struct {
	st    *staging
	store engine.Store
	opts  Options
	total int64
	space string // the manifest's chunk space, as the first pass read it

	stack []stagedDir // open directories of the path being built
	prove *prover     // the tree's files proven equal, kept in place
	keep  *keepList
	jobs  chan fetch
	cur   fetch               // the chunk being gathered: consecutive extents of one chunk share a fetch
	files *semaphore.Weighted // maxStagedOpen: staged files open at once

	mu       sync.Mutex
	open     map[*stagedFile]struct{} // files still being written
	done     int64
	progress sync.Mutex
}

// stagedDir is an open directory of the staged tree, and the tree's
// directory at the same path (live, -1 if there is none: only files
// there can stay in place).
type stagedDir struct {
	path  string
	fd    int
	live  int
	mtime int64
}

// stagedFile is a staged file being written.
type stagedFile struct {
	fd    int
	path  string
	mtime int64
	left  atomic.Int64 // chunks to write, plus the builder's hold
	b     *builder
}

// fetch is one chunk for a worker, and the parts of files it fills.
type fetch struct {
	ref   manifest.ChunkRef
	parts []part
}

// part is an extent to write: len bytes from off in the chunk, at at in
// file f.
type part struct {
	f            *stagedFile
	off, len, at int64
}

// maxStagedOpen bounds the staged files open at once (created, their
// content not all written yet), and so the descriptors a restore holds.
const maxStagedOpen = 256

// maxParts bounds the parts of one fetch (and so the files a fetch keeps
// open): a pack holds at most packMaxFiles files, a hostile manifest may
// name one chunk for any number (it is then fetched more than once).
const maxParts = engine.PackMaxFiles

// build reads the manifest again (checking it again: the store might not
// answer the same) and builds the tree, leaving out the files of the tree
// (rootFD) proven equal to their entries: those are listed in keepName.
func (s *staging) build(ctx context.Context, rootFD int, store engine.Store, key string, info manifest.Info, opts Options) error {
	if opts.Workers <= 0 {
		opts.Workers = runtime.NumCPU()
	}
	b := &builder{st: s, store: store, opts: opts, total: info.Totals.Bytes, space: info.Space,
		stack: []stagedDir{{path: ".", fd: s.tree, live: rootFD}},
		jobs:  make(chan fetch, 2*opts.Workers),
		files: semaphore.NewWeighted(maxStagedOpen),
		open:  make(map[*stagedFile]struct{})}
	defer b.closeAll()
	b.prove = newProver(b, opts.Workers)
	defer b.prove.close()
	keep, err := newKeepList(s.fd)
	if err != nil {
		return err
	}
	b.keep = keep
	defer keep.close()
	g, gctx := errgroup.WithContext(ctx)
	for range opts.Workers {
		g.Go(func() error { return panics.Catch(func() error { return b.work(gctx) }) })
	}
	g.Go(func() error {
		defer close(b.jobs)
		return panics.Catch(func() error {
			if _, err := engine.Scan(gctx, store, key, func(en *manifest.Entry) error {
				if under, lead := engine.OnPath(opts.Only, en.Path); under || lead && en.Kind == manifest.KindDir {
					return b.add(gctx, en)
				}
				return nil
			}); err != nil {
				return err
			}
			if err := b.dispatch(gctx); err != nil {
				return err
			}
			if err := b.popTo("."); err != nil {
				return err
			}
			return b.keep.close()
		})
	})
	return g.Wait()
}

// closeAll closes the directories and files left open (an error stopped
// the build).
func (b *builder) closeAll() {
	for _, d := range b.stack[1:] {
		unix.Close(d.fd)
		if d.live >= 0 {
			unix.Close(d.live)
		}
	}
	b.stack = b.stack[:1]
	b.mu.Lock()
	defer b.mu.Unlock()
	for f := range b.open {
		unix.Close(f.fd)
	}
	clear(b.open)
}

// popTo closes the directories of the stack below parent, setting their
// mtimes now that their entries are made.
func (b *builder) popTo(parent string) error {
	for len(b.stack) > 1 && b.stack[len(b.stack)-1].path != parent {
		d := b.stack[len(b.stack)-1]
		b.stack = b.stack[:len(b.stack)-1]
		up := b.stack[len(b.stack)-1].fd
		err := unix.UtimesNanoAt(up, path.Base(d.path), timespec(d.mtime), unix.AT_SYMLINK_NOFOLLOW)
		unix.Close(d.fd)
		if d.live >= 0 {
			unix.Close(d.live)
		}
		if err != nil {
			return fmt.Errorf("set the mtime of %s: %w", files.Display(d.path), err)
		}
	}
	if b.stack[len(b.stack)-1].path != parent {
		return fmt.Errorf("%w: %q is not an open directory", manifest.ErrInvalid, parent)
	}
	return nil
}

// add stages one entry.
func (b *builder) add(ctx context.Context, en *manifest.Entry) error {
	if err := b.popTo(path.Dir(en.Path)); err != nil {
		return err
	}
	dir, live := b.stack[len(b.stack)-1].fd, b.stack[len(b.stack)-1].live
	name := path.Base(en.Path)
	switch en.Kind {
	case manifest.KindDir:
		if err := b.st.grow(quota.EntryCost); err != nil {
			return err
		}
		if err := unix.Mkdirat(dir, name, 0o700); err != nil {
			return fmt.Errorf("stage %s: %w", files.Display(en.Path), err)
		}
		b.st.made(quota.EntryCost)
		fd, err := openDirAt(dir, name)
		if err != nil {
			return fmt.Errorf("stage %s: %w", files.Display(en.Path), err)
		}
		// A directory always keeps its owner's rwx (files' rule).
		if err := unix.Fchmod(fd, uint32(en.Mode.Perm()|0o700)); err != nil {
			unix.Close(fd)
			return fmt.Errorf("stage %s: %w", files.Display(en.Path), err)
		}
		// The tree's directory of that path, if it is one (never through
		// a symlink): the files in it may stay.
		sub := -1
		if live >= 0 {
			if sub, err = openDirAt(live, name); err != nil {
				sub = -1
			}
		}
		b.stack = append(b.stack, stagedDir{path: en.Path, fd: fd, live: sub, mtime: en.Mtime})
	case manifest.KindLink:
		if err := b.st.grow(quota.EntryCost); err != nil {
			return err
		}
		if err := unix.Symlinkat(en.Target, dir, name); err != nil {
			return fmt.Errorf("stage %s: %w", files.Display(en.Path), err)
		}
		b.st.made(quota.EntryCost)
		if err := unix.UtimesNanoAt(dir, name, timespec(en.Mtime), unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return fmt.Errorf("stage %s: %w", files.Display(en.Path), err)
		}
	case manifest.KindFile:
		if live >= 0 {
			k, err := b.prove.prove(ctx, live, name, en)
			if err != nil {
				return fmt.Errorf("check %s in place: %w", files.Display(en.Path), err)
			}
			if k != nil {
				b.report(en.Size)
				return b.keep.add(k)
			}
		}
		return b.addFile(ctx, dir, name, en)
	}
	return nil
}

// addFile creates a staged file and hands its chunks to the workers. The
// file's whole cost is reserved first: its size is the sum of its chunks,
// and every chunk is checked to be exactly its length before it is
// written, so what is reserved is what is written.
func (b *builder) addFile(ctx context.Context, dir int, name string, en *manifest.Entry) error {
	cost := quota.Cost(en.Size)
	if err := b.st.grow(cost); err != nil {
		return err
	}
	if !b.files.TryAcquire(1) {
		// The open files wait for their chunks: the gathered one must go
		// to the workers before this waits for them.
		if err := b.dispatch(ctx); err != nil {
			return err
		}
		if err := b.files.Acquire(ctx, 1); err != nil {
			return err
		}
	}
	fd, err := unix.Openat(dir, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, uint32(en.Mode.Perm()))
	if err != nil {
		b.files.Release(1)
		return fmt.Errorf("stage %s: %w", files.Display(en.Path), err)
	}
	b.st.made(cost)
	f := &stagedFile{fd: fd, path: en.Path, mtime: en.Mtime, b: b}
	b.mu.Lock()
	b.open[f] = struct{}{}
	b.mu.Unlock()
	// The umask may have narrowed the mode openat was given.
	if err := unix.Fchmod(fd, uint32(en.Mode.Perm())); err != nil {
		return fmt.Errorf("stage %s: %w", files.Display(en.Path), err)
	}
	f.left.Store(int64(len(en.Extents)) + 1)
	var at int64
	for _, x := range en.Extents {
		if len(b.cur.parts) > 0 && (b.cur.ref != x.Chunk || len(b.cur.parts) >= maxParts) {
			if err := b.dispatch(ctx); err != nil {
				return err
			}
		}
		b.cur.ref = x.Chunk
		b.cur.parts = append(b.cur.parts, part{f: f, off: x.Off, len: x.Len, at: at})
		at += x.Len
	}
	return f.finish()
}

// dispatch hands the gathered fetch to the workers.
func (b *builder) dispatch(ctx context.Context) error {
	if len(b.cur.parts) == 0 {
		return nil
	}
	select {
	case b.jobs <- b.cur:
		b.cur = fetch{}
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// finish drops one hold on the file; the last sets its mtime and closes it.
func (f *stagedFile) finish() error {
	if f.left.Add(-1) != 0 {
		return nil
	}
	f.b.mu.Lock()
	delete(f.b.open, f)
	f.b.mu.Unlock()
	defer f.b.files.Release(1)
	err := unix.UtimesNanoAt(unix.AT_FDCWD, "/proc/self/fd/"+strconv.Itoa(f.fd), timespec(f.mtime), 0)
	if cerr := unix.Close(f.fd); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("stage %s: %w", files.Display(f.path), err)
	}
	return nil
}

// work fetches chunks, checks them and writes them into their files.
func (b *builder) work(ctx context.Context) error {
	dec, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxMemory(2*engine.MaxChunk))
	if err != nil {
		return fmt.Errorf("chunk decoder: %w", err)
	}
	defer dec.Close()
	var comp, data []byte
	for j := range b.jobs {
		if err := ctx.Err(); err != nil {
			return err
		}
		if data, err = b.fetch(ctx, dec, j.ref, &comp, data); err != nil {
			return fmt.Errorf("stage %s: %w", files.Display(j.parts[0].f.path), err)
		}
		var n int64
		for _, p := range j.parts {
			if err := pwriteAll(p.f.fd, data[p.off:p.off+p.len], p.at); err != nil {
				return fmt.Errorf("stage %s: %w", files.Display(p.f.path), err)
			}
			startWriteback(p.f.fd, p.at, p.len)
			if err := p.f.finish(); err != nil {
				return err
			}
			n += p.len
		}
		b.report(n)
	}
	return nil
}

// report adds n bytes of content done (staged, or kept in place).
func (b *builder) report(n int64) {
	if b.opts.Progress != nil {
		b.progress.Lock()
		b.done += n
		b.opts.Progress(b.done, b.total)
		b.progress.Unlock()
	}
}

// fetch reads chunk ref of the manifest's space (fetchChunk).
func (b *builder) fetch(ctx context.Context, dec *zstd.Decoder, ref manifest.ChunkRef, comp *[]byte, data []byte) ([]byte, error) {
	return engine.FetchChunk(ctx, b.store, b.space, dec, ref, comp, data)
}

// writebackMin is the smallest extent whose writeback a worker starts
// as soon as it is written; smaller ones (the small files of packs) are
// left to the syncfs before the swap.
const writebackMin = 64 << 10

// startWriteback asks the kernel to start writing n bytes at off of fd
// to disk now, without waiting for it. Restore must sync the staged tree
// before its swap (the swap removes the old files: after a power loss,
// new files not yet on disk could come back empty); left to the page
// cache, the whole tree would be written during that one syncfs, after
// the build. Started here, the disk writes while the workers decompress
// and hash the next chunks, and the final syncfs finds little left to do
// (1 GiB world: syncfs 0.6–0.7 s → 0.1 s, docs/benchmarks.md). A hint:
// an error is ignored, the syncfs still makes the tree durable and says
// if it cannot.
func startWriteback(fd int, off, n int64) {
	if n >= writebackMin {
		_ = unix.SyncFileRange(fd, off, n, unix.SYNC_FILE_RANGE_WRITE)
	}
}

// pwriteAll writes all of p at off.
func pwriteAll(fd int, p []byte, off int64) error {
	for len(p) > 0 {
		n, err := unix.Pwrite(fd, p, off)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		if n == 0 {
			return io.ErrShortWrite
		}
		p, off = p[n:], off+int64(n)
	}
	return nil
}
