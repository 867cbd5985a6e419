package install

import (
	"strconv"
	"strings"
)

// A TOML file cut into statements, so WireVelocity can replace a few keys
// and keep every other byte. It is not a TOML parser: the file was
// accepted by BurntSushi/toml first, and the edited file is parsed again
// and checked, so this only has to find where each statement starts and
// ends (multi-line arrays and strings included).

type stmtKind int

const (
	stmtTrivia stmtKind = iota // blank or comment line
	stmtTable                  // [table] or [[array]] header line
	stmtKV                     // key = value, over as many lines as the value takes
)

type tomlStmt struct {
	kind  stmtKind
	text  string   // raw, ending in a newline
	path  []string // table name or key, unquoted; nil when unreadable
	array bool     // [[array]]
}

// name is the dotted path ("" when unreadable; a quoted key with a dot
// never equals a bare name Kiln looks for, since those have none).
func (s tomlStmt) name() string {
	if s.path == nil {
		return "\x00"
	}
	return strings.Join(s.path, ".")
}

// splitTOML cuts src into statements; their texts joined are src (with a
// final newline added when missing).
func splitTOML(src string) []tomlStmt {
	if src != "" && !strings.HasSuffix(src, "\n") {
		src += "\n"
	}
	var out []tomlStmt
	for i := 0; i < len(src); {
		eol := strings.IndexByte(src[i:], '\n') + i + 1
		line := src[i:eol]
		t := strings.TrimLeft(line, " \t")
		switch {
		case strings.TrimSpace(t) == "" || t[0] == '#':
			out = append(out, tomlStmt{kind: stmtTrivia, text: line})
			i = eol
		case t[0] == '[':
			s := tomlStmt{kind: stmtTable, text: line, array: strings.HasPrefix(t, "[[")}
			inner := strings.TrimPrefix(t[1:], "[")
			if path, rest, ok := parseKeyPath(inner); ok && strings.HasPrefix(rest, "]") {
				s.path = path
			}
			out = append(out, s)
			i = eol
		default:
			s := tomlStmt{kind: stmtKV}
			valueAt := i + (len(line) - len(t)) // a key that cannot be read is scanned as a value
			if path, rest, ok := parseKeyPath(t); ok && strings.HasPrefix(rest, "=") {
				s.path = path
				valueAt = eol - len(rest) + 1 // rest is a suffix of line, which ends at eol
			}
			end := valueEnd(src, valueAt)
			s.text = src[i:end]
			out = append(out, s)
			i = end
		}
	}
	return out
}

// parseKeyPath reads a dotted key (bare, "basic" or 'literal' parts) at
// the start of s and returns its parts and what follows, spaces trimmed.
func parseKeyPath(s string) (path []string, rest string, ok bool) {
	for {
		s = strings.TrimLeft(s, " \t")
		if s == "" {
			return nil, "", false
		}
		switch s[0] {
		case '"':
			end := 1
			for end < len(s) && s[end] != '"' && s[end] != '\n' {
				if s[end] == '\\' {
					end++
				}
				end++
			}
			if end >= len(s) || s[end] != '"' {
				return nil, "", false
			}
			part, err := strconv.Unquote(s[:end+1])
			if err != nil {
				return nil, "", false
			}
			path = append(path, part)
			s = s[end+1:]
		case '\'':
			end := strings.IndexAny(s[1:], "'\n")
			if end < 0 || s[1+end] != '\'' {
				return nil, "", false
			}
			path = append(path, s[1:1+end])
			s = s[2+end:]
		default:
			end := 0
			for end < len(s) && isBareKeyChar(s[end]) {
				end++
			}
			if end == 0 {
				return nil, "", false
			}
			path = append(path, s[:end])
			s = s[end:]
		}
		s = strings.TrimLeft(s, " \t")
		if !strings.HasPrefix(s, ".") {
			return path, s, true
		}
		s = s[1:]
	}
}

func isBareKeyChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-'
}

// valueEnd is the offset just after the newline that ends the value
// starting at k: the first newline outside strings and brackets.
func valueEnd(src string, k int) int {
	depth := 0
	for k < len(src) {
		switch c := src[k]; {
		case strings.HasPrefix(src[k:], `"""`), strings.HasPrefix(src[k:], `'''`):
			delim := src[k : k+3]
			k += 3
			for k < len(src) && !strings.HasPrefix(src[k:], delim) {
				if delim[0] == '"' && src[k] == '\\' {
					k++
				}
				k++
			}
			k += 3
			for n := 0; n < 2 && k < len(src) && src[k] == delim[0]; n++ {
				k++ // up to two quotes may end the content
			}
			continue
		case c == '"' || c == '\'':
			k++
			for k < len(src) && src[k] != c && src[k] != '\n' {
				if c == '"' && src[k] == '\\' {
					k++
				}
				k++
			}
			if k < len(src) && src[k] == '\n' {
				continue
			}
		case c == '#':
			for k < len(src) && src[k] != '\n' {
				k++
			}
			continue
		case c == '[' || c == '{':
			depth++
		case c == ']' || c == '}':
			depth--
		case c == '\n':
			if depth <= 0 {
				return k + 1
			}
		}
		k++
	}
	return len(src)
}
