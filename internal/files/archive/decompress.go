package archive

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"strings"
	"sync"

	"github.com/kilnhq/kiln/internal/files"
	"github.com/kilnhq/kiln/internal/panics"
	"github.com/kilnhq/kiln/internal/quota"
	"github.com/kilnhq/kiln/internal/validate"
)

// Limits on what one archive may hold. Passing one refuses the archive
// (ErrUnsupported) before anything is moved into place.
const (
	MaxEntries   = 1_000_000 // entries of any kind
	MaxEntryName = 32 << 10  // bytes of one entry's name as stored (a path is then held to files.MaxPathLen)
	maxNameTotal = 64 << 20  // bytes of all names: what the duplicate and link checks keep in memory
)

const (
	// smallFile: a file up to this size is read into memory and handed to
	// a writer; a larger one is streamed to it through a pipe.
	smallFile = 1 << 20
	// writers create the extracted files while the reading goroutine
	// decodes the next ones. Nothing waits on the disk per file any more
	// (files.Stager: no fsync per file), so a writer is busy in the kernel
	// creating and filling files; creations in one directory take its
	// lock in turn, and a third or fourth writer mostly spins on that lock
	// (measured with 1, 2, 4, 8 on a 1 GiB world, 2 cores: 2 and 4 within
	// noise of each other and of 1 in wall time, 4 using ~1.5x the system
	// time of 1; 2 overlaps creating with decoding at little of that cost).
	writers = 2
)

// errStopped: the extraction was stopped by an earlier error (which is
// the one returned).
var errStopped = errors.New("archive: extraction stopped")

// Decompress extracts archive (a root-relative, cleaned path) into
// directory dir, by the archive's extension: .zip, .jar, .tar, .tar.gz,
// .tgz, .tar.zst, .tzst, .tar.xz, .txz, or .gz (one file, extracted as the
// name without ".gz"). It replaces existing files and merges directories.
//
// Every entry is checked before anything is moved into place: a name with
// a ".." segment, NUL or invalid UTF-8, an absolute name, a path through
// another entry that is not a directory (a symlink), a symlink whose
// target is absolute or leads out of the root (files.LinkTarget), a hard
// link to anything but an earlier regular file of the same archive (it is
// extracted as a copy), a device, FIFO or socket, an encrypted zip entry,
// the same path twice, more than MaxEntries entries or a name over
// MaxEntryName bytes refuses the whole archive with an *EntryError (or
// ErrUnsupported). Setuid, setgid and sticky bits are dropped; directories
// always keep their owner's rwx. An entry with a name in Kiln's namespace
// (".kiln-tmp-*", files.Clean) refuses the archive too.
//
// The entries are extracted into a staging directory in dir
// (files.Stager, ".kiln-tmp-stage-…"), synced, and moved into place only
// when all of them were; the staging directory is removed in every case.
// A refusal, corrupt data, the disk limit or ctx's end therefore leave dir
// as it was. A file entry that would replace an existing directory is
// refused (files.ErrExists) before anything moves; an existing file or
// symlink in an entry's place is replaced, in one rename (a directory
// entry replaces a symlink, as GNU tar does).
//
// res is the server's disk reservation. Its free space is checked up
// front against the sizes a zip declares and bounds the bytes read; the
// limit is enforced on what is actually created (files by their cost,
// hard links' copies, directories and links a block each, through the
// Stager): a lying header or a bomb stops there. Both return
// files.ErrQuota. Files being replaced are not counted back: during the
// move both copies exist (the caller has the root measured again after).
//
// Errors: *validate.Error, files.ErrNotFound, files.ErrNotFile (archive),
// files.ErrNotDirectory (dir), ErrUnsupported (unknown extension, corrupt
// data), *EntryError, files.ErrExists, files.ErrQuota, ctx.Err().
func Decompress(ctx context.Context, r *files.Root, archive, dir string, res *quota.Reservation) error {
	return decompress(ctx, r, archive, dir, res, MaxEntries)
}

// decompress is Decompress with a limit on entries that tests can lower.
func decompress(ctx context.Context, r *files.Root, archive, dir string, res *quota.Reservation, maxEntries int) error {
	if err := mustClean("file", archive); err != nil {
		return err
	}
	if err := mustClean("root", dir); err != nil {
		return err
	}
	k, stem := kindOf(path.Base(archive))
	if k == kindNone {
		return fmt.Errorf("decompress %s: %w", files.Display(archive), ErrUnsupported)
	}
	if e, err := r.Stat(dir); err != nil {
		return err
	} else if !e.IsDir() {
		return files.ErrNotDirectory
	}
	f, fe, err := r.OpenRead(archive)
	if err != nil {
		return err
	}
	defer f.Close()
	src, err := openSource(k, f, fe.Size, stem, maxEntries)
	if err != nil {
		return readError(archive, err)
	}
	defer src.close()
	free := res.Free()
	if n, ok := src.declared(); ok && n > free {
		return files.ErrQuota
	}

	st, err := r.Stage(dir, res)
	if err != nil {
		return err
	}
	defer func() { _ = st.Close() }() // removes the staging directory, moved or not
	x := newExtractor(ctx, archive, dir, st, free)
	x.maxEntries = maxEntries
	if err := x.run(src); err != nil {
		return err
	}
	return st.Commit(ctx)
}

// extractor extracts one archive's entries into its staging directory.
// run's goroutine reads the archive, checks entries, creates directories
// and links and counts the budget; the writers only write files.
type extractor struct {
	archive string        // for error messages
	dir     string        // where the entries go
	stage   *files.Stager // where they are extracted first
	free    int64
	used    int64 // bytes of file content extracted so far

	maxEntries int

	seen      map[string]seenEntry // cleaned name → what it is
	nameBytes int
	count     int

	ctx     context.Context
	cancel  context.CancelFunc
	jobs    chan job
	pending sync.WaitGroup // submitted jobs not yet done
	workers sync.WaitGroup

	mu  sync.Mutex
	err error // the first error
}

type seenEntry struct {
	typ  entryType
	perm fs.FileMode
}

// job is one file for a writer: data, or a pipe the reader streams into.
type job struct {
	rel  string // in the staging tree
	data []byte
	pipe *chunkPipe
	perm fs.FileMode
}

func newExtractor(ctx context.Context, archive, dir string, stage *files.Stager, free int64) *extractor {
	x := &extractor{
		archive: archive, dir: dir, stage: stage, free: free,
		seen: make(map[string]seenEntry),
		jobs: make(chan job),
	}
	x.ctx, x.cancel = context.WithCancel(ctx)
	return x
}

// fail records err if it is the first and stops the extraction.
func (x *extractor) fail(err error) {
	x.mu.Lock()
	if x.err == nil {
		x.err = err
	}
	x.mu.Unlock()
	x.cancel()
}

// stopErr replaces errStopped (the reader met a stopped writer or a
// cancelled context) with the reason it stopped.
func (x *extractor) stopErr(err error) error {
	if !errors.Is(err, errStopped) {
		return err
	}
	if perr := x.firstErr(); perr != nil {
		return perr
	}
	if cerr := x.ctx.Err(); cerr != nil {
		return cerr
	}
	return err
}

func (x *extractor) firstErr() error {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.err
}

// run extracts every entry of src into the staging directory and returns
// the first error; the writers have stopped when it returns.
func (x *extractor) run(src source) error {
	defer x.cancel()
	for range writers {
		x.workers.Go(x.write)
	}
	if err := x.readAll(src); err != nil {
		x.fail(x.stopErr(err))
	}
	close(x.jobs)
	x.workers.Wait()
	return x.firstErr()
}

func (x *extractor) readAll(src source) error {
	for {
		if err := x.ctx.Err(); err != nil {
			if perr := x.firstErr(); perr != nil {
				return perr
			}
			return err
		}
		e, err := src.next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return readError(x.archive, err)
		}
		if err := x.add(e); err != nil {
			return err
		}
	}
}

// write is one writer: it writes files until the jobs are closed; after a
// failure it only drains them.
func (x *extractor) write() {
	for j := range x.jobs {
		if x.ctx.Err() != nil {
			if j.pipe != nil {
				j.pipe.Stop()
			}
			x.pending.Done()
			continue
		}
		var src io.Reader = bytes.NewReader(j.data)
		if j.pipe != nil {
			src = j.pipe
		}
		// A panic fails the extraction, never the process.
		if err := panics.Catch(func() error { _, err := x.stage.Create(j.rel, src, j.perm); return err }); err != nil {
			x.fail(err)
			if j.pipe != nil {
				j.pipe.Stop()
			}
		}
		x.pending.Done()
	}
}

func (x *extractor) submit(j job) error {
	x.pending.Add(1)
	select {
	case x.jobs <- j:
		return nil
	case <-x.ctx.Done():
		x.pending.Done()
		if j.pipe != nil {
			j.pipe.Stop()
		}
		return errStopped
	}
}

// add checks one entry and extracts it into the staging directory.
func (x *extractor) add(e entry) error {
	x.count++
	if x.count > x.maxEntries {
		return limitError("the archive holds more than %d entries; at most %d are allowed", x.maxEntries, x.maxEntries)
	}
	if len(e.name) > MaxEntryName {
		return refuse(e.name, "has a name longer than %d bytes", MaxEntryName)
	}
	x.nameBytes += len(e.name) + len(e.link)
	if x.nameBytes > maxNameTotal {
		return limitError("the archive's names and link targets add up to more than %s; at most %s is allowed",
			sizeString(maxNameTotal), sizeString(maxNameTotal))
	}
	name, err := entryName(e.name)
	if err != nil {
		return err
	}
	if e.refuse != "" {
		return refuse(e.name, "%s", e.refuse)
	}
	if e.typ == typeSkip {
		return nil
	}
	if name == "." {
		if e.typ == typeDir {
			return nil // "./": the directory itself
		}
		return refuse(e.name, "has an empty name")
	}
	// Staged, the path is one component longer than in its final place:
	// it must still be one the root can name.
	if staged := join(x.stage.Dir(), name); len(staged) > files.MaxPathLen {
		return refuse(e.name, "makes a path longer than %d bytes", files.MaxPathLen-len(staged)+len(name))
	}

	if e.typ == typeHardlink {
		target, err := entryName(e.link)
		s, ok := x.seen[target]
		if err != nil || !ok || s.typ != typeFile {
			return refuse(e.name, "is a hard link to %q, which is not an earlier file of this archive", e.link)
		}
		if err := x.claim(e.name, name, typeFile, s.perm); err != nil {
			return err
		}
		return x.copyStaged(target, name, s.perm)
	}
	if err := x.claim(e.name, name, e.typ, e.perm); err != nil {
		return err
	}
	switch e.typ {
	case typeDir:
		// Owner rwx is kept (Stager.Mkdir), so the directory still takes
		// its entries and the move can take them out of it.
		return x.stage.Mkdir(name, e.perm)
	case typeSymlink:
		if reason := linkRefusal(join(x.dir, name), e.link); reason != "" {
			return refuse(e.name, "%s", reason)
		}
		err := x.stage.Symlink(e.link, name)
		if _, ok := errors.AsType[*validate.Error](err); ok {
			// Judged again from where dir really is (it may be reached
			// through a link): the archive's fault all the same.
			return refuse(e.name, "%s", issue(err, "has an invalid link target"))
		}
		return err
	}
	return x.file(name, e)
}

// entryName cleans an entry's name, refusing rather than repairing: a name
// with ".." is hostile or broken, never a path to resolve.
func entryName(raw string) (string, error) {
	switch {
	case strings.IndexByte(raw, 0) >= 0:
		return "", refuse(raw, "contains a NUL byte")
	case strings.HasPrefix(raw, "/"):
		return "", refuse(raw, "is an absolute path")
	}
	for seg := range strings.SplitSeq(raw, "/") {
		if seg == ".." {
			return "", refuse(raw, "contains a \"..\" segment")
		}
	}
	name, err := files.Clean("entry", raw)
	if err != nil {
		return "", refuse(raw, "%s", issue(err, "is not a valid path"))
	}
	return name, nil
}

// issue is the message of a validation error, for an EntryError's reason.
func issue(err error, fallback string) string {
	if ve, ok := errors.AsType[*validate.Error](err); ok && len(ve.Issues) > 0 {
		return ve.Issues[0].Message
	}
	return fallback
}

// claim records name as typ. Its parents must be directories of the
// archive (or not yet named: they become directories), so no entry is
// ever written through a symlink or a file the archive made; a path may
// appear once, a directory more than once.
func (x *extractor) claim(raw, name string, typ entryType, perm fs.FileMode) error {
	for i := range len(name) {
		if name[i] != '/' {
			continue
		}
		p := name[:i]
		s, ok := x.seen[p]
		if !ok {
			x.seen[p] = seenEntry{typ: typeDir}
			continue
		}
		if s.typ != typeDir {
			return refuse(raw, "lies under %q, which is a %s in this archive", p, s.typ)
		}
	}
	if s, ok := x.seen[name]; ok {
		if s.typ == typeDir && typ == typeDir {
			return nil
		}
		return refuse(raw, "appears twice in the archive (as a %s and a %s)", s.typ, typ)
	}
	x.seen[name] = seenEntry{typ: typ, perm: perm}
	return nil
}

// budgetReader counts the bytes read against the disk limit; classify
// marks its source's errors as the archive's.
type budgetReader struct {
	r        io.Reader
	x        *extractor
	classify bool
}

func (b *budgetReader) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if n > 0 {
		if b.x.used+int64(n) > b.x.free {
			return 0, files.ErrQuota
		}
		b.x.used += int64(n)
	}
	if err != nil && err != io.EOF && b.classify {
		err = readError(b.x.archive, err)
	}
	return n, err
}

// file extracts a regular file entry to staged.
func (x *extractor) file(staged string, e entry) error {
	rc, err := e.open()
	if err != nil {
		return readError(x.archive, err)
	}
	defer rc.Close()
	body := &budgetReader{r: rc, x: x, classify: true}
	if e.size >= 0 && e.size <= smallFile {
		buf := bytes.NewBuffer(make([]byte, 0, e.size))
		if _, err := buf.ReadFrom(body); err != nil {
			return err
		}
		return x.submit(job{rel: staged, data: buf.Bytes(), perm: e.perm})
	}
	return x.stream(staged, body, e.perm)
}

// stream hands src to a writer through a pipe.
func (x *extractor) stream(staged string, src io.Reader, perm fs.FileMode) error {
	pipe := newChunkPipe()
	if err := x.submit(job{rel: staged, pipe: pipe, perm: perm}); err != nil {
		return err
	}
	buf := make([]byte, 256<<10)
	for {
		n, rerr := src.Read(buf)
		if n > 0 {
			if _, err := pipe.Write(buf[:n]); err != nil {
				pipe.CloseWithError(errStopped)
				return errStopped // the writer failed: its error is the one kept
			}
		}
		if rerr == io.EOF {
			pipe.CloseWithError(nil)
			return nil
		}
		if rerr != nil {
			x.fail(rerr) // before the writer sees it: this is the cause
			pipe.CloseWithError(rerr)
			return rerr
		}
	}
}

// copyStaged extracts a hard link as a copy of its (earlier, already
// staged) target.
func (x *extractor) copyStaged(from, to string, perm fs.FileMode) error {
	x.pending.Wait() // the target may still be with a writer
	if err := x.firstErr(); err != nil {
		return err
	}
	f, err := x.stage.Open(from)
	if err != nil {
		return err
	}
	defer f.Close()
	return x.stream(to, &budgetReader{r: f, x: x}, perm)
}
