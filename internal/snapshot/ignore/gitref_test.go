package ignore

import (
	"bytes"
	"strings"
)

// This file ports git's own code (wildmatch.c dowild, dir.c
// parse_path_pattern, match_basename, match_pathname, trim_trailing_spaces,
// add_patterns_from_buffer, last_matching_pattern_from_list, prep_exclude),
// statement for statement, C strings read as NUL-terminated. It is slow
// (dowild backtracks) and kept only as an oracle for the fuzz test, which
// cannot run git for every input; conformance_test.go checks both against
// the real git.

const (
	wmMatch           = 0
	wmNoMatch         = 1
	wmAbortAll        = -1
	wmAbortToStarStar = -2
)

// at reads s[i] as C would: 0 past the end.
func at(s []byte, i int) byte {
	if i < len(s) {
		return s[i]
	}
	return 0
}

func refGlobSpecial(c byte) bool { return c == '*' || c == '?' || c == '[' || c == '\\' }

// refClass is git's sane_ctype for the POSIX class names wildmatch knows.
func refClass(name string, c byte) (matched, ok bool) {
	isAlpha := ('a' <= c && c <= 'z') || ('A' <= c && c <= 'Z')
	isDigit := '0' <= c && c <= '9'
	isSpace := c == ' ' || c == '\t' || c == '\n' || c == '\r'
	isPunct := c < 0x80 && c > 0x20 && c < 0x7f && !isAlpha && !isDigit
	switch name {
	case "alnum":
		return isAlpha || isDigit, true
	case "alpha":
		return isAlpha, true
	case "blank":
		return c == ' ' || c == '\t', true
	case "cntrl":
		return c < 0x20 || c == 0x7f, true
	case "digit":
		return isDigit, true
	case "graph":
		return c > 0x20 && c < 0x7f, true
	case "lower":
		return 'a' <= c && c <= 'z', true
	case "print":
		return c >= 0x20 && c < 0x7f, true
	case "punct":
		return isPunct, true
	case "space":
		return isSpace, true
	case "upper":
		return 'A' <= c && c <= 'Z', true
	case "xdigit":
		return isDigit || ('a' <= c && c <= 'f') || ('A' <= c && c <= 'F'), true
	}
	return false, false
}

func refDowild(p []byte, pi int, text []byte, ti int, pathname bool) int {
	pstart := pi
	for ; at(p, pi) != 0; ti, pi = ti+1, pi+1 {
		pch := p[pi]
		tch := at(text, ti)
		if tch == 0 && pch != '*' {
			return wmAbortAll
		}
		switch pch {
		case '\\':
			pi++
			pch = at(p, pi)
			if tch != pch {
				return wmNoMatch
			}
			continue
		case '?':
			if pathname && tch == '/' {
				return wmNoMatch
			}
			continue
		case '*':
			var matchSlash bool
			pi++
			if at(p, pi) == '*' {
				prev := pi - 2
				for {
					pi++
					if at(p, pi) != '*' {
						break
					}
				}
				switch {
				case !pathname:
					matchSlash = true
				case (prev < pstart || p[prev] == '/') &&
					(at(p, pi) == 0 || at(p, pi) == '/' || (at(p, pi) == '\\' && at(p, pi+1) == '/')):
					if at(p, pi) == '/' && refDowild(p, pi+1, text, ti, pathname) == wmMatch {
						return wmMatch
					}
					matchSlash = true
				default:
					matchSlash = false
				}
			} else {
				matchSlash = !pathname
			}
			if at(p, pi) == 0 {
				if !matchSlash && bytes.IndexByte(text[min(ti, len(text)):], '/') >= 0 {
					return wmNoMatch
				}
				return wmMatch
			} else if !matchSlash && at(p, pi) == '/' {
				k := bytes.IndexByte(text[ti:], '/')
				if k < 0 {
					return wmNoMatch
				}
				ti += k
				continue // the loop's post statement consumes the "/" of both
			}
			for {
				if tch == 0 {
					break
				}
				if !refGlobSpecial(at(p, pi)) {
					pch = at(p, pi)
					for {
						tch = at(text, ti)
						if tch == 0 || (!matchSlash && tch == '/') || tch == pch {
							break
						}
						ti++
					}
					if tch != pch {
						return wmNoMatch
					}
				}
				m := refDowild(p, pi, text, ti, pathname)
				if m != wmNoMatch {
					if !matchSlash || m != wmAbortToStarStar {
						return m
					}
				} else if !matchSlash && tch == '/' {
					return wmAbortToStarStar
				}
				ti++
				tch = at(text, ti)
			}
			return wmAbortAll
		case '[':
			pi++
			pch = at(p, pi)
			if pch == '^' {
				pch = '!'
			}
			negated := pch == '!'
			if negated {
				pi++
				pch = at(p, pi)
			}
			var prevCh byte
			matched := false
			for {
				if pch == 0 {
					return wmAbortAll
				}
				if pch == '\\' {
					pi++
					pch = at(p, pi)
					if pch == 0 {
						return wmAbortAll
					}
					if tch == pch {
						matched = true
					}
				} else if pch == '-' && prevCh != 0 && at(p, pi+1) != 0 && at(p, pi+1) != ']' {
					pi++
					pch = at(p, pi)
					if pch == '\\' {
						pi++
						pch = at(p, pi)
						if pch == 0 {
							return wmAbortAll
						}
					}
					if tch <= pch && tch >= prevCh {
						matched = true
					}
					pch = 0
				} else if pch == '[' && at(p, pi+1) == ':' {
					pi += 2
					s := pi
					for {
						pch = at(p, pi)
						if pch == 0 || pch == ']' {
							break
						}
						pi++
					}
					if pch == 0 {
						return wmAbortAll
					}
					i := pi - s - 1
					if i < 0 || p[pi-1] != ':' {
						pi = s - 2
						pch = '['
						if tch == pch {
							matched = true
						}
					} else {
						m, ok := refClass(string(p[s:s+i]), tch)
						if !ok {
							return wmAbortAll
						}
						if m {
							matched = true
						}
						pch = 0
					}
				} else if tch == pch {
					matched = true
				}
				// C's "continue" after a literal "[" lands here too.
				prevCh = pch
				pi++
				pch = at(p, pi)
				if pch == ']' {
					break
				}
			}
			if matched == negated || (pathname && tch == '/') {
				return wmNoMatch
			}
			continue
		default:
			if tch != pch {
				return wmNoMatch
			}
			continue
		}
	}
	if at(text, ti) != 0 {
		return wmNoMatch
	}
	return wmMatch
}

func refWildmatch(pattern, text string, pathname bool) bool {
	return refDowild([]byte(pattern), 0, []byte(text), 0, pathname) == wmMatch
}

const (
	refNoDir    = 1
	refEndsWith = 4
	refMustDir  = 8
	refNegative = 16
)

type refPattern struct {
	pattern       string // patternlen bytes
	nowildcardlen int
	flags         int
}

func refSimpleLength(s string) int {
	for i := 0; i < len(s); i++ {
		if refGlobSpecial(s[i]) {
			return i
		}
	}
	return len(s)
}

func refParsePattern(p string) refPattern {
	var r refPattern
	if strings.HasPrefix(p, "!") {
		r.flags |= refNegative
		p = p[1:]
	}
	l := len(p)
	if l > 0 && p[l-1] == '/' {
		l--
		r.flags |= refMustDir
	}
	if !strings.Contains(p[:l], "/") {
		r.flags |= refNoDir
	}
	r.nowildcardlen = min(refSimpleLength(p), l)
	if strings.HasPrefix(p, "*") && refSimpleLength(p[1:]) == len(p[1:]) {
		r.flags |= refEndsWith
	}
	r.pattern = p[:l]
	return r
}

func refTrimTrailingSpaces(b []byte) []byte {
	last := -1
	for i := 0; i < len(b); i++ {
		switch b[i] {
		case ' ':
			if last < 0 {
				last = i
			}
		case '\\':
			i++
			if i >= len(b) {
				return b
			}
			last = -1
		default:
			last = -1
		}
	}
	if last >= 0 {
		return b[:last]
	}
	return b
}

func refParse(text string) []refPattern {
	buf := []byte(text)
	buf = bytes.TrimPrefix(buf, []byte("\xef\xbb\xbf"))
	buf = append(buf, '\n')
	var pl []refPattern
	entry := 0
	for i := 0; i < len(buf); i++ {
		if buf[i] != '\n' {
			continue
		}
		if entry != i && buf[entry] != '#' {
			end := i
			if i > 0 && buf[i-1] == '\r' {
				end--
			}
			line := buf[entry:end]
			if k := bytes.IndexByte(line, 0); k >= 0 { // C stops at a NUL
				line = line[:k]
			}
			pl = append(pl, refParsePattern(string(refTrimTrailingSpaces(line))))
		}
		entry = i + 1
	}
	return pl
}

func refMatchBasename(basename string, p *refPattern) bool {
	pat, prefix := p.pattern, p.nowildcardlen
	switch {
	case prefix == len(pat):
		return pat == basename
	case p.flags&refEndsWith != 0:
		return len(pat)-1 <= len(basename) && basename[len(basename)-(len(pat)-1):] == pat[1:]
	}
	return refWildmatch(pat, basename, false)
}

func refMatchPathname(pathname string, p *refPattern) bool {
	pat, prefix := p.pattern, p.nowildcardlen
	if strings.HasPrefix(pat, "/") {
		pat = pat[1:]
		prefix--
	}
	if len(pathname) < 1 {
		return false
	}
	name := pathname
	if prefix > 0 {
		if prefix > len(name) || pat[:prefix] != name[:prefix] {
			return false
		}
		pat, name = pat[prefix:], name[prefix:]
		if pat == "" && name == "" {
			return true
		}
	}
	return refWildmatch(pat, name, true)
}

// refLastMatching is last_matching_pattern_from_list: nil when undecided.
func refLastMatching(pl []refPattern, pathname string, isDir bool) *refPattern {
	basename := pathname[strings.LastIndexByte(pathname, '/')+1:]
	for i := len(pl) - 1; i >= 0; i-- {
		p := &pl[i]
		if p.flags&refMustDir != 0 && !isDir {
			continue
		}
		if p.flags&refNoDir != 0 {
			if refMatchBasename(basename, p) {
				return p
			}
			continue
		}
		if refMatchPathname(pathname, p) {
			return p
		}
	}
	return nil
}

// refExcluded is what git check-ignore answers for path: prep_exclude's
// check of each leading directory, then the path itself.
func refExcluded(pl []refPattern, path string, isDir bool) bool {
	for i := 0; i < len(path); i++ {
		if path[i] != '/' {
			continue
		}
		if p := refLastMatching(pl, path[:i], true); p != nil && p.flags&refNegative == 0 {
			return true
		}
	}
	p := refLastMatching(pl, path, isDir)
	return p != nil && p.flags&refNegative == 0
}
