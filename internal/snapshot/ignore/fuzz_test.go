package ignore

import (
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
)

// FuzzParseMatch parses any text and asks Match about any path: no
// panic, refusals only as *ParseError, a path under an excluded
// directory excluded, and, for inputs small enough for the port of git's
// backtracking code, git's answer.
func FuzzParseMatch(f *testing.F) {
	for _, c := range handCases {
		f.Add(c.text, "a/b/x", false)
		for _, p := range c.paths {
			path, isDir := strings.CutSuffix(p, "/")
			f.Add(c.text, path, isDir)
		}
	}
	f.Add("foo**/bar", "fooX/y/bar", false)
	f.Add("a/**/b\n!a/x/", "a/x/b", false)
	f.Add("[[:alpha:]-z]\n[!]-]", "-", true)
	f.Add("**/**/**/*a*a*a*a*a*a*a*a*b", "a/a/a/a/aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", false)
	f.Add("\ufeff#\r\n\\ \r\n", " ", false)
	f.Add("a\x00", "a", false)
	f.Add("\xff", "a", false)
	f.Fuzz(func(t *testing.T, text, rel string, isDir bool) {
		m, err := Parse(text)
		if err != nil {
			if _, ok := errors.AsType[*ParseError](err); !ok {
				t.Fatalf("Parse(%q) = %v, not a *ParseError", text, err)
			}
			return
		}
		got := m.Match(rel, isDir)
		if m.Empty() && got {
			t.Fatalf("Parse(%q): Empty() but Match(%q, %v) = true", text, rel, isDir)
		}
		if !validRel(rel) {
			return
		}
		for i := range len(rel) {
			if rel[i] == '/' && m.Match(rel[:i], true) && !got {
				t.Fatalf("Parse(%q): Match(%q, true) = true but Match(%q, %v) = false", text, rel[:i], rel, isDir)
			}
		}
		// The port backtracks like git; keep it to inputs it finishes fast.
		if len(text) > 200 || len(rel) > 64 || strings.Count(text, "*") > 12 {
			return
		}
		if want := refExcluded(refParse(text), rel, isDir); got != want {
			t.Fatalf("Parse(%q).Match(%q, %v) = %v, git's code says %v", text, rel, isDir, got, want)
		}
	})
}

// validRel reports whether rel is a path Match documents: not empty,
// no empty element, no NUL.
func validRel(rel string) bool {
	return rel != "" && !strings.HasPrefix(rel, "/") && !strings.HasSuffix(rel, "/") &&
		!strings.Contains(rel, "//") && !strings.Contains(rel, "\x00")
}

// TestAgainstGitPort compares Match with the port of git's code on
// random ignore texts and paths over a small alphabet dense in glob
// syntax, where the fuzz test's random bytes seldom go.
func TestAgainstGitPort(t *testing.T) {
	const patAlphabet = "ab/*?[]!^-\\: "
	const pathAlphabet = "ab/*?[]!-\\: "
	rng := rand.New(rand.NewPCG(3, 4))
	gen := func(alphabet string, n int) string {
		b := make([]byte, n)
		for i := range b {
			b[i] = alphabet[rng.IntN(len(alphabet))]
		}
		return string(b)
	}
	checked := 0
	for range 40_000 {
		var text strings.Builder
		for range 1 + rng.IntN(3) {
			text.WriteString(gen(patAlphabet, 1+rng.IntN(10)) + "\n")
		}
		m, err := Parse(text.String())
		if err != nil {
			t.Fatalf("Parse(%q): %v", text.String(), err)
		}
		pl := refParse(text.String())
		for range 10 {
			rel := gen(pathAlphabet, 1+rng.IntN(8))
			if !validRel(rel) {
				continue
			}
			isDir := rng.IntN(2) == 0
			checked++
			if got, want := m.Match(rel, isDir), refExcluded(pl, rel, isDir); got != want {
				t.Fatalf("Parse(%q).Match(%q, %v) = %v, git's code says %v", text.String(), rel, isDir, got, want)
			}
		}
	}
	t.Logf("%d random queries agree with git's code", checked)
}
