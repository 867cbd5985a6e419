package engine

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"io/fs"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"golang.org/x/sync/errgroup"
	"golang.org/x/sync/semaphore"

	"github.com/kilnhq/kiln/internal/blob"
	"github.com/kilnhq/kiln/internal/files"
	"github.com/kilnhq/kiln/internal/panics"
	"github.com/kilnhq/kiln/internal/snapshot/manifest"
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
	// Parent, when set, is the manifest key of an earlier snapshot of the
	// same tree (internal/snapshot passes the server's last ready one). A
	// regular file whose size, mtime, ctime and inode number equal its
	// entry there, and that did not change within parentWindow of that
	// snapshot's start, keeps that entry's extents without being read.
	// Every chunk of the parent is pinned (Pin) and looked up (Known,
	// Stat) before the walk, as a chunk cut is; a file whose chunks are
	// not all found is read. A parent that cannot be read (gone, corrupt,
	// version 1) is not used, and Result.ParentErr says why.
	Parent string
	// Now is the clock whose reading is recorded as the snapshot's start
	// (what a later snapshot compares changes with); nil is time.Now.
	Now func() time.Time
	// Compression is how hard chunks and packs are compressed; "" is
	// CompressionFastest. An unknown level is an error.
	Compression Compression
	// Space is the chunk space the snapshot's chunks are named and
	// stored in (manifest.ChunkKey): a chunk is shared by the snapshots of one
	// space only. "" is the shared space; a name must pass manifest.ValidSpace.
	// A Parent of another space is not used (its chunks are not this
	// space's): every file is read.
	Space string
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

	// ReusedFiles are the files whose extents came from the parent
	// unread, ReusedBytes their content.
	ReusedFiles int
	ReusedBytes int64
	// ParentErr is why CreateOptions.Parent was not used; nil when it
	// was, or when none was given.
	ParentErr error
}

// Skipped counts the entries a snapshot leaves out (besides the ignored
// ones).
type Skipped struct {
	// HardLinks are regular files with more than one link: one of them may
	// be a file outside the root (files.ErrHardLink), so Kiln never reads
	// them.
	HardLinks int
	// Links are symlinks whose target leads outside the root, or could
	// (manifest.LinkAllowed): a restore would refuse them.
	Links int
	// Special are devices, FIFOs and sockets.
	Special int
}

// Pipeline bounds (see doc.go): these, not the tree, bound Create's memory.
const (
	walkQueue        = 16              // entries walked ahead of the chunker (each may hold an open file)
	orderQueue       = 2 * packMaxHeld // entries cut, waiting for their chunks to be stored: two packs' worth, so the cutter goes on while a pack is stored
	defaultTransfers = 16              // chunks looked up or uploaded at once
	maxFileCutters   = 4               // large files read and cut at once (at most; Workers otherwise)
	spareSlabs       = 3               // slabs beyond one per cursor (fileCutters + the cutter's 2)
	inFlightBytes    = 32 << 20        // room for compressed chunks not stored yet
	outPoolLimit     = 8 << 20         // free buffers for compressed chunks kept (outPool)
)

// fileCutters is how many large files Create cuts at once with workers
// encoders: one per core, at most maxFileCutters.
func fileCutters(workers int) int { return max(1, min(workers, maxFileCutters)) }

// slabCount is how many slabs Create uses with n file cutters: one per
// cursor that may wait for a slab while it holds one (each file cutter's,
// the cutter's pack and its own for a small file that grew), and spares,
// so that a slab held by chunks in flight only is always there to be
// freed (a cursor waits while it holds its slab: with fewer, all could
// wait on each other).
func slabCount(n int) int { return n + 2 + spareSlabs }

// item is one entry on its way through Create: the walker makes it, the
// chunker cuts its content into jobs, the workers fill its chunks in, and
// the manifest writer waits for it (done) and writes it.
type item struct {
	en     manifest.Entry
	reused bool   // a file whose extents (en.Extents) came from the parent
	f      *rfile // a regular file to cut (&file); nil for others
	file   rfile
	ext    []pendingExtent
	left   atomic.Int32
	done   chan struct{}
}

// pendingExtent is an extent whose chunk a worker names (ref.Sum) later.
type pendingExtent struct {
	ref      *manifest.ChunkRef
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
	ref   *manifest.ChunkRef
	slab  *slab  // what data is a slice of, held until the chunk is stored
	data  []byte // its bytes
	pack  bool   // a pack of small files, not a large file's chunk
}

// creator is one Create in progress.
type creator struct {
	root  *files.Root
	store Store
	opts  CreateOptions

	batch    blob.Batch          // the chunks' Puts, committed before the manifest's
	slabs    *slabPool           // what bounds the chunk bytes in memory
	budget   *semaphore.Weighted // inFlightBytes: what bounds the compressed ones
	encoders chan chunkEncoder   // Workers of them for chunks: what bounds its CPU
	packEnc  chan chunkEncoder   // Workers of them for packs
	outs     *outPool            // buffers for compressed chunks, reused

	parent *parent // nil: every file is read
	start  int64   // Unix ns, recorded in the manifest

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
	level, err := ParseCompression(string(opts.Compression))
	if err != nil {
		return Result{}, err
	}
	opts.Compression = level
	if err := manifest.ValidSpace(opts.Space); err != nil {
		return Result{}, err
	}
	if opts.Workers <= 0 {
		opts.Workers = runtime.NumCPU()
	}
	if opts.Transfers <= 0 {
		opts.Transfers = defaultTransfers
	}
	key := manifest.Key(opts.ID)
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
		slabs: newSlabPool(slabCount(fileCutters(opts.Workers))), budget: semaphore.NewWeighted(inFlightBytes), encoders: make(chan chunkEncoder, opts.Workers), packEnc: make(chan chunkEncoder, opts.Workers),
		outs: &outPool{limit: outPoolLimit}}
	// Chunk and pack encoders alike, one of each per worker: a world's
	// thousands of small files come first in its walk, and one pack
	// encoder made that phase serial.
	defer c.slabs.close() // after run: its goroutines have all returned
	for i := range 2 * opts.Workers {
		pack := i >= opts.Workers
		enc, err := newChunkEncoder(opts.Compression, pack)
		if err != nil {
			return Result{}, err
		}
		if pack {
			c.packEnc <- enc
		} else {
			c.encoders <- enc
		}
	}
	now := opts.Now
	if now == nil {
		now = time.Now
	}
	c.start = now().UnixNano()
	if opts.Parent != "" {
		p, err := c.loadParent(ctx, opts.Parent)
		var perr *parentError
		switch {
		case errors.As(err, &perr) && ctx.Err() == nil:
			c.res.ParentErr = err
		case err != nil:
			return Result{}, fmt.Errorf("snapshot %s: %w", opts.ID, err)
		default:
			c.parent = p
			defer p.close()
		}
	}
	c.batch = blob.NewBatch(store)
	defer c.batch.Close()
	c.res.ID, c.res.ManifestKey = opts.ID, key
	if err := c.run(ctx, total); err != nil {
		return Result{}, fmt.Errorf("snapshot %s: %w", opts.ID, err)
	}
	c.res.Chunks = make([]string, 0, len(c.seen))
	for sum := range c.seen {
		c.res.Chunks = append(c.res.Chunks, manifest.ChunkKey(c.opts.Space, sum))
	}
	slices.Sort(c.res.Chunks)
	c.res.StoredBytes += c.stored
	c.res.NewChunks = c.created
	return c.res, nil
}

// run is the pipeline: walk → cut → (workers) → write the manifest, with
// the manifest streamed to the store as it is written.
func (c *creator) run(ctx context.Context, total int64) error {
	g, ctx := errgroup.WithContext(ctx)
	walked := make(chan *item, walkQueue)
	ordered := make(chan *item, orderQueue)
	jobs := make(chan job, c.opts.Transfers)
	nc := fileCutters(c.opts.Workers)
	large := make(chan *item, nc)
	k := &cutter{c: c, jobs: jobs, ordered: ordered, large: large, total: total}
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
	// The cutter and the file cutters send jobs: the last of them to end
	// closes it (the workers end either way).
	var producers sync.WaitGroup
	producers.Add(1 + nc)
	go func() {
		producers.Wait()
		close(jobs)
	}()
	g.Go(func() error {
		defer producers.Done()
		err := panics.Catch(func() error { return k.cut(ctx, walked) })
		if err == nil {
			close(ordered)
		}
		close(large) // the file cutters end either way
		return err
	})
	for range nc {
		g.Go(func() error {
			defer producers.Done()
			return panics.Catch(func() error { return k.cutLarge(ctx, large) })
		})
	}
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
	for it := range large { // closed by the cutter, which has returned
		it.f.Close()
	}
	if err != nil {
		return err
	}
	c.res.StoredBytes += manifestSize
	if c.opts.Progress != nil {
		// The last call, once every cutter has counted what it cut (the
		// file cutters may end after the cutter).
		c.opts.Progress(k.done, k.done)
	}
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
	err := root.Walk(ctx, ".", func(rel string, e files.Entry, _ files.Opener) error {
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
	// WalkTypes: a regular file's mode, size and times come from the
	// descriptor's own stat (OpenFD), not from a statx of its name.
	err := c.root.WalkTypes(ctx, ".", func(rel string, e files.Entry, open files.Opener) error {
		if rel == "." {
			return nil
		}
		if c.opts.Ignore != nil && c.opts.Ignore(rel, e.IsDir()) {
			if e.IsDir() {
				return files.ErrSkipDir
			}
			return nil
		}
		it := &item{en: manifest.Entry{Path: rel, Mode: e.Mode.Perm(), Mtime: e.ModTime.UnixNano()}}
		switch {
		case e.IsDir():
			it.en.Kind = manifest.KindDir
			c.res.Dirs++
		case e.IsSymlink():
			target, err := c.root.Readlink(rel)
			if errors.Is(err, files.ErrNotFound) {
				return nil // gone meanwhile
			}
			if err != nil {
				return err
			}
			if !manifest.LinkAllowed(rel, target) || !c.root.LinkInside(rel, target) {
				c.res.Skipped.Links++
				return nil
			}
			it.en.Kind, it.en.Target, it.en.Mode = manifest.KindLink, target, 0
			c.res.Symlinks++
		case e.IsFile():
			fd, st, err := open.OpenFD()
			if errors.Is(err, files.ErrNotFound) || errors.Is(err, files.ErrNotFile) {
				return nil // gone or replaced meanwhile
			}
			if err != nil {
				return err
			}
			it.file.fd = fd
			if st.Nlink > 1 {
				// Other hard links: left out, not read.
				it.file.Close()
				c.res.Skipped.HardLinks++
				return nil
			}
			// The open file's own stat: what is read, and what a later
			// snapshot compares.
			it.en.Kind, it.f, it.en.Size = manifest.KindFile, &it.file, st.Size
			it.en.Mode = fs.FileMode(st.Mode).Perm()
			it.en.Mtime, it.en.Stat = st.Mtim.Nano(), true
			it.en.Ctime, it.en.Ino = st.Ctim.Nano(), st.Ino
			c.res.Files++
			if c.parent != nil {
				if ext := c.parent.match(rel, &it.en); ext != nil {
					it.file.Close()
					it.f, it.reused, it.en.Extents = nil, true, ext
					c.mu.Lock()
					for _, x := range ext {
						c.seen[x.Chunk.Sum] = struct{}{}
					}
					c.res.ReusedFiles++
					c.res.ReusedBytes += it.en.Size
					c.mu.Unlock()
				}
			}
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

// Packs (doc.go): a file of at most packFileMax bytes would be one chunk
// of its own (FastCDC never cuts before minChunk); it is put in a pack
// with its neighbours instead, so that a world's thousands of small
// files make a few hundred chunks, not thousands of store requests.
const (
	packFileMax  = MinChunk
	PackMaxFiles = 1024 // files in one pack
	packMaxHeld  = 4096 // entries held back while a pack is open
)

// packEnds tells whether the pack ends after a small file: the file's
// path decides, with a chance of size/avgChunk (about avgChunk bytes a
// pack), so the decision is the file's own. A file that changes changes
// its pack, and the next at most; the others stay the same chunks.
func packEnds(rel string, size int64) bool {
	h := fnv.New64a()
	h.Write([]byte(rel))
	return int64(h.Sum64()%AvgChunk) < size
}

// cutter is the cutting stage of Create. It reads files into slabs and
// cuts them there: a large file's chunks, and the packs of small files,
// are slices of a slab handed to the transfers without a copy. The
// cutter itself (cut: one goroutine) takes the walked entries in order,
// packs the small files and passes every entry on; large files go to
// the file cutters (cutLarge: fileCutters goroutines, each with its own
// cursor), so that reading and cutting, which one goroutine did for
// every byte, keep more than one core busy.
type cutter struct {
	c       *creator
	jobs    chan<- job
	ordered chan<- *item
	large   chan<- *item // files for the file cutters
	total   int64

	mu   sync.Mutex // progress: the file cutters and the cutter count
	done int64

	file   cursor  // where the cutter cuts a small file that grew
	pack   cursor  // the open pack: [start, w) of its slab
	packed []*item // the files in it
	held   []*item // entries from the pack's first file on, in walk order
}

// cut reads each small file into the packs, hands each large one to the
// file cutters, and passes every entry on, in order, to the manifest
// writer; an entry behind an open pack waits for the pack to be handed
// over. An entry's done closes once its file is cut (by whichever
// goroutine cut it) and its chunks are stored.
func (k *cutter) cut(ctx context.Context, in <-chan *item) error {
	defer k.file.close()
	defer k.pack.close()
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
		switch {
		case it.f != nil && it.en.Size > packFileMax:
			if len(k.packed) == 0 {
				// No pack is open: its slab goes back while large files
				// are cut.
				k.pack.close()
			}
			// The file cutter drops the hold.
			select {
			case k.large <- it:
			case <-ctx.Done():
				it.f.Close()
				return ctx.Err()
			}
		case it.f != nil:
			err := k.readFile(ctx, it)
			it.f.Close()
			it.f = nil
			if err != nil {
				return err
			}
			it.finish()
		case it.reused:
			k.progress(it.en.Size)
			it.finish()
		default:
			it.finish()
		}
		if err := k.pass(ctx, it); err != nil {
			return err
		}
	}
	return k.flush(ctx)
}

// cutLarge cuts the large files the cutter hands over, each into chunks
// of its own, until in is closed. The file is closed and the cutter's
// hold dropped whatever happens; one that fails fails the snapshot.
func (k *cutter) cutLarge(ctx context.Context, in <-chan *item) error {
	var cur cursor
	defer cur.close()
	for it := range in {
		it.en.Size = 0 // what is read, whatever the walk saw
		err := k.cutFile(ctx, &cur, it, nil)
		it.f.Close()
		it.f = nil
		if err != nil {
			return err
		}
		it.finish()
	}
	return nil
}

// progress counts n more bytes read and cut, and tells the caller's
// Progress (one call at a time).
func (k *cutter) progress(n int64) {
	k.mu.Lock()
	defer k.mu.Unlock()
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

// readFile reads a small regular file (as walked) into the open pack; one
// that grew past a small file's size is cut into chunks of its own.
func (k *cutter) readFile(ctx context.Context, it *item) error {
	walked := it.en.Size
	it.en.Size = 0 // what is read, whatever the walk saw
	// Read it whole at the end of the open pack, one byte more than a
	// small file holds to see one that grew.
	if err := k.pack.room(ctx, k.c.slabs, packFileMax+1); err != nil {
		return err
	}
	buf := k.pack.s.buf[k.pack.w : k.pack.w+packFileMax+1]
	// One read where it can be: a local file system answers short only
	// at a file's end, so a read of at least the size the walk saw is
	// the whole file (one still growing is read as it was a moment
	// earlier), without the second read io.ReadFull makes to see EOF,
	// for each of a world's thousands of small files. Less than that: the
	// file shrank, or its file system answers short reads (FUSE, NFS):
	// read on to the end.
	n, err := it.f.Read(buf)
	if err == nil && int64(n) < walked {
		var m int
		m, err = io.ReadFull(it.f, buf[n:])
		n += m
		if errors.Is(err, io.ErrUnexpectedEOF) {
			err = io.EOF
		}
	}
	switch {
	case err != nil && !errors.Is(err, io.EOF):
		return fmt.Errorf("read %s: %w", files.Display(it.en.Path), err)
	case n == len(buf):
		// Larger than the walk saw: cut it alone, from what was read on.
		err := k.cutFile(ctx, &k.file, it, buf)
		k.file.close() // rare: its slab is not kept
		return err
	}
	if n == 0 {
		return nil
	}
	if k.pack.w-k.pack.start+n > MaxChunk {
		// The pack would outgrow a chunk: it ends before this file, which
		// starts the next one where it was read.
		if err := k.sendPack(ctx, k.pack.w); err != nil {
			return err
		}
		if err := k.release(ctx); err != nil {
			return err
		}
	}
	it.ext = append(it.ext, pendingExtent{off: int64(k.pack.w - k.pack.start), len: int64(n)})
	it.en.Size = int64(n)
	it.left.Add(1) // the pack's hold
	k.pack.w += n
	k.packed = append(k.packed, it)
	k.progress(int64(n))
	if packEnds(it.en.Path, int64(n)) || len(k.packed) >= PackMaxFiles {
		// The pack ends with this file: handed over with the entries
		// held before it; the file itself follows them (pass).
		return k.flush(ctx)
	}
	return nil
}

// flush hands the open pack over, then the entries held behind it.
func (k *cutter) flush(ctx context.Context) error {
	if len(k.packed) > 0 {
		if err := k.sendPack(ctx, k.pack.w); err != nil {
			return err
		}
	}
	return k.release(ctx)
}

// sendPack hands the open pack's files over as one chunk, the pack's
// bytes up to end, and starts the next pack there.
func (k *cutter) sendPack(ctx context.Context, end int) error {
	data := k.pack.s.buf[k.pack.start:end]
	if err := k.send(ctx, k.packed, k.pack.s, data, true); err != nil {
		return err
	}
	k.packed = k.packed[:0]
	k.pack.start = end
	return nil
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

// send hands one chunk to the transfers: data, a slice of s (which it
// holds until stored), and which items' extents point to it (their ref
// is set here).
func (k *cutter) send(ctx context.Context, items []*item, s *slab, data []byte, pack bool) error {
	ref := &manifest.ChunkRef{Len: int64(len(data))}
	for _, it := range items {
		it.ext[len(it.ext)-1].ref = ref
	}
	s.hold()
	select {
	case k.jobs <- job{items: slices.Clone(items), ref: ref, slab: s, data: data, pack: pack}:
		return nil
	case <-ctx.Done():
		s.release()
		return ctx.Err()
	}
}

// cutFile cuts one file into chunks of its own in cur: pre (what was
// read of it already), then the rest of it.f. The cutter and the file
// cutters call it, each with its own cursor.
func (k *cutter) cutFile(ctx context.Context, cur *cursor, it *item, pre []byte) error {
	if err := cur.room(ctx, k.c.slabs, MaxChunk); err != nil {
		return err
	}
	cur.w += copy(cur.s.buf[cur.w:], pre)
	cut := cutPoint
	if isRegionFile(it.en.Path) {
		cut = sectorCut
	}
	eof := false
	for {
		for !eof && cur.w-cur.start < MaxChunk {
			// A slab ends in less than a chunk: what is pending moves.
			if err := cur.room(ctx, k.c.slabs, MaxChunk-(cur.w-cur.start)); err != nil {
				return err
			}
			n, err := it.f.Read(cur.s.buf[cur.w:])
			cur.w += n
			switch {
			case errors.Is(err, io.EOF):
				eof = true
			case err != nil:
				return fmt.Errorf("read %s: %w", files.Display(it.en.Path), err)
			}
		}
		for cur.w-cur.start >= MaxChunk || (eof && cur.w > cur.start) {
			n := cut(cur.s.buf[cur.start:cur.w])
			data := cur.s.buf[cur.start : cur.start+n]
			it.ext = append(it.ext, pendingExtent{len: int64(n)})
			it.en.Size += int64(n)
			it.left.Add(1)
			if err := k.send(ctx, []*item{it}, cur.s, data, false); err != nil {
				return err
			}
			cur.start += n
			k.progress(int64(n))
		}
		if eof {
			return nil
		}
	}
}

// work hashes, compresses and stores chunks until jobs is closed.
func (c *creator) work(ctx context.Context, jobs <-chan job) error {
	for j := range jobs {
		err := c.store1(ctx, &j)
		j.free()
		if err != nil {
			return err
		}
		for _, it := range j.items {
			it.finish()
		}
	}
	return nil
}

// free drops the job's hold on its slab, once: as soon as its bytes are
// compressed (store1), not after the upload, so that the cutters read on
// into the slab while the compressed chunk is written.
func (j *job) free() {
	if j.slab != nil {
		j.slab.release()
		j.slab, j.data = nil, nil
	}
}

// store1 names one chunk and stores it unless it is known, already
// referenced by this snapshot, or in the store. It frees the job's slab
// once it needs its bytes no more.
func (c *creator) store1(ctx context.Context, j *job) error {
	j.ref.Sum = sha256.Sum256(j.data)
	c.mu.Lock()
	_, seen := c.seen[j.ref.Sum]
	c.seen[j.ref.Sum] = struct{}{}
	c.mu.Unlock()
	if seen {
		// Stored (or being stored) for an earlier chunk of this snapshot;
		// if that fails, so does the snapshot.
		return nil
	}
	if c.parent != nil {
		if _, ok := c.parent.present[j.ref.Sum]; ok {
			return nil // pinned and found by loadParent
		}
	}
	key := manifest.ChunkKey(c.opts.Space, j.ref.Sum)
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
	// Room for the compressed form (zstd's bound for a frame of raw
	// blocks): a buffer from the pool, within the budget.
	bound := int64(len(j.data) + len(j.data)>>7 + 64)
	if err := c.budget.Acquire(ctx, bound); err != nil {
		return err
	}
	defer c.budget.Release(bound)
	buf := c.outs.get(int(bound))
	encoders := c.encoders
	if j.pack {
		encoders = c.packEnc
	}
	var enc chunkEncoder
	select {
	case enc = <-encoders:
	case <-ctx.Done():
		return ctx.Err()
	}
	out := enc.encode(j.data, buf[:0], !j.pack && isRegionFile(j.items[0].en.Path))
	encoders <- enc
	j.free()
	// Zeros up to the next 4 KiB in the buffer (outPool's capacities are
	// multiples of 256 KiB): the file store writes the chunk in one
	// direct write, padding and all (blob's zeroTail).
	clear(out[len(out):min(cap(out), (len(out)+4095)&^4095)])
	defer func() { c.outs.put(out) }()
	// With its CRC-32C, taken as it leaves the encoder: the store refuses
	// bytes that change between here and the disk or the S3 server
	// (blob.Checked, blob.ErrChecksum).
	created, err := c.batch.Put(ctx, key, blob.Checked(bytes.NewReader(out), blob.CRC32C(out)), int64(len(out)))
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
	enc, err := manifest.NewEncoder(w, manifest.Header{Chunker: chunkerHeader(), Start: c.start, Space: c.opts.Space})
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
		if it.en.Kind == manifest.KindFile {
			for _, x := range it.ext { // none for a reused file
				it.en.Extents = append(it.en.Extents, manifest.Extent{Chunk: *x.ref, Off: x.off, Len: x.len})
			}
			c.mu.Lock()
			c.res.SizeBytes += it.en.Size
			c.mu.Unlock()
		}
		if err := enc.Add(&it.en); err != nil {
			return fmt.Errorf("write manifest: %w", err)
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := enc.Close(); err != nil {
		return fmt.Errorf("write manifest: %w", err)
	}
	// Every chunk was put (each entry waited for its own): make them
	// durable before the manifest's stream ends, which is what lets its
	// Put complete.
	if err := c.batch.Commit(ctx); err != nil {
		return fmt.Errorf("store chunks: %w", err)
	}
	return nil
}
