package ignore

import (
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
)

// walkPaths returns what a walk of a tree asks about: each directory of
// a path depth levels deep, one after the other, and a file in each.
func walkPaths(depth int) (paths []string, dirs []bool) {
	dir := ""
	for range depth {
		dir += "a"
		paths, dirs = append(paths, dir), append(dirs, true)
		paths, dirs = append(paths, dir+"/x.log"), append(dirs, false)
		dir += "/"
	}
	return paths, dirs
}

// TestMatchWorkBounded counts the NFA's steps (each costs O(states/64)
// word operations) a walk costs: once a set of states is known, a byte
// of a path that reaches it is one lookup, so a walk of a tree 200
// levels deep (40,000 path bytes asked about) takes a step for the
// bytes of its deepest path, not for every byte. A text whose sets
// never repeat costs at most what the NFA alone costs.
func TestMatchWorkBounded(t *testing.T) {
	const depth = 200
	paths, dirs := walkPaths(depth)
	total := 0
	for _, p := range paths {
		total += len(p)
	}
	tests := []struct {
		name, text string
		max        int
	}{
		{"typical", "*.log\n/logs/\n!keep.log\ncache/\n**/tmp\nworld/*.lock\n", 2 * 2 * depth},
		{"many short patterns", strings.Repeat("a/**/?b\n", 8000), 2 * 2 * depth},
		{"star star star mix", strings.Repeat(strings.Repeat("a/**/*a*", 50)+"b\n", 8), 2 * 2 * depth},
		// Every byte of the deep path brings a set of states never seen,
		// more than the cache holds: the NFA's cost at most.
		{"starstar chains", strings.Repeat(strings.Repeat("a/**/", 800)+"b\n", 16), total},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := Parse(tt.text)
			if err != nil {
				t.Fatal(err)
			}
			for i, p := range paths {
				if got, want := m.Match(p, dirs[i]), m.dfa.prog.match(p, dirs[i]); got != want {
					t.Fatalf("Match(%.20q…, %v) = %v, the NFA says %v", p, dirs[i], got, want)
				}
			}
			if m.dfa.steps > tt.max {
				t.Errorf("a walk of %d paths (%d bytes) took %d steps of the NFA, want at most %d", len(paths), total, m.dfa.steps, tt.max)
			}
			t.Logf("%d paths, %d bytes: %d steps of the NFA, %d cache resets, %d paths finished on the NFA", len(paths), total, m.dfa.steps, m.dfa.resets, m.dfa.fallbacks)
		})
	}
}

// TestDFAAgreesWithNFA compares the lazy DFA with the NFA it is made
// from on random texts and paths over a small alphabet dense in glob
// syntax, with the cache as large as Parse makes it, small enough to be
// emptied often, and too small for any transition (every path on the
// NFA).
func TestDFAAgreesWithNFA(t *testing.T) {
	const patAlphabet = "ab/*?[]!^-\\: "
	const pathAlphabet = "ab/*?[]!-\\: "
	for _, budget := range []int{cacheBudget, 300, 1} {
		rng := rand.New(rand.NewPCG(5, 6))
		gen := func(alphabet string, n int) string {
			b := make([]byte, n)
			for i := range b {
				b[i] = alphabet[rng.IntN(len(alphabet))]
			}
			return string(b)
		}
		checked, resets, fallbacks := 0, 0, 0
		for range 4000 {
			var text strings.Builder
			for range 1 + rng.IntN(4) {
				text.WriteString(gen(patAlphabet, 1+rng.IntN(10)) + "\n")
			}
			m, err := Parse(text.String())
			if err != nil {
				t.Fatalf("Parse(%q): %v", text.String(), err)
			}
			if m.Empty() {
				continue
			}
			d := newDFA(m.dfa.prog, budget)
			for range 100 {
				rel := gen(pathAlphabet, 1+rng.IntN(12))
				if !validRel(rel) {
					continue
				}
				isDir := rng.IntN(2) == 0
				checked++
				if got, want := d.match(rel, isDir), d.prog.match(rel, isDir); got != want {
					t.Fatalf("budget %d: Parse(%q): the DFA says %v for (%q, %v), the NFA %v", budget, text.String(), got, rel, isDir, want)
				}
			}
			resets += d.resets
			fallbacks += d.fallbacks
		}
		t.Logf("budget %d: %d queries agree; %d cache resets, %d paths finished on the NFA", budget, checked, resets, fallbacks)
		if budget < cacheBudget && (resets == 0 && budget > 1 || fallbacks == 0) {
			t.Errorf("budget %d: %d resets, %d paths finished on the NFA: the small cache's paths were not taken", budget, resets, fallbacks)
		}
	}
}

// TestMatchConcurrent asks one Matcher from several goroutines at once,
// its cache small enough to be emptied under them (run with -race).
func TestMatchConcurrent(t *testing.T) {
	m, err := Parse("*.log\n!keep.log\na/**/b\n[a-c]?/\n**/x*y\n")
	if err != nil {
		t.Fatal(err)
	}
	m.dfa = newDFA(m.dfa.prog, 1<<10)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 7))
			for range 2000 {
				b := make([]byte, 1+rng.IntN(16))
				for i := range b {
					b[i] = "abcxy./klgoe"[rng.IntN(12)]
				}
				rel := string(b)
				if !validRel(rel) {
					continue
				}
				if got, want := m.Match(rel, g%2 == 0), m.dfa.prog.match(rel, g%2 == 0); got != want {
					t.Errorf("Match(%q, %v) = %v, the NFA says %v", rel, g%2 == 0, got, want)
					return
				}
			}
		})
	}
	wg.Wait()
}

// dropCache empties m's cache (benchmarks of a cold one).
func (m *Matcher) dropCache() {
	if m.dfa != nil {
		m.dfa.mu.Lock()
		m.dfa.reset()
		m.dfa.mu.Unlock()
	}
}
