package engine

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"os"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/google/uuid"
	"github.com/klauspost/compress/zstd"
	"golang.org/x/sync/errgroup"
	"golang.org/x/sync/semaphore"

	"github.com/kilnhq/kiln/internal/blob"
	"github.com/kilnhq/kiln/internal/files"
	"github.com/kilnhq/kiln/internal/panics"
)

// Store is what the engine needs of a blob store (internal/blob's Store).
type Store interface {
	Put(ctx context.Context, key string, r io.Reader, size int64) (created bool, err error)
	Get(ctx context.Context, key string) (io.ReadCloser, error)
	Stat(ctx context.Context, key string) (blob.Info, error)
}

// ErrExists is returned by Create when a manifest with the snapshot's ID
// is already stored (manifests are never replaced).
var ErrExists = errors.New("a snapshot with this id already exists")

// IgnoreFunc reports whether rel (slash-separated, relative to the root,
// no leading "/") is excluded from snapshots; isDir tells a directory
// (whose whole content is then excluded). It is internal/snapshot/ignore's
// (*Matcher).Match.
type IgnoreFunc func(rel string, isDir bool) bool

// CreateOptions are a snapshot's settings.
type CreateOptions struct {
	// ID is the snapshot's UUID (lower case, canonical form): the manifest
	// is stored as manifests/<ID>. Empty: a new random one.
	ID string
	// Ignore excludes paths; nil excludes none.
	Ignore IgnoreFunc
	// Progress, when set, is called with the bytes of file content read
	// and cut so far and the total the tree held when a first walk (stat
	// only) measured it. Files that change meanwhile can make done pass
	// total; the last call has done == total. It is called from one
	// goroutine, one call at a time, after each chunk cut and each small
	// file packed: it must not block.
	Progress func(done, total int64)
	// Known, when set, tells chunks the caller knows to be in the store
	// (those of a snapshot it keeps, say): they are neither looked up nor
	// uploaded. Any other chunk is looked up (Stat) and uploaded if
	// missing.
	Known func(key string) bool
	// Pin, when set, is called once for each distinct chunk the snapshot
	// references, before the chunk is looked up or uploaded: the caller's
	// collector must not delete a pinned chunk (internal/snapshot's
	// ledger). An error fails the snapshot.
	Pin func(ctx context.Context, key string) error
	// Stored, when set, is told each distinct chunk's size in the store
	// once it is known to be there (looked up or uploaded).
	Stored func(key string, size int64)
	// Workers compress chunks at once; 0 means runtime.NumCPU().
	Workers int
	// Transfers look chunks up and upload them at once (hashing them
	// first); 0 means 16. Stores answer with a latency (a file store's
	// fsync, an S3 round trip) that many transfers at once hide.
	Transfers int
}

// Result describes a snapshot made.
type Result struct {
	ID          string
	ManifestKey string
	// SizeBytes is the content of the files recorded (the tree's logical
	// size).
	SizeBytes int64
	// StoredBytes is what this snapshot added to the store: the compressed
	// chunks it uploaded (not those already there) and the manifest.
	StoredBytes int64
	// Chunks are the keys of every chunk the manifest references, sorted,
	// each once: what a collector must keep while the snapshot exists.
	Chunks    []string
	NewChunks int // chunks uploaded by this snapshot

	Files, Dirs, Symlinks int
	Skipped               Skipped
}

// Skipped counts the entries a snapshot leaves out (besides the ignored
// ones).
type Skipped struct {
	// HardLinks are regular files with more than one link: one of them may
	// be a file outside the root (files.ErrHardLink), so Kiln never reads
	// them.
	HardLinks int
	// Links are symlinks whose target leads outside the root, or could
	// (linkAllowed): a restore would refuse them.
	Links int
	// Special are devices, FIFOs and sockets.
	Special int
}

// Pipeline bounds (see doc.go): these, not the tree, bound Create's memory.
const (
	walkQueue        = 16       // entries walked ahead of the chunker (each may hold an open file)
	orderQueue       = 64       // entries cut, waiting for their chunks to be stored
	defaultTransfers = 16       // chunks looked up or uploaded at once
	inFlightBytes    = 64 << 20 // chunk bytes (and room for their compressed form) between cutter and store
)

// item is one entry on its way through Create: the walker makes it, the
// chunker cuts its content into jobs, the workers fill its chunks in, and
// the manifest writer waits for it (done) and writes it.
type item struct {
	en   entry
	f    *os.File // a regular file to cut; nil for others
	ext  []pendingExtent
	left atomic.Int32
	done chan struct{}
}

// pendingExtent is an extent whose chunk a worker names (ref.sum) later.
type pendingExtent struct {
	ref      *chunkRef
	off, len int64
}

// finish drops one of the item's pending holds; the last one closes done.
func (it *item) finish() {
	if it.left.Add(-1) == 0 {
		close(it.done)
	}
}

// job is one chunk for a transfer.
type job struct {
	items []*item // the file it is cut from, or the files of a pack
	ref   *chunkRef
	data  []byte // its bytes: 2*len(data) of the budget are held for it
}

// creator is one Create in progress.
type creator struct {
	root  *files.Root
	store Store
	opts  CreateOptions

	budget   *semaphore.Weighted // inFlightBytes: what bounds Create's memory
	encoders chan *zstd.Encoder  // Workers of them: what bounds its CPU

	mu      sync.Mutex
	seen    map[[32]byte]struct{} // chunks referenced so far
	stored  int64
	created int
	res     Result
}

// Create snapshots the tree of root into store: it walks the tree by
// descriptor (files.Root.Walk: symlinks never followed, nothing opened
// through one), leaves out what opts.Ignore excludes and what Skipped
// counts, cuts every regular file into content-defined chunks, stores
// each chunk that is not in the store yet under its SHA-256
// (zstd-compressed), and stores the manifest last, once every chunk it
// references is stored. Nothing is written to the root.
//
// Errors: ErrExists (the ID is taken), ctx.Err(), or the store's and the
// file system's errors, wrapped. On error the chunks already stored stay
// (a collector removes those no manifest references); the manifest is not
// stored.
func Create(ctx context.Context, root *files.Root, store Store, opts CreateOptions) (Result, error) {
	if opts.ID == "" {
		opts.ID = uuid.NewString()
	}
	if u, err := uuid.Parse(opts.ID); err != nil || u.String() != opts.ID {
		return Result{}, fmt.Errorf("snapshot id %q is not a canonical lower-case UUID", opts.ID)
	}
	if opts.Workers <= 0 {
		opts.Workers = runtime.NumCPU()
	}
	if opts.Transfers <= 0 {
		opts.Transfers = defaultTransfers
	}
	key := ManifestKey(opts.ID)
	switch _, err := store.Stat(ctx, key); {
	case err == nil:
		return Result{}, ErrExists
	case !errors.Is(err, blob.ErrNotFound):
		return Result{}, fmt.Errorf("snapshot %s: %w", opts.ID, err)
	}
	var total int64
	if opts.Progress != nil {
		var err error
		if total, err = measure(ctx, root, opts.Ignore); err != nil {
			return Result{}, err
		}
	}
	c := &creator{root: root, store: store, opts: opts, seen: make(map[[32]byte]struct{}),
		budget: semaphore.NewWeighted(inFlightBytes), encoders: make(chan *zstd.Encoder, opts.Workers)}
	for range opts.Workers {
		enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1),
			zstd.WithLowerEncoderMem(true), zstd.WithWindowSize(maxChunk))
		if err != nil {
			return Result{}, fmt.Errorf("chunk encoder: %w", err)
		}
		defer enc.Close()
		c.encoders <- enc
	}
	c.res.ID, c.res.ManifestKey = opts.ID, key
	if err := c.run(ctx, total); err != nil {
		return Result{}, fmt.Errorf("snapshot %s: %w", opts.ID, err)
	}
	c.res.Chunks = make([]string, 0, len(c.seen))
	for sum := range c.seen {
		c.res.Chunks = append(c.res.Chunks, chunkKey(sum))
	}
	slices.Sort(c.res.Chunks)
	c.res.StoredBytes += c.stored
	c.res.NewChunks = c.created
	return c.res, nil
}

// ManifestKey is the blob key of snapshot id's manifest.
func ManifestKey(id string) string { return "manifests/" + id }

// run is the pipeline: walk → cut → (workers) → write the manifest, with
// the manifest streamed to the store as it is written.
func (c *creator) run(ctx context.Context, total int64) error {
	g, ctx := errgroup.WithContext(ctx)
	walked := make(chan *item, walkQueue)
	ordered := make(chan *item, orderQueue)
	jobs := make(chan job, c.opts.Transfers)
	// A stage closes its output only when it succeeded: a failed walk
	// must never look like the end of the tree to the manifest writer
	// (the error cancels ctx, which every stage heeds).
	g.Go(func() error {
		err := panics.Catch(func() error { return c.walk(ctx, walked) })
		if err == nil {
			close(walked)
		}
		return err
	})
	g.Go(func() error {
		defer close(jobs) // the workers end either way
		err := panics.Catch(func() error { return c.cut(ctx, walked, ordered, jobs, total) })
		if err == nil {
			close(ordered)
		}
		return err
	})
	var workers sync.WaitGroup
	for range c.opts.Transfers {
		workers.Add(1)
		g.Go(func() error {
			defer workers.Done()
			return panics.Catch(func() error { return c.work(ctx, jobs) })
		})
	}
	pr, pw := io.Pipe()
	var manifestSize int64
	g.Go(func() error {
		return panics.Catch(func() error {
			cr := &countingReader{r: pr}
			created, err := c.store.Put(ctx, c.res.ManifestKey, cr, -1)
			if err == nil && !created {
				err = ErrExists
			}
			// The writer must not block on a reader that is gone.
			pr.CloseWithError(errors.Join(err, io.ErrClosedPipe))
			manifestSize = cr.n
			if err != nil {
				return fmt.Errorf("store manifest: %w", err)
			}
			return nil
		})
	})
	g.Go(func() error {
		return panics.Catch(func() error {
			err := c.writeManifest(ctx, ordered, pw)
			if err != nil {
				pw.CloseWithError(err)
				// Let the cutter and workers stop: the context is
				// cancelled by the error returned.
				return err
			}
			return pw.Close()
		})
	})
	err := g.Wait()
	workers.Wait()
	// Whatever ended early, the files still queued are closed.
	for len(walked) > 0 {
		if it := <-walked; it.f != nil {
			it.f.Close()
		}
	}
	if err != nil {
		return err
	}
	c.res.StoredBytes += manifestSize
	return nil
}

// countingReader counts what a Put read.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// measure is the first walk: the bytes of the files Create will read.
func measure(ctx context.Context, root *files.Root, ignore IgnoreFunc) (int64, error) {
	var total int64
	err := root.Walk(ctx, ".", func(rel string, e files.Entry, _ func() (*os.File, error)) error {
		if rel == "." {
			return nil
		}
		if ignore != nil && ignore(rel, e.IsDir()) {
			if e.IsDir() {
				return files.ErrSkipDir
			}
			return nil
		}
		if e.IsFile() {
			total += e.Size
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("measure the tree: %w", err)
	}
	return total, nil
}

// walk visits the tree and sends what the manifest records, in walk order
// (parents first, names in byte order), regular files opened.
func (c *creator) walk(ctx context.Context, out chan<- *item) error {
	err := c.root.Walk(ctx, ".", func(rel string, e files.Entry, open func() (*os.File, error)) error {
		if rel == "." {
			return nil
		}
		if c.opts.Ignore != nil && c.opts.Ignore(rel, e.IsDir()) {
			if e.IsDir() {
				return files.ErrSkipDir
			}
			return nil
		}
		it := &item{en: entry{path: rel, mode: e.Mode.Perm(), mtime: e.ModTime.UnixNano()}}
		switch {
		case e.IsDir():
			it.en.kind = kindDir
			c.res.Dirs++
		case e.IsSymlink():
			target, err := c.root.Readlink(rel)
			if errors.Is(err, files.ErrNotFound) {
				return nil // gone meanwhile
			}
			if err != nil {
				return err
			}
			if !linkAllowed(rel, target) || !c.root.LinkInside(rel, target) {
				c.res.Skipped.Links++
				return nil
			}
			it.en.kind, it.en.target, it.en.mode = kindLink, target, 0
			c.res.Symlinks++
		case e.IsFile():
			f, err := open()
			if errors.Is(err, files.ErrNotFound) || errors.Is(err, files.ErrNotFile) {
				return nil // gone or replaced meanwhile
			}
			if err != nil {
				return err
			}
			if hardLinked(f) {
				f.Close()
				c.res.Skipped.HardLinks++
				return nil
			}
			it.en.kind, it.f, it.en.size = kindFile, f, e.Size
			c.res.Files++
		default:
			c.res.Skipped.Special++
			return nil
		}
		select {
		case out <- it:
			return nil
		case <-ctx.Done():
			if it.f != nil {
				it.f.Close()
			}
			return ctx.Err()
		}
	})
	if err != nil {
		return fmt.Errorf("walk: %w", err)
	}
	return nil
}

// hardLinked reports whether open regular file f has other hard links (a
// failed stat counts as linked: the file is left out, not read).
func hardLinked(f *os.File) bool {
	fi, err := f.Stat()
	if err != nil {
		return true
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	return !ok || st.Nlink > 1
}

// Packs (doc.go): a file of at most packFileMax bytes would be one chunk
// of its own (FastCDC never cuts before minChunk); it is put in a pack
// with its neighbours instead, so that a world's thousands of small
// files make a few hundred chunks, not thousands of store requests.
const (
	packFileMax  = minChunk
	packMaxFiles = 1024 // files in one pack
	packMaxHeld  = 4096 // entries held back while a pack is open
)

// packEnds tells whether the pack ends after a small file: the file's
// path decides, with a chance of size/avgChunk (about avgChunk bytes a
// pack), so the decision is the file's own. A file that changes changes
// its pack, and the next at most; the others stay the same chunks.
func packEnds(rel string, size int64) bool {
	h := fnv.New64a()
	h.Write([]byte(rel))
	return int64(h.Sum64()%avgChunk) < size
}

// cutter is the cutting stage of Create.
type cutter struct {
	c       *creator
	ch      *chunker
	jobs    chan<- job
	ordered chan<- *item
	total   int64
	done    int64

	small  []byte  // a small file's content, read whole
	pack   []byte  // the open pack
	packed []*item // the files in it
	held   []*item // entries from the pack's first file on, in walk order
}

// cut reads each file and hands its chunks to the transfers, and passes
// every entry on, in order, to the manifest writer; an entry behind an
// open pack waits for the pack to be handed over.
func (c *creator) cut(ctx context.Context, in <-chan *item, ordered chan<- *item, jobs chan<- job, total int64) error {
	ch, err := newChunker()
	if err != nil {
		return err
	}
	k := &cutter{c: c, ch: ch, jobs: jobs, ordered: ordered, total: total,
		small: make([]byte, packFileMax+1), pack: make([]byte, 0, maxChunk)}
	for {
		var it *item
		select {
		case it = <-in:
		case <-ctx.Done():
			return ctx.Err()
		}
		if it == nil {
			break // in was closed: the walk is complete
		}
		it.done = make(chan struct{})
		it.left.Store(1) // the cutter's own hold, dropped once the file is cut
		if it.f != nil {
			err := k.file(ctx, it)
			it.f.Close()
			it.f = nil
			if err != nil {
				return err
			}
		}
		it.finish()
		if err := k.pass(ctx, it); err != nil {
			return err
		}
	}
	if err := k.flush(ctx); err != nil {
		return err
	}
	if c.opts.Progress != nil {
		c.opts.Progress(k.done, k.done)
	}
	return nil
}

func (k *cutter) progress(n int64) {
	k.done += n
	if k.c.opts.Progress != nil {
		k.c.opts.Progress(k.done, max(k.total, k.done))
	}
}

// pass hands an entry to the manifest writer, or holds it behind the
// open pack.
func (k *cutter) pass(ctx context.Context, it *item) error {
	if len(k.packed) > 0 {
		k.held = append(k.held, it)
		if len(k.held) >= packMaxHeld {
			return k.flush(ctx)
		}
		return nil
	}
	select {
	case k.ordered <- it:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// file reads a regular file: a small one into the open pack, a larger one
// cut into chunks of its own.
func (k *cutter) file(ctx context.Context, it *item) error {
	walked := it.en.size
	it.en.size = 0 // what is read, whatever the walk saw
	if walked > packFileMax {
		return k.cutFile(ctx, it, it.f)
	}
	n, err := io.ReadFull(it.f, k.small)
	switch {
	case err == nil:
		// Larger than the walk saw: cut it alone, from what was read on.
		return k.cutFile(ctx, it, io.MultiReader(bytes.NewReader(k.small), it.f))
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
	default:
		return fmt.Errorf("read %s: %w", files.Display(it.en.path), err)
	}
	if n == 0 {
		return nil
	}
	if len(k.pack)+n > maxChunk {
		if err := k.flush(ctx); err != nil {
			return err
		}
	}
	it.ext = append(it.ext, pendingExtent{off: int64(len(k.pack)), len: int64(n)})
	it.en.size = int64(n)
	it.left.Add(1) // the pack's hold
	k.pack = append(k.pack, k.small[:n]...)
	k.packed = append(k.packed, it)
	k.progress(int64(n))
	if packEnds(it.en.path, int64(n)) || len(k.packed) >= packMaxFiles {
		// The pack ends with this file: handed over with the entries
		// held before it; the file itself follows them (pass).
		return k.flush(ctx)
	}
	return nil
}

// flush hands the open pack over, then the entries held behind it.
func (k *cutter) flush(ctx context.Context) error {
	if len(k.packed) == 0 {
		return k.release(ctx)
	}
	if err := k.send(ctx, k.packed, k.pack); err != nil {
		return err
	}
	k.packed, k.pack = k.packed[:0], k.pack[:0]
	return k.release(ctx)
}

// release sends the held entries on.
func (k *cutter) release(ctx context.Context) error {
	for _, it := range k.held {
		select {
		case k.ordered <- it:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	k.held = k.held[:0]
	return nil
}

// send hands one chunk to the transfers: data (copied), which items'
// extents point to (their ref is set here).
func (k *cutter) send(ctx context.Context, items []*item, data []byte) error {
	// Room for the chunk and its compressed form (never much more than
	// the chunk): released once it is stored.
	if err := k.c.budget.Acquire(ctx, 2*int64(len(data))); err != nil {
		return err
	}
	ref := &chunkRef{len: int64(len(data))}
	for _, it := range items {
		it.ext[len(it.ext)-1].ref = ref
	}
	select {
	case k.jobs <- job{items: slices.Clone(items), ref: ref, data: bytes.Clone(data)}:
		return nil
	case <-ctx.Done():
		k.c.budget.Release(2 * int64(len(data)))
		return ctx.Err()
	}
}

// cutFile cuts one file (r: its content) into chunks of its own.
func (k *cutter) cutFile(ctx context.Context, it *item, r io.Reader) error {
	k.ch.reset(r)
	for {
		data, err := k.ch.next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read %s: %w", files.Display(it.en.path), err)
		}
		it.ext = append(it.ext, pendingExtent{len: int64(len(data))})
		it.en.size += int64(len(data))
		it.left.Add(1)
		if err := k.send(ctx, []*item{it}, data); err != nil {
			return err
		}
		k.progress(int64(len(data)))
	}
}

// work hashes, compresses and stores chunks until jobs is closed.
func (c *creator) work(ctx context.Context, jobs <-chan job) error {
	for j := range jobs {
		err := c.store1(ctx, j)
		c.budget.Release(2 * j.ref.len)
		if err != nil {
			return err
		}
		for _, it := range j.items {
			it.finish()
		}
	}
	return nil
}

// store1 names one chunk and stores it unless it is known, already
// referenced by this snapshot, or in the store.
func (c *creator) store1(ctx context.Context, j job) error {
	j.ref.sum = sha256.Sum256(j.data)
	c.mu.Lock()
	_, seen := c.seen[j.ref.sum]
	c.seen[j.ref.sum] = struct{}{}
	c.mu.Unlock()
	if seen {
		// Stored (or being stored) for an earlier chunk of this snapshot;
		// if that fails, so does the snapshot.
		return nil
	}
	key := j.ref.key()
	if c.opts.Pin != nil {
		if err := c.opts.Pin(ctx, key); err != nil {
			return fmt.Errorf("pin chunk %s: %w", key, err)
		}
	}
	if c.opts.Known != nil && c.opts.Known(key) {
		return nil
	}
	switch in, err := c.store.Stat(ctx, key); {
	case err == nil:
		if c.opts.Stored != nil {
			c.opts.Stored(key, in.Size)
		}
		return nil
	case !errors.Is(err, blob.ErrNotFound):
		return fmt.Errorf("look up chunk %s: %w", key, err)
	}
	var enc *zstd.Encoder
	select {
	case enc = <-c.encoders:
	case <-ctx.Done():
		return ctx.Err()
	}
	out := enc.EncodeAll(j.data, make([]byte, 0, len(j.data)+len(j.data)/64+64))
	c.encoders <- enc
	created, err := c.store.Put(ctx, key, bytes.NewReader(out), int64(len(out)))
	if err != nil {
		return fmt.Errorf("store chunk %s: %w", key, err)
	}
	if c.opts.Stored != nil {
		c.opts.Stored(key, int64(len(out)))
	}
	if created {
		c.mu.Lock()
		c.stored += int64(len(out))
		c.created++
		c.mu.Unlock()
	}
	return nil
}

// writeManifest writes each entry once its chunks are stored, in order,
// then the end record: the manifest is complete only when every chunk it
// names was stored.
func (c *creator) writeManifest(ctx context.Context, ordered <-chan *item, w io.Writer) error {
	enc, err := newEncoder(w)
	if err != nil {
		return err
	}
	for {
		var it *item
		select {
		case it = <-ordered:
		case <-ctx.Done():
			return ctx.Err()
		}
		if it == nil {
			break // every entry was cut and written
		}
		select {
		case <-it.done:
		case <-ctx.Done():
			return ctx.Err()
		}
		if it.en.kind == kindFile {
			for _, x := range it.ext {
				it.en.extents = append(it.en.extents, extent{chunk: *x.ref, off: x.off, len: x.len})
			}
			c.mu.Lock()
			c.res.SizeBytes += it.en.size
			c.mu.Unlock()
		}
		if err := enc.add(&it.en); err != nil {
			return fmt.Errorf("write manifest: %w", err)
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := enc.close(); err != nil {
		return fmt.Errorf("write manifest: %w", err)
	}
	return nil
}
