package modcatalog

import (
	"container/list"
	"sync"
	"time"
)

// cache keeps normalized answers for a while, bounded in entries and in
// bytes (each entry costs the length of the answer's JSON plus its key;
// the heap holds about 1.4 times that, BenchmarkCacheMemory).
// The least recently used entries go first; expired ones are dropped when
// met. Values are shared between callers: they must not be modified.
type cache struct {
	ttl        time.Duration
	maxEntries int
	maxBytes   int64
	now        func() time.Time

	mu    sync.Mutex
	bytes int64
	lru   *list.List // of *cacheEntry, most recent first
	byKey map[string]*list.Element
}

type cacheEntry struct {
	key     string
	val     any
	cost    int64
	expires time.Time
}

func newCache(ttl time.Duration, maxEntries int, maxBytes int64, now func() time.Time) *cache {
	return &cache{ttl: ttl, maxEntries: maxEntries, maxBytes: maxBytes, now: now, lru: list.New(), byKey: map[string]*list.Element{}}
}

func (c *cache) get(key string) (any, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.byKey[key]
	if !ok {
		return nil, false
	}
	e := el.Value.(*cacheEntry)
	if !c.now().Before(e.expires) {
		c.remove(el)
		return nil, false
	}
	c.lru.MoveToFront(el)
	return e.val, true
}

func (c *cache) put(key string, val any, size int) {
	if !c.enabled() {
		return
	}
	cost := int64(size + len(key))
	if cost > c.maxBytes {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.byKey[key]; ok {
		c.remove(el)
	}
	c.byKey[key] = c.lru.PushFront(&cacheEntry{key: key, val: val, cost: cost, expires: c.now().Add(c.ttl)})
	c.bytes += cost
	for c.lru.Len() > c.maxEntries || c.bytes > c.maxBytes {
		c.remove(c.lru.Back())
	}
}

// enabled reports whether answers are kept at all (Options.CacheTTL ≥ 0).
func (c *cache) enabled() bool { return c.ttl > 0 && c.maxEntries > 0 }

// len is the number of entries (expired ones included until met).
func (c *cache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lru.Len()
}

func (c *cache) remove(el *list.Element) {
	e := c.lru.Remove(el).(*cacheEntry)
	delete(c.byKey, e.key)
	c.bytes -= e.cost
}
