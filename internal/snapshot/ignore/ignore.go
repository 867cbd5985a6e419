package ignore

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// Limits on the text Parse accepts.
const (
	MaxSize     = 64 << 10 // bytes of ignore text
	MaxPatterns = 10_000   // pattern lines (not blank, not comments)
)

// ParseError is the error Parse returns for text it refuses.
type ParseError struct {
	Line int // 1-based line of the refused input; 0 when the whole text is refused
	Msg  string
}

func (e *ParseError) Error() string {
	if e.Line == 0 {
		return "ignore text: " + e.Msg
	}
	return fmt.Sprintf("ignore line %d: %s", e.Line, e.Msg)
}

// Matcher decides which paths an ignore text excludes. Its answers never
// change, and it is safe for concurrent use: it keeps a cache of the
// states its paths went through (dfa.go), behind a lock. A nil *Matcher
// excludes nothing.
type Matcher struct {
	dfa   *dfa // nil when empty
	empty bool
}

// Parse reads gitignore text: one pattern a line, as if it were the only
// .gitignore, at the server root. A UTF-8 BOM at the start is skipped and
// a CR before a line's LF dropped, as git does.
//
// It returns a *ParseError for text larger than MaxSize, with more than
// MaxPatterns patterns, or with a NUL byte or invalid UTF-8 on a line.
// Any other text is accepted, as git accepts it: a pattern git can never
// match (an unclosed "[", a trailing "\") matches nothing here either.
func Parse(text string) (*Matcher, error) {
	if len(text) > MaxSize {
		return nil, &ParseError{Msg: fmt.Sprintf("%d bytes, more than %d", len(text), MaxSize)}
	}
	text = strings.TrimPrefix(text, "\ufeff")
	m := &Matcher{empty: true}
	var patterns []pattern // in text order; the last one matching a path decides
	n, lines := 0, 0
	for line := range strings.SplitSeq(text, "\n") {
		n++
		if i := strings.IndexByte(line, 0); i >= 0 {
			return nil, &ParseError{Line: n, Msg: fmt.Sprintf("NUL byte at column %d", i+1)}
		}
		if !utf8.ValidString(line) {
			return nil, &ParseError{Line: n, Msg: "invalid UTF-8"}
		}
		if line == "" || line[0] == '#' {
			continue
		}
		if lines++; lines > MaxPatterns {
			return nil, &ParseError{Line: n, Msg: fmt.Sprintf("more than %d patterns", MaxPatterns)}
		}
		p := compile(trimTrailingSpaces(strings.TrimSuffix(line, "\r")))
		if p.never {
			continue
		}
		if !p.negative {
			m.empty = false
		}
		patterns = append(patterns, p)
	}
	if !m.empty {
		m.dfa = newDFA(newProgram(patterns), cacheBudget)
	}
	return m, nil
}

// Empty reports whether m excludes nothing at all: the text had no
// pattern, or only negations and patterns that can never match.
func (m *Matcher) Empty() bool {
	return m == nil || m.empty
}

// Match reports whether the entry at rel is excluded. rel is slash-separated,
// relative to the root, without a leading "/" and never ""; isDir tells
// whether the entry itself is a directory, as lstat sees it (a symlink to a
// directory is not one, for git either). Other input gets an unspecified
// answer, never a panic.
//
// The answer is git's: the last pattern matching rel decides, and a path
// under an excluded directory is excluded whatever later negations say
// ("it is not possible to re-include a file if a parent directory of that
// file is excluded"). So Match decides each parent directory of rel too,
// in the same pass, and returns true under an excluded one. A walker that
// skips excluded directories never asks about such paths; Match answers
// callers that don't walk.
func (m *Matcher) Match(rel string, isDir bool) bool {
	if m.Empty() {
		return false
	}
	return m.dfa.match(rel, isDir)
}

// trimTrailingSpaces drops the spaces ending line unless the first of
// them is escaped with a backslash (git's trim_trailing_spaces).
func trimTrailingSpaces(line string) string {
	end := len(line)
	spaces := -1 // start of the current run of trailing spaces
	for i := 0; i < len(line); i++ {
		switch line[i] {
		case ' ':
			if spaces < 0 {
				spaces = i
			}
		case '\\':
			i++
			if i == len(line) {
				return line
			}
			spaces = -1
		default:
			spaces = -1
		}
	}
	if spaces >= 0 {
		end = spaces
	}
	return line[:end]
}
