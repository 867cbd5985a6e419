package engine

import "sync"

// outPool keeps the buffers compressed chunks are written into for the
// next chunks: without it, each chunk's buffer (about a megabyte) was
// garbage, 500 MB of it for a 1 GiB world, and the collector's heap goal
// grew with it (the peak RSS). Capacities are multiples of 256 KiB, so a
// buffer fits most chunks of its size; it keeps at most limit bytes of
// free buffers (what is in use is bounded by Create's budget).
type outPool struct {
	limit int

	mu   sync.Mutex
	free [][]byte
	held int // capacity of free
}

const outPoolStep = 256 << 10

// get returns an empty buffer of capacity at least n: the smallest free
// one that fits, or a new one.
func (p *outPool) get(n int) []byte {
	p.mu.Lock()
	best := -1
	for i, b := range p.free {
		if cap(b) >= n && (best < 0 || cap(b) < cap(p.free[best])) {
			best = i
		}
	}
	if best >= 0 {
		b := p.free[best]
		p.free[best] = p.free[len(p.free)-1]
		p.free = p.free[:len(p.free)-1]
		p.held -= cap(b)
		p.mu.Unlock()
		return b[:0]
	}
	p.mu.Unlock()
	return make([]byte, 0, (n+outPoolStep-1)/outPoolStep*outPoolStep)
}

// put gives b back, kept while the free buffers stay within the limit.
func (p *outPool) put(b []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.held+cap(b) > p.limit {
		return
	}
	p.free = append(p.free, b[:0])
	p.held += cap(b)
}
