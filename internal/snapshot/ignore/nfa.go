package ignore

import (
	"math/bits"
	"strings"
)

// program runs all the patterns of a Matcher at once, as one bit-parallel
// NFA (shift-and, with loops and ε-edges added). Each pattern has a run of
// states, one before each of its instructions and one accepting after
// them; a set of states is a bitset. A step over one byte costs a few
// operations per 64 states, so a path is matched in one pass, in
// O(len(path) × states/64), whatever the patterns: no backtracking, and
// no pass per pattern or per parent directory.
type program struct {
	words     int // uint64s in a set of states
	col       [256]uint8
	adv       []uint64    // column col[c]: states that consume c and go on (words each)
	stay      [2][]uint64 // states that consume a byte and stay: [0] for "/", [1] for others
	skip1     []uint64    // states with an ε-edge to the next (opStar, opAll, opDirs)
	skip2     []uint64    // states with an ε-edge two on (opDirs, past its loop)
	startPath []uint64    // where patterns matched against the whole path start, closed
	startName []uint64    // where patterns matched against a name start, closed
	accept    []uint64    // each pattern's accepting state, in pattern order
	dirOnly   []uint64    // accepting states of patterns for directories only
	negative  []uint64    // accepting states of "!" patterns
	names     bool        // startName is not empty
	classes   int         // columns of adv: classes of bytes col tells apart
}

func newProgram(patterns []pattern) *program {
	states := 0
	for _, p := range patterns {
		states += len(p.insts) + 1
	}
	pr := &program{words: (states + 63) / 64}
	mask := func() []uint64 { return make([]uint64, pr.words) }
	pr.stay = [2][]uint64{mask(), mask()}
	pr.skip1, pr.skip2 = mask(), mask()
	pr.startPath, pr.startName = mask(), mask()
	pr.accept, pr.dirOnly, pr.negative = mask(), mask(), mask()
	set := func(m []uint64, j int) { m[j/64] |= 1 << (j % 64) }
	base := 0
	for _, p := range patterns {
		if p.basename {
			set(pr.startName, base)
			pr.names = true
		} else {
			set(pr.startPath, base)
		}
		for i, in := range p.insts {
			j := base + i
			switch in.op {
			case opStar:
				set(pr.stay[1], j)
				set(pr.skip1, j)
			case opAll:
				set(pr.stay[0], j)
				set(pr.stay[1], j)
				set(pr.skip1, j)
			case opDirs:
				set(pr.skip1, j)
				set(pr.skip2, j)
			case opDirsLoop:
				set(pr.stay[0], j)
				set(pr.stay[1], j)
			}
		}
		end := base + len(p.insts)
		set(pr.accept, end)
		if p.dirOnly {
			set(pr.dirOnly, end)
		}
		if p.negative {
			set(pr.negative, end)
		}
		base = end + 1
	}
	pr.close(pr.startPath)
	pr.close(pr.startName)

	// One column of adv for each class of bytes no instruction tells
	// apart; its first byte stands for all of them.
	var reps []byte
	pr.col, reps = byteClasses(patterns)
	pr.classes = len(reps)
	pr.adv = make([]uint64, len(reps)*pr.words)
	column := func(k int) []uint64 { return pr.adv[k*pr.words : (k+1)*pr.words] }
	base = 0
	for _, p := range patterns {
		for i, in := range p.insts {
			switch in.op {
			case opByte:
				set(column(int(pr.col[in.b])), base+i)
			case opDirsLoop:
				set(column(int(pr.col['/'])), base+i)
			case opAny, opClass:
				for k, c := range reps {
					if advances(in, c) {
						set(column(k), base+i)
					}
				}
			}
		}
		base += len(p.insts) + 1
	}
	return pr
}

// byteClasses splits the 256 bytes into classes that no instruction of
// patterns tells apart: "/" and each byte an opByte names alone, the
// others by the "[…]" sets holding them. It returns each byte's class
// and one byte of each class.
func byteClasses(patterns []pattern) (class [256]uint8, reps []byte) {
	var named byteSet
	named.add('/')
	var sets []*byteSet
	seen := map[byteSet]bool{}
	for _, p := range patterns {
		for _, in := range p.insts {
			switch in.op {
			case opByte:
				named.add(in.b)
			case opClass:
				if !seen[*in.set] {
					seen[*in.set] = true
					sets = append(sets, in.set)
				}
			}
		}
	}
	classes := map[string]uint8{}
	var key []byte
	for c := range 256 {
		key = key[:0]
		if named.has(byte(c)) {
			key = append(key, 1, byte(c))
		} else {
			key = append(key, 0)
			var in byte // membership in sets, eight to a byte of key
			for i, s := range sets {
				if s.has(byte(c)) {
					in |= 1 << (i % 8)
				}
				if i%8 == 7 || i == len(sets)-1 {
					key = append(key, in)
					in = 0
				}
			}
		}
		i, ok := classes[string(key)]
		if !ok {
			i = uint8(len(reps))
			classes[string(key)] = i
			reps = append(reps, byte(c))
		}
		class[c] = i
	}
	return class, reps
}

// advances reports whether in consumes c and moves to the next state.
func advances(in inst, c byte) bool {
	switch in.op {
	case opByte:
		return c == in.b
	case opAny:
		return c != '/'
	case opClass:
		return in.set.has(c)
	case opDirsLoop:
		return c == '/'
	}
	return false
}

// match reports whether the entry at rel is excluded: whether, for rel
// or one of its parents, the last pattern matching it is not a negation.
// Each parent is decided when the pass reaches the "/" after it. Match
// asks the lazy DFA (dfa.go), which runs this pass where its cache no
// longer pays; the tests compare the two.
func (pr *program) match(rel string, isDir bool) bool {
	var buf [16]uint64
	var cur, next []uint64
	if 2*pr.words <= len(buf) {
		cur, next = buf[:pr.words], buf[pr.words:2*pr.words]
	} else {
		b := make([]uint64, 2*pr.words)
		cur, next = b[:pr.words], b[pr.words:]
	}
	pr.start(cur)
	return pr.run(cur, next, rel, isDir)
}

// start sets cur to the states before the first byte of a path.
func (pr *program) start(cur []uint64) {
	copy(cur, pr.startPath)
	or(cur, pr.startName)
}

// run goes on from cur, the states before rel[0], to the end of rel and
// reports whether the entry is excluded; next is scratch of the same
// size. It overwrites both.
func (pr *program) run(cur, next []uint64, rel string, isDir bool) bool {
	for i := 0; i < len(rel); i++ {
		c := rel[i]
		if c == '/' && pr.excludes(cur, true) {
			return true
		}
		live := pr.step(cur, next, c)
		cur, next = next, cur
		if c == '/' && pr.names {
			or(cur, pr.startName) // a new name starts
			live = true
		}
		if !live {
			// Nothing can match before the next name starts, if any.
			j := strings.IndexByte(rel[i+1:], '/')
			if j < 0 || !pr.names {
				return false
			}
			i += j // rel[i+1] is that "/"
		}
	}
	return pr.excludes(cur, isDir)
}

// excludes reports whether the last pattern accepting in cur, leaving
// out patterns for directories only unless isDir, is not a negation.
func (pr *program) excludes(cur []uint64, isDir bool) bool {
	for w := len(cur) - 1; w >= 0; w-- {
		x := cur[w] & pr.accept[w]
		if !isDir {
			x &^= pr.dirOnly[w]
		}
		if x != 0 {
			last := uint64(1) << (63 - bits.LeadingZeros64(x))
			return pr.negative[w]&last == 0
		}
	}
	return false
}

// exclusions is excludes(cur, true) and excludes(cur, false) in one
// pass.
func (pr *program) exclusions(cur []uint64) (dir, file bool) {
	dirDone := false
	for w := len(cur) - 1; w >= 0; w-- {
		x := cur[w] & pr.accept[w]
		if x == 0 {
			continue
		}
		if !dirDone {
			last := uint64(1) << (63 - bits.LeadingZeros64(x))
			dir, dirDone = pr.negative[w]&last == 0, true
		}
		if x &^= pr.dirOnly[w]; x != 0 {
			last := uint64(1) << (63 - bits.LeadingZeros64(x))
			return dir, pr.negative[w]&last == 0
		}
	}
	return dir, false
}

// step sets next to the states cur reaches consuming c, and reports
// whether there are any.
func (pr *program) step(cur, next []uint64, c byte) bool {
	adv := pr.adv[int(pr.col[c])*pr.words:][:pr.words]
	stay := pr.stay[1]
	if c == '/' {
		stay = pr.stay[0]
	}
	var carry, live uint64
	for w, x := range cur {
		a := x & adv[w]
		v := a<<1 | carry | x&stay[w]
		carry = a >> 63
		next[w] = v
		live |= v
	}
	if live == 0 {
		return false
	}
	pr.close(next)
	return true
}

// close adds to x the states its states reach by ε-edges. glob.emit
// keeps chains of them to two edges, so this loops at most three times.
func (pr *program) close(x []uint64) {
	for {
		changed := false
		var carry1, carry2 uint64
		for w := range x {
			s1, s2 := x[w]&pr.skip1[w], x[w]&pr.skip2[w]
			v := x[w] | s1<<1 | carry1 | s2<<2 | carry2
			carry1, carry2 = s1>>63, s2>>62
			if v != x[w] {
				x[w], changed = v, true
			}
		}
		if !changed {
			return
		}
	}
}

func or(x, y []uint64) {
	for w := range x {
		x[w] |= y[w]
	}
}
