package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/kilnhq/kiln/internal/blob"
	"github.com/kilnhq/kiln/internal/snapshot/manifest"
)

// parentWindow is how recent a change may be, relative to the parent
// snapshot's start, for a file not to be trusted unread: a file written in
// the same tick of the file system's clock as the parent read it can
// change again without its mtime or ctime moving (Linux stamps files with
// a coarse clock, a few ms; FAT and some network file systems with 1-2 s).
const parentWindow = 2 * time.Second

// ErrParentVersion: a parent manifest of version 1 records no ctime or
// inode, so no file can be compared with it.
var ErrParentVersion = errors.New("the parent manifest is version 1 (no file stat recorded)")

// ErrParentSpace: the parent's chunks are named in another chunk space
// (a snapshot of the shared space before per-team spaces, say): none of
// them is this snapshot's to reference.
var ErrParentSpace = errors.New("the parent manifest's chunks are in another chunk space")

// parent is the earlier snapshot Create compares files with: the chunks
// of its manifest found in the store (pinned first), and a cursor that
// reads its entries in step with the walk.
type parent struct {
	present map[[32]byte]struct{} // its chunks pinned and found in the store: read-only once loaded
	start   int64                 // when it began, Unix ns

	rc   io.ReadCloser
	d    *manifest.Decoder
	v    *manifest.Validator
	cur  manifest.Entry
	ok   bool // cur holds the next entry not yet passed
	done bool
}

// loadParent reads the parent manifest through once (checked as a
// restore checks it), then pins and looks up each of its chunks, and
// opens the manifest again for the walk. errParent wraps a parent that
// cannot be used (Create goes on without one); any other error (a pin or
// a look-up failing) fails the Create, as it would for a chunk cut.
func (c *creator) loadParent(ctx context.Context, key string) (*parent, error) {
	sums := map[[32]byte]struct{}{}
	info, err := Scan(ctx, c.store, key, func(en *manifest.Entry) error {
		for _, x := range en.Extents {
			sums[x.Chunk.Sum] = struct{}{}
		}
		return nil
	})
	if err != nil {
		return nil, &parentError{err}
	}
	if info.Version < 2 {
		return nil, &parentError{ErrParentVersion}
	}
	if info.Space != c.opts.Space {
		return nil, &parentError{ErrParentSpace}
	}
	p := &parent{present: make(map[[32]byte]struct{}, len(sums)), start: info.Start}
	var mu sync.Mutex
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(c.opts.Transfers)
	for sum := range sums {
		g.Go(func() error {
			ok, err := c.lookUp(gctx, sum)
			if ok {
				mu.Lock()
				p.present[sum] = struct{}{}
				mu.Unlock()
			}
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	rc, err := c.store.Get(ctx, key)
	if err != nil {
		return nil, &parentError{err}
	}
	d, err := manifest.NewDecoder(rc)
	if err != nil {
		rc.Close()
		return nil, &parentError{err}
	}
	p.rc, p.d, p.v = rc, d, manifest.NewValidator()
	p.advance()
	return p, nil
}

// lookUp pins a chunk of the parent and tells whether it is in the store:
// once pinned and found, it stays there until the snapshot's references
// go (internal/snapshot's ledger), so a file may point to it unread.
func (c *creator) lookUp(ctx context.Context, sum [32]byte) (bool, error) {
	key := manifest.ChunkKey(c.opts.Space, sum)
	if c.opts.Pin != nil {
		if err := c.opts.Pin(ctx, key); err != nil {
			return false, fmt.Errorf("pin chunk %s: %w", key, err)
		}
	}
	if c.opts.Known != nil && c.opts.Known(key) {
		return true, nil
	}
	switch in, err := c.store.Stat(ctx, key); {
	case err == nil:
		if c.opts.Stored != nil {
			c.opts.Stored(key, in.Size)
		}
		return true, nil
	case errors.Is(err, blob.ErrNotFound):
		// Collected since the parent was taken: the files that need it
		// are read, and the chunk stored again if they still hold it.
		return false, nil
	default:
		return false, fmt.Errorf("look up chunk %s: %w", key, err)
	}
}

// parentError is a parent that cannot be used.
type parentError struct{ err error }

func (e *parentError) Error() string { return "parent manifest: " + e.err.Error() }
func (e *parentError) Unwrap() error { return e.err }

// advance reads the next entry; at the end, or on any error (the manifest
// changed or the store failed since loadParent read it), the cursor stops
// and the remaining files are read.
func (p *parent) advance() {
	if p.done {
		p.ok = false
		return
	}
	err := p.d.Next(&p.cur)
	if err == nil {
		err = p.v.Check(&p.cur)
	}
	if err != nil {
		p.close()
		return
	}
	p.ok = true
}

// match returns the parent's extents for the file en at rel (its stat
// filled in) when the parent holds the same file unchanged and all its
// chunks are present; nil otherwise. Calls come in walk order.
func (p *parent) match(rel string, en *manifest.Entry) []manifest.Extent {
	for p.ok && walkCmp(p.cur.Path, rel) < 0 {
		p.advance()
	}
	pe := &p.cur
	switch {
	case !p.ok || pe.Path != rel || pe.Kind != manifest.KindFile || !pe.Stat:
		return nil
	case pe.Size != en.Size || pe.Mtime != en.Mtime || pe.Ctime != en.Ctime || pe.Ino != en.Ino:
		return nil
	case max(pe.Mtime, pe.Ctime) >= p.start-parentWindow.Nanoseconds():
		return nil // changed too close to the parent's reading of it
	}
	for _, x := range pe.Extents {
		if _, ok := p.present[x.Chunk.Sum]; !ok {
			return nil
		}
	}
	return slices.Clone(pe.Extents)
}

func (p *parent) close() {
	if !p.done {
		p.done, p.ok = true, false
		p.d.Close()
		p.rc.Close()
	}
}

// walkCmp compares two root-relative paths in the walk's order (and so a
// manifest's): parents first, then names in byte order, which is the
// byte order of the paths with "/" sorting before every other byte.
func walkCmp(a, b string) int {
	n := min(len(a), len(b))
	for i := range n {
		ca, cb := a[i], b[i]
		switch {
		case ca == cb:
			continue
		case ca == '/':
			return -1
		case cb == '/':
			return 1
		case ca < cb:
			return -1
		default:
			return 1
		}
	}
	switch {
	case len(a) < len(b):
		return -1
	case len(a) > len(b):
		return 1
	}
	return 0
}
