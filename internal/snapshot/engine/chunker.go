package engine

import (
	"context"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/PlakarKorp/go-cdc-chunkers/chunkers/fastcdc"
	"golang.org/x/sys/unix"

	"github.com/kilnhq/kiln/internal/snapshot/manifest"
)

// Chunk sizes (see doc.go): FastCDC cuts after MinChunk bytes at the
// earliest, aims at AvgChunk, and cuts at MaxChunk at the latest.
const (
	MinChunk = 256 << 10
	AvgChunk = 1 << 20
	MaxChunk = manifest.MaxChunk
	// chunkAlgorithm is the go-cdc-chunkers name of the cutter. Its gear
	// table is the library's fixed one (no key), so the same bytes are cut
	// at the same places in every snapshot and on every node: that is
	// what makes chunks of an unchanged region file dedupe.
	chunkAlgorithm = "fastcdc-v1.0.0"
	// normalLevel is the library's FastCDC normalisation level for
	// chunkAlgorithm (the masks' bits around avgChunk's).
	normalLevel = 2
)

// The masks cutPoint tests the fingerprint with: more bits before
// avgChunk (a cut is less likely), fewer after, as the library computes
// them (calculateMasks).
var maskS, maskL = fastcdcMasks(AvgChunk, normalLevel)

func fastcdcMasks(normalSize, level int) (uint64, uint64) {
	bits := int(math.Log2(float64(normalSize)))
	return spacedMask(bits+level, 64), spacedMask(bits-level, 64)
}

func spacedMask(ones, total int) uint64 {
	if ones >= total {
		return math.MaxUint64
	}
	if ones <= 0 {
		return 0
	}
	step := total / ones
	var mask uint64
	for i := range ones {
		if pos := total - 1 - i*step; pos >= 0 {
			mask |= 1 << pos
		}
	}
	return mask
}

// cutPoint returns the length of the chunk that starts data, which holds
// what is left of the stream or at least maxChunk bytes of it: the cut of
// go-cdc-chunkers' "fastcdc-v1.0.0" (FastCDC.Algorithm with our sizes),
// restated so that the engine cuts in its own buffers instead of copying
// every chunk out of the library's (TestCutPointMatchesLibrary holds the
// two to the same cuts).
func cutPoint(data []byte) int {
	n := len(data)
	normal := AvgChunk
	switch {
	case n <= MinChunk:
		return n
	case n >= MaxChunk:
		n = MaxChunk
	case n <= normal:
		normal = n
	}
	data = data[:n]
	if i := firstCut(data, MinChunk, normal, maskS); i < normal {
		return i
	}
	return firstCut(data, normal, n, maskL)
}

// firstCut returns the first i in [lo, hi) whose fingerprint has none of
// mask's bits set, or hi. The fingerprint at i is the library's: fp =
// fp<<1 + G[data[i]] from minChunk on. The shift leaves in it only the
// last 64 bytes (older ones are shifted out), so the fingerprint at any
// position can be computed afresh from the 64 bytes before it (warm):
// firstCut runs two independent chains at once, over the two halves of
// the range. One chain's every step waits for the one before (a shift
// and an add a byte); two interleaved keep the core's other units busy,
// and cut 1.6× as fast (BenchmarkChunker) at the same places
// (TestFirstCutTwoChains).
func firstCut(data []byte, lo, hi int, mask uint64) int {
	g := &fastcdc.G
	if hi-lo < 512 {
		fp := warm(data, lo)
		for i := lo; i < hi; i++ {
			fp = fp<<1 + g[data[i]]
			if fp&mask == 0 {
				return i
			}
		}
		return hi
	}
	mid := lo + (hi-lo)/2
	a, b := data[lo:mid], data[mid:hi] // len(b) is len(a) or one more
	fa, fb := warm(data, lo), warm(data, mid)
	j := 0
	for ; j < len(a) && j < len(b); j++ {
		fa = fa<<1 + g[a[j]]
		fb = fb<<1 + g[b[j]]
		if fa&mask == 0 {
			return lo + j
		}
		if fb&mask == 0 {
			// A cut in the second half: one in the first still comes
			// before it.
			cut := mid + j
			for j++; j < len(a); j++ {
				fa = fa<<1 + g[a[j]]
				if fa&mask == 0 {
					return lo + j
				}
			}
			return cut
		}
	}
	for ; j < len(b); j++ {
		fb = fb<<1 + g[b[j]]
		if fb&mask == 0 {
			return mid + j
		}
	}
	return hi
}

// warm returns the fingerprint at p-1: that of the 64 bytes before p
// (fewer when p is within 64 bytes of minChunk, where it starts).
func warm(data []byte, p int) uint64 {
	g := &fastcdc.G
	var fp uint64
	for i := max(MinChunk, p-64); i < p; i++ {
		fp = fp<<1 + g[data[i]]
	}
	return fp
}

// slabSize is the size of the buffers files are read and cut in; a
// chunk is a slice of one. The bytes a slab ends with that do not make a
// whole chunk yet are copied to the next slab: on average about half a
// maxChunk, so a quarter of what is read (against all of it when chunks
// were copied out of the library's buffer).
const slabSize = 8 << 20

// slab is a buffer that chunks are cut in and handed to the transfers
// without a copy: each holder (the cutter while it fills it, each chunk
// in flight) has a reference, and the last one to go returns it to its
// pool.
type slab struct {
	buf  []byte
	refs atomic.Int32
	pool *slabPool
}

func (s *slab) hold() { s.refs.Add(1) }

func (s *slab) release() {
	if s.refs.Add(-1) == 0 {
		s.pool.free <- s
	}
}

// slabPool holds at most cap(free) slabs, made as they are first needed:
// what bounds the chunk bytes a Create holds.
//
// Slabs are mapped memory (mmap), not Go heap: they live as long as the
// Create, and on the heap their 32 MiB counted twice in kiln serve's peak
// RSS (the collector lets the heap grow to twice what is live before it
// runs); mapped, they count once, and go back to the system at close.
type slabPool struct {
	free chan *slab
	made atomic.Int32

	mu     sync.Mutex
	mapped [][]byte // to unmap at close
}

func newSlabPool(n int) *slabPool { return &slabPool{free: make(chan *slab, n)} }

// get returns a slab with one reference, the caller's, waiting for one to
// be released when all were made.
func (p *slabPool) get(ctx context.Context) (*slab, error) {
	select {
	case s := <-p.free:
		s.refs.Store(1)
		return s, nil
	default:
	}
	if n := p.made.Add(1); int(n) <= cap(p.free) {
		s := &slab{buf: p.alloc(), pool: p}
		s.refs.Store(1)
		return s, nil
	}
	select {
	case s := <-p.free:
		s.refs.Store(1)
		return s, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// alloc maps a slab, or makes one on the heap where mapping fails.
func (p *slabPool) alloc() []byte {
	b, err := unix.Mmap(-1, 0, slabSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return make([]byte, slabSize)
	}
	p.mu.Lock()
	p.mapped = append(p.mapped, b)
	p.mu.Unlock()
	return b
}

// close unmaps the slabs. Only once nothing holds one: Create calls it
// after its pipeline's every goroutine returned (a chunk's bytes are a
// slice of a slab, and touching them after this would crash the process).
func (p *slabPool) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, b := range p.mapped {
		_ = unix.Munmap(b)
	}
	p.mapped = nil
}

// cursor is where the cutter writes in its current slab: bytes
// [start, w) are read and not yet handed over (an open pack, or the tail
// of a file not cut yet).
type cursor struct {
	s        *slab
	start, w int
}

// room makes the cursor's slab have at least n free bytes after w,
// moving the pending bytes to a fresh slab if needed.
func (c *cursor) room(ctx context.Context, pool *slabPool, n int) error {
	if c.s != nil && len(c.s.buf)-c.w >= n {
		return nil
	}
	if c.s != nil && c.s.refs.Load() == 1 && slabSize-(c.w-c.start) >= n {
		// No chunk holds the slab any more (only the cutter adds
		// references): move the pending bytes to its start.
		c.w = copy(c.s.buf, c.s.buf[c.start:c.w])
		c.start = 0
		return nil
	}
	s, err := pool.get(ctx)
	if err != nil {
		return err
	}
	w := 0
	if c.s != nil {
		w = copy(s.buf, c.s.buf[c.start:c.w])
		c.s.release()
	}
	c.s, c.start, c.w = s, 0, w
	return nil
}

// close drops the cutter's reference.
func (c *cursor) close() {
	if c.s != nil {
		c.s.release()
		c.s, c.start, c.w = nil, 0, 0
	}
}

// isRegionFile tells whether a file is a Minecraft region file (Anvil
// .mca, McRegion .mcr), which sectorCut cuts instead of cutPoint.
func isRegionFile(rel string) bool {
	return strings.HasSuffix(rel, ".mca") || strings.HasSuffix(rel, ".mcr")
}

// sectorCut returns the length of the chunk that starts data: avgChunk
// bytes, or what is left. A region file is 4 KiB sectors that the game
// rewrites in place (a chunk that outgrows its sectors moves to free
// ones; nothing shifts), so fixed chunks aligned to the file's start are
// cut at the same places in every snapshot without a fingerprint, which
// cost a core ~0.7 s a GB.
func sectorCut(data []byte) int { return min(len(data), AvgChunk) }

// chunkerHeader names the cutter and its sizes (a manifest's
// Header.Chunker).
func chunkerHeader() string {
	return fmt.Sprintf("%s/%d/%d/%d", chunkAlgorithm, MinChunk, AvgChunk, MaxChunk)
}
