package ignore

import (
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
)

// cacheBudget is how many bytes of states and transitions a Matcher's
// DFA keeps (the slices that hold them may have up to twice that while
// they grow): about 200 states of the largest texts (75,000 NFA states,
// 9 KiB a set), 15,000 of a typical one (a word a set).
const cacheBudget = 2 << 20

// payback is how many bytes a cache must have answered per state it
// built before it is emptied to make room (RE2's rule: below it, the
// cache is not paying for the states it builds, and the pass goes on
// on the NFA instead).
const payback = 10

// stateBytes is what a state costs beyond its set and its transitions:
// its entry in index and in the slices.
const stateBytes = 64

// A state's flags.
const (
	exclDir  uint8 = 1 << iota // excludes(set, true): a directory ending here is excluded
	exclFile                   // excludes(set, false)
	dead                       // the set is empty
)

// dfa is the program made deterministic lazily (RE2's DFA), one state
// (a set of the NFA's states) and one transition at a time, as paths
// need them, and kept for the next paths: a byte whose transition is
// known costs one lookup, whatever the patterns; one met first costs a
// step of the NFA and a hash and a copy of the set it leads to
// (O(states/64) each). A walk asks about every entry by its whole path,
// so the states of its parents are known by then, and the many paths of
// a tree go through few states. It is safe for concurrent use (one lock
// around each Match).
//
// The cache is bounded (budget). Full, it is emptied if it answered
// payback bytes per state it built since it was last emptied; if not,
// the path goes on from the current set on the NFA alone (program.run),
// building nothing, and the cache stays as it is for the next paths. So
// a path costs O(len(path)) lookups where its states are known and at
// worst O(len(path) × states/64), as the NFA alone: when the paths keep
// bringing sets of states never seen, more of them than the cache
// holds — long runs of "*" or "**/" in a large text, which a path
// advances one state a byte. A cold cache costs about what the NFA
// alone costs (docs/benchmarks.md).
type dfa struct {
	prog   *program
	budget int
	seed   uint64 // of the hash of sets: not a text's to choose collisions for

	mu     sync.Mutex
	sets   []uint64         // state s's set is sets[s*words:(s+1)*words]
	flags  []uint8          // each state's flags
	trans  []int32          // state s on a byte of class k goes to trans[s*classes+k]; -1 unknown
	index  map[uint64]int32 // a set's hash to the last state built with it
	chain  []int32          // the state built before s with the same hash, -1 none
	start  int32            // the state before a path's first byte; -1 unknown
	used   int              // bytes the cache holds
	hits   int              // bytes answered by a known transition since the cache was emptied
	built  int              // states built since then
	resets int              // times the cache was emptied
	next   []uint64         // scratch sets
	spare  []uint64

	// For tests: the NFA's steps (each O(states/64)), and the paths
	// finished on the NFA alone.
	steps, fallbacks int
}

func newDFA(pr *program, budget int) *dfa {
	return &dfa{prog: pr, budget: budget, seed: rand.Uint64() | 1, index: map[uint64]int32{}, start: -1,
		next: make([]uint64, pr.words), spare: make([]uint64, pr.words)}
}

// set is state s's set of NFA states.
func (d *dfa) set(s int32) []uint64 {
	w := d.prog.words
	return d.sets[int(s)*w : (int(s)+1)*w]
}

// match is program.match, answered from the cache where it can be.
func (d *dfa) match(rel string, isDir bool) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	pr := d.prog
	s := d.start
	if s < 0 {
		pr.start(d.next)
		var ok bool
		if s, ok = d.intern(); !ok {
			d.steps += len(rel)
			d.fallbacks++
			return pr.run(d.next, d.spare, rel, isDir)
		}
		d.start = s
	}
	for i := 0; i < len(rel); i++ {
		c := rel[i]
		f := d.flags[s]
		switch {
		case f&dead != 0:
			// Nothing can match before the next name starts, if any.
			if !pr.names {
				return false
			}
			j := strings.IndexByte(rel[i:], '/')
			if j < 0 {
				return false
			}
			i += j
			c = '/'
		case c == '/' && f&exclDir != 0:
			return true
		}
		t := d.trans[int(s)*pr.classes+int(pr.col[c])]
		if t >= 0 {
			d.hits++
			s = t
			continue
		}
		var ok bool
		if t, ok = d.step(s, c); !ok {
			// The cache no longer pays: the NFA from the set after c.
			d.steps += len(rel) - i - 1
			d.fallbacks++
			return pr.run(d.next, d.spare, rel[i+1:], isDir)
		}
		s = t
	}
	if isDir {
		return d.flags[s]&exclDir != 0
	}
	return d.flags[s]&exclFile != 0
}

// step builds the transition of state s on c: the set after c is left
// in d.next, and its state returned, unless the cache is full and does
// not pay (false).
func (d *dfa) step(s int32, c byte) (int32, bool) {
	pr := d.prog
	d.steps++
	pr.step(d.set(s), d.next, c)
	if c == '/' && pr.names {
		or(d.next, pr.startName) // a new name starts
	}
	resets := d.resets
	t, ok := d.intern()
	if ok && d.resets == resets {
		// Not emptied meanwhile: s is still s.
		d.trans[int(s)*pr.classes+int(pr.col[c])] = t
	}
	return t, ok
}

// intern returns the state of the set in d.next, building it if it is
// new. A cache too full for it is emptied first if it paid
// (payback); if it did not, intern reports false and builds nothing.
func (d *dfa) intern() (int32, bool) {
	pr := d.prog
	h, live := d.seed, uint64(0)
	for _, w := range d.next {
		h = (h ^ w) * 0x9e3779b97f4a7c15
		h ^= h >> 29
		live |= w
	}
	if t, ok := d.index[h]; ok {
		for ; t >= 0; t = d.chain[t] {
			if slices.Equal(d.set(t), d.next) {
				return t, true
			}
		}
	}
	size := 8*pr.words + 4*pr.classes + stateBytes
	if d.used+size > d.budget && len(d.flags) > 0 {
		if d.hits < payback*d.built {
			return -1, false
		}
		d.reset()
	}
	var f uint8
	dir, file := pr.exclusions(d.next)
	if dir {
		f |= exclDir
	}
	if file {
		f |= exclFile
	}
	if live == 0 {
		f |= dead
	}
	t := int32(len(d.flags))
	prev, ok := d.index[h]
	if !ok {
		prev = -1
	}
	d.index[h] = t
	d.chain = append(d.chain, prev)
	d.sets = append(d.sets, d.next...)
	d.flags = append(d.flags, f)
	for range pr.classes {
		d.trans = append(d.trans, -1)
	}
	d.used += size
	d.built++
	return t, true
}

// reset empties the cache.
func (d *dfa) reset() {
	clear(d.index)
	d.sets, d.flags, d.trans, d.chain = d.sets[:0], d.flags[:0], d.trans[:0], d.chain[:0]
	d.start = -1
	d.used, d.hits, d.built = 0, 0, 0
	d.resets++
}
