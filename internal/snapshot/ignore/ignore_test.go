package ignore

import (
	"errors"
	"strings"
	"testing"
)

type query struct {
	path  string // a trailing "/" marks a directory
	want  bool
	isDir bool
}

// q parses "path" or "path/" (a directory) with the answer wanted.
func q(path string, want bool) query {
	if dir, ok := strings.CutSuffix(path, "/"); ok {
		return query{path: dir, want: want, isDir: true}
	}
	return query{path: path, want: want}
}

func TestMatchRules(t *testing.T) {
	tests := []struct {
		name    string
		text    string
		queries []query
	}{
		{"blank lines and comments", "\n# a.log\n\n", []query{q("a.log", false), q("# a.log", false)}},
		{"escaped hash", `\#x`, []query{q("#x", true), q(`\#x`, false)}},
		{"hash not first", " #x\nx#", []query{q(" #x", true), q("x#", true)}},
		{"trailing spaces trimmed", "foo   ", []query{q("foo", true), q("foo   ", false)}},
		{"escaped trailing space kept", `foo\ `, []query{q("foo ", true), q("foo", false)}},
		{"spaces after escaped space trimmed", `foo\   `, []query{q("foo ", true), q("foo   ", false)}},
		{"tab not trimmed", "foo\t", []query{q("foo\t", true), q("foo", false)}},
		{"leading spaces kept", "  foo", []query{q("  foo", true), q("foo", false)}},
		{"CRLF", "a\r\nb\r\n", []query{q("a", true), q("b", true), q("a\r", false)}},
		{"CR inside a line kept", "a\rb", []query{q("a\rb", true)}},
		{"BOM skipped", "\ufeffa", []query{q("a", true)}},
		{"BOM before a comment", "\ufeff#a", []query{q("#a", false)}},
		{"name at any depth", "a.log", []query{q("a.log", true), q("x/a.log", true), q("x/y/a.log/", true), q("xa.log", false)}},
		{"star", "*.log", []query{q(".log", true), q("x/y.log", true), q("y.log.txt", false)}},
		{"star does not cross slash", "a/*.log", []query{q("a/x.log", true), q("a/b/x.log", false), q("b/a/x.log", false)}},
		{"question mark", "a?c", []query{q("abc", true), q("ac", false), q("abbc", false)}},
		{"question mark not slash", "a?c/d", []query{q("a/c/d", false), q("abc/d", true)}},
		{"question mark is one byte", "?", []query{q("é", false), q("x", true)}},
		{"two bytes of one rune", "??", []query{q("é", true)}},
		{"negation re-includes", "*.log\n!keep.log", []query{q("a.log", true), q("keep.log", false), q("d/keep.log", false)}},
		{"last match wins", "!keep.log\n*.log", []query{q("keep.log", true)}},
		{"escaped bang", `\!x`, []query{q("!x", true), q("x", false)}},
		{"bang alone", "!", []query{q("!", false)}},
		{"dir only", "logs/", []query{q("logs/", true), q("logs", false), q("a/logs/", true), q("logs/x", true)}},
		{"dir only file under it", "logs/\n!logs/x", []query{q("logs/x", true)}},
		{"leading slash anchors", "/a", []query{q("a", true), q("x/a", false)}},
		{"middle slash anchors", "a/b", []query{q("a/b", true), q("x/a/b", false)}},
		{"anchored dir", "/logs/", []query{q("logs/", true), q("x/logs/", false), q("logs", false)}},
		{"double leading slash", "//a", []query{q("a", false), q("x/a", false)}},
		{"double trailing slash", "a//", []query{q("a/", false), q("a", false)}},
		{"slash alone", "/", []query{q("a", false), q("a/", false)}},
		{"leading starstar", "**/cache", []query{q("cache/", true), q("a/cache/", true), q("a/b/cache", true), q("xcache", false)}},
		{"trailing starstar", "a/**", []query{q("a/", false), q("a/x", true), q("a/x/y", true), q("b/a/x", false)}},
		{"middle starstar", "a/**/b", []query{q("a/b", true), q("a/x/b", true), q("a/x/y/b", true), q("a/xb", false), q("ab", false)}},
		{"starstar alone", "**", []query{q("x", true), q("x/", true)}},
		{"slash starstar", "/**", []query{q("x", true), q("x/y", true)}},
		{"starstar not an element", "a**b", []query{q("axb", true), q("ax/b", false)}},
		{"starstar after name", "a/b**/c", []query{q("a/bx/c", true), q("a/b/c", true), q("a/bx/y/c", true)}},
		{"starstar after literal start", "x/y**", []query{q("x/yz", true), q("x/y", true)}},
		{"starstar mid name", "a/x**y/c", []query{q("a/xzy/c", true), q("a/xz/y/c", false)}},
		{"foo starstar slash is git's quirk", "foo**/bar", []query{q("foo/bar", true), q("fooX/bar", true), q("fooX/y/bar", true)}},
		{"starstar escaped slash", `a/**\/b`, []query{q("a/b", false), q("a/x/b", true), q("a/x/y/b", true)}},
		{"starstar starstar", "a/**/**/b", []query{q("a/b", true), q("a/x/y/b", true)}},
		{"class", "[abc]", []query{q("a", true), q("d", false)}},
		{"range", "[a-c]?", []query{q("bx", true), q("dx", false), q("b", false)}},
		{"negated class", "[!a]*", []query{q("a", false), q("ab", false), q("ba", true)}},
		{"caret negates", "[^a]*", []query{q("a", false), q("ba", true)}},
		{"bracket first is a member", "[]a]", []query{q("]", true), q("a", true)}},
		{"negated bracket first", "[!]a]", []query{q("]", false), q("b", true)}},
		{"dash last is a member", "[a-]", []query{q("-", true), q("b", false)}},
		{"dash first is a member", "[-a]", []query{q("-", true)}},
		{"dash after range is a member", "[a-c-e]", []query{q("-", true), q("d", false), q("e", true)}},
		{"reversed range is its first member", "[z-a]", []query{q("m", false), q("z", true), q("a", false), q("-", false)}},
		{"escaped in class", `[\]]`, []query{q("]", true), q(`\`, false)}},
		{"escaped range end", `[a-\c]`, []query{q("b", true)}},
		{"named class", "[[:digit:]]x", []query{q("1x", true), q("ax", false)}},
		{"space class is git's", "x[[:space:]]", []query{q("x ", true), q("x\t", true), q("x\v", false)}},
		{"named class in set", "[[:upper:]a]", []query{q("A", true), q("a", true), q("b", false)}},
		{"unknown class matches nothing", "[[:bogus:]]", []query{q("b", false), q(":", false)}},
		{"colon bracket without class end", "[[:a]x", []query{q("[x", true), q(":x", true), q("ax", true)}},
		{"unclosed class matches nothing", "[a", []query{q("[a", false), q("a", false)}},
		{"class never matches slash", "a[/]b", []query{q("a/b", false)}},
		{"class bytes", "[é]", []query{q("é", false)}},
		{"escaped star", `a\*b`, []query{q("a*b", true), q("axb", false)}},
		{"trailing backslash matches nothing", `a\`, []query{q(`a\`, false), q("a", false)}},
		{"backslash before dir slash", `a\/`, []query{q(`a\`, false), q("a", false)}},
		{"escaped slash is a slash", `a\/b`, []query{q("a/b", true)}},
		{"star slash", "*/", []query{q("x/", true), q("x", false)}},
		{"anchored star", "/*", []query{q("x", true), q("x/y", true)}},
		{"parent excluded beats negation", "build/\n!build/keep", []query{q("build/keep", true), q("build/x/keep", true)}},
		{"re-include inside re-included dir", "/*\n!/foo\n/foo/*\n!/foo/bar", []query{q("foo/", false), q("foo/bar", false), q("foo/baz", true), q("x", true)}},
		{"negated dir", "*\n!d/", []query{q("d/", false), q("d/x", true), q("x", true)}},
		{"case sensitive", "A", []query{q("a", false), q("A", true)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := Parse(tt.text)
			if err != nil {
				t.Fatalf("Parse(%q): %v", tt.text, err)
			}
			pl := refParse(tt.text)
			for _, q := range tt.queries {
				if got := m.Match(q.path, q.isDir); got != q.want {
					t.Errorf("Parse(%q).Match(%q, %v) = %v, want %v", tt.text, q.path, q.isDir, got, q.want)
				}
				if got := refExcluded(pl, q.path, q.isDir); got != q.want {
					t.Errorf("git port: %q on %q (dir %v) = %v, want %v", tt.text, q.path, q.isDir, got, q.want)
				}
			}
		})
	}
}

func TestParseRefuses(t *testing.T) {
	tests := []struct {
		name string
		text string
		line int
	}{
		{"too large", strings.Repeat("a", MaxSize+1), 0},
		{"too many patterns", strings.Repeat("a\n#\n", MaxPatterns) + "b\n", 2*MaxPatterns + 1},
		{"NUL", "a\nb\x00c\n", 2},
		{"NUL in a comment", "#\x00", 1},
		{"invalid UTF-8", "a\n\n\xff\n", 3},
		{"truncated rune", "é\n\xc3", 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := Parse(tt.text)
			perr, ok := errors.AsType[*ParseError](err)
			if !ok {
				t.Fatalf("Parse = %v, %v; want a *ParseError", m, err)
			}
			if perr.Line != tt.line {
				t.Errorf("Parse: %v: line %d, want %d", err, perr.Line, tt.line)
			}
		})
	}
}

func TestParseAcceptsLimits(t *testing.T) {
	for _, text := range []string{
		strings.Repeat("a", MaxSize),
		strings.Repeat("a\n", MaxPatterns),
		strings.Repeat("#\n", MaxPatterns+1),
		"\ufeffé\r\n",
	} {
		if _, err := Parse(text); err != nil {
			t.Errorf("Parse(%.20q…) = %v, want nil", text, err)
		}
	}
}

func TestEmpty(t *testing.T) {
	tests := []struct {
		text string
		want bool
	}{
		{"", true},
		{"# only\n\n   \n", true},
		{"!a\n!b/", true},
		{"[a\n" + `b\` + "\n/\n!", true},
		{"a", false},
		{"!a\nb", false},
	}
	for _, tt := range tests {
		m, err := Parse(tt.text)
		if err != nil {
			t.Fatalf("Parse(%q): %v", tt.text, err)
		}
		if got := m.Empty(); got != tt.want {
			t.Errorf("Parse(%q).Empty() = %v, want %v", tt.text, got, tt.want)
		}
	}
	var nilM *Matcher
	if !nilM.Empty() || nilM.Match("a", false) {
		t.Errorf("nil Matcher: Empty() = %v, Match = %v; want true, false", nilM.Empty(), nilM.Match("a", false))
	}
}

// TestPathological checks that ignore texts which make a backtracking
// matcher take exponential time, or a matcher with a pass per pattern
// or per parent take long, get their answer: one pass over the path.
func TestPathological(t *testing.T) {
	long := strings.Repeat("a/", 2000) + "b"
	tests := []struct {
		text string
		path string
		want bool
	}{
		{strings.Repeat("**/", 5000) + "*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*b", long, false},
		{"a/" + strings.Repeat("*a", 2000) + "*c", "a/" + strings.Repeat("a", 3000), false},
		{strings.Repeat("*a", 2000) + "*c", strings.Repeat("a", 3000), false},
		{strings.Repeat("a/**/", 2000) + "b", long, true},
		{strings.Repeat("a/**/", 2000) + "c", long, false},
		{strings.Repeat("?", 4000) + "/**", long, false},
		{strings.Repeat("[a-z]*", 1000) + "/b", long, false},
		{strings.Repeat("a/**/b\n", 8000), long, true},
		{strings.Repeat("a/**/?c\n", 8000) + "!b", long, false},
		{strings.Repeat("?\n!a\n", 4000), long, true},
		{strings.Repeat("?\n!a\n", 4000), long[:len(long)-2], false},
	}
	for _, tt := range tests {
		m, err := Parse(tt.text)
		if err != nil {
			t.Fatalf("Parse(%.20q…): %v", tt.text, err)
		}
		if got := m.Match(tt.path, false); got != tt.want {
			t.Errorf("Parse(%.20q…).Match(%.20q…) = %v, want %v", tt.text, tt.path, got, tt.want)
		}
	}
}
