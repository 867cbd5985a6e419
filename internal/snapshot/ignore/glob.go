package ignore

import (
	"math/bits"
	"strings"
)

// kind is how a pattern is matched once compiled.
type kind uint8

const (
	kindNever   kind = iota // matches nothing (empty, unclosed "[", trailing "\" …)
	kindLiteral             // the whole subject equals lit
	kindSuffix              // the subject ends with lit ("*.log")
	kindGlob                // the subject starts with lit, prog matches the rest
)

// pattern is one compiled line of the ignore text.
type pattern struct {
	negative bool // "!" in front: a match re-includes
	dirOnly  bool // "/" at the end: matches directories only
	basename bool // no "/" left: matched against the entry's name at any depth
	kind     kind
	lit      string
	prog     program
}

// match reports whether p matches the entry at path, whose last
// element is name.
func (p *pattern) match(path, name string) bool {
	s := path
	if p.basename {
		s = name
	}
	switch p.kind {
	case kindLiteral:
		return s == p.lit
	case kindSuffix:
		return strings.HasSuffix(s, p.lit)
	case kindGlob:
		return strings.HasPrefix(s, p.lit) && p.prog.match(s[len(p.lit):])
	}
	return false
}

// compile turns one pattern line, its trailing spaces already trimmed,
// into a pattern, following git's parse_path_pattern, match_basename
// and match_pathname.
func compile(line string) pattern {
	var p pattern
	if strings.HasPrefix(line, "!") {
		p.negative = true
		line = line[1:]
	}
	if strings.HasSuffix(line, "/") {
		p.dirOnly = true
		line = line[:len(line)-1]
	}
	p.basename = !strings.Contains(line, "/")
	if !p.basename {
		// One leading "/" anchors; a pattern with a "/" elsewhere is
		// anchored anyway. A second "/" stays and then matches nothing.
		line = strings.TrimPrefix(line, "/")
	}
	if line == "" {
		return p // kindNever: git compares an empty pattern with non-empty names
	}
	// git compares the part before the first wildcard as it is and hands
	// only the rest to wildmatch. That rest is the "pattern" whose start
	// lets a "**" be special, so "foo**/bar" is "foo" then "**/bar".
	n := strings.IndexAny(line, `*?[\`)
	switch {
	case n < 0:
		p.kind, p.lit = kindLiteral, line
	case p.basename && n == 0 && line[0] == '*' && !strings.ContainsAny(line[1:], `*?[\`):
		p.kind, p.lit = kindSuffix, line[1:]
	default:
		prog, ok := compileGlob(line[n:], !p.basename)
		if ok {
			p.kind, p.lit, p.prog = kindGlob, line[:n], prog
		}
	}
	return p
}

// opcode is one step of a compiled wildmatch pattern.
type opcode uint8

const (
	opByte     opcode = iota // the byte b
	opAny                    // "?": one byte but "/"
	opClass                  // "[…]": one byte in set ("/" never is)
	opStar                   // "*": a run of bytes without "/", maybe empty
	opAll                    // "**" at the end or before "\/": any run of bytes
	opDirs                   // "**/", first: nothing, or go on to opDirsLoop
	opDirsLoop               // "**/", second: any run of bytes ending in "/"
)

type inst struct {
	op  opcode
	b   byte
	set *byteSet
}

// byteSet is a set of bytes, one bit each.
type byteSet [4]uint64

func (s *byteSet) add(c byte)      { s[c>>6] |= 1 << (c & 63) }
func (s *byteSet) has(c byte) bool { return s[c>>6]&(1<<(c&63)) != 0 }
func (s *byteSet) addRange(lo, hi byte) {
	for c := int(lo); c <= int(hi); c++ {
		s.add(byte(c))
	}
}

// program is a compiled wildmatch pattern, matched by simulating it as an
// NFA over its instructions: time O(len(text) × len(insts)), no
// backtracking, whatever the pattern.
type program struct {
	insts  []inst
	minLen int // bytes any match consumes at least
}

// compileGlob compiles s, a wildmatch pattern, as git's dowild reads it
// with WM_PATHNAME when pathname is set and without it otherwise; a
// subject matched without WM_PATHNAME never holds a "/" here, so
// "*" and "?" may exclude "/" in both modes. It reports false for a
// pattern dowild can never match: one ending in "\" or holding a
// malformed "[…]".
func compileGlob(s string, pathname bool) (program, bool) {
	var pr program
	for i := 0; i < len(s); {
		switch c := s[i]; c {
		case '\\':
			if i+1 == len(s) {
				return pr, false
			}
			pr.emit(inst{op: opByte, b: s[i+1]})
			i += 2
		case '?':
			pr.emit(inst{op: opAny})
			i++
		case '[':
			set, next, ok := compileClass(s, i)
			if !ok {
				return pr, false
			}
			pr.emit(inst{op: opClass, set: set})
			i = next
		case '*':
			j := i + 1
			for j < len(s) && s[j] == '*' {
				j++
			}
			// "**" is special only as a whole path element: after the
			// start or a "/", before the end, a "/" or an escaped "\/".
			special := pathname && j-i >= 2 && (i == 0 || s[i-1] == '/') &&
				(j == len(s) || s[j] == '/' || (s[j] == '\\' && j+1 < len(s) && s[j+1] == '/'))
			switch {
			case !special:
				pr.emit(inst{op: opStar})
			case j < len(s) && s[j] == '/':
				pr.emit(inst{op: opDirs})
				j++ // the "/" belongs to opDirsLoop
			default:
				pr.emit(inst{op: opAll})
			}
			i = j
		default:
			pr.emit(inst{op: opByte, b: c})
			i++
		}
	}
	return pr, true
}

// emit appends in; opDirs brings its opDirsLoop along. It folds
// "**/**/" into one "**/" and "**/**" into one "**" (the same
// languages), so that "**/**/**/…" costs no more than "**/".
func (pr *program) emit(in inst) {
	if n := len(pr.insts); n > 0 && pr.insts[n-1].op == opDirsLoop {
		switch in.op {
		case opDirs:
			return
		case opAll:
			pr.insts = pr.insts[:n-2]
		}
	}
	switch in.op {
	case opByte, opAny, opClass:
		pr.minLen++
	}
	pr.insts = append(pr.insts, in)
	if in.op == opDirs {
		pr.insts = append(pr.insts, inst{op: opDirsLoop})
	}
}

// compileClass compiles the "[…]" starting at s[i] as dowild reads it:
// "!" or "^" first negates, a "]" first is a member, "a-z" is a range,
// "\" escapes, "[:name:]" is a character class. It returns the index
// after the closing "]", or false if there is none or a class name is
// unknown (dowild's WM_ABORT_ALL).
func compileClass(s string, i int) (*byteSet, int, bool) {
	var set byteSet
	i++
	negated := i < len(s) && (s[i] == '!' || s[i] == '^')
	if negated {
		i++
	}
	var prev byte // the last single member, 0 after a range or class
	for {
		if i >= len(s) {
			return nil, 0, false
		}
		c := s[i]
		switch {
		case c == '\\':
			i++
			if i >= len(s) {
				return nil, 0, false
			}
			c = s[i]
			set.add(c)
		case c == '-' && prev != 0 && i+1 < len(s) && s[i+1] != ']':
			i++
			c = s[i]
			if c == '\\' {
				i++
				if i >= len(s) {
					return nil, 0, false
				}
				c = s[i]
			}
			if prev <= c {
				set.addRange(prev, c)
			}
			c = 0
		case c == '[' && i+1 < len(s) && s[i+1] == ':':
			end := strings.IndexByte(s[i+2:], ']')
			if end < 0 {
				return nil, 0, false
			}
			end += i + 2
			if end-(i+2) < 1 || s[end-1] != ':' {
				set.add('[') // no ":]": an ordinary "[", then ":"
				break
			}
			if !addNamedClass(&set, s[i+2:end-1]) {
				return nil, 0, false
			}
			i = end
			c = 0
		default:
			set.add(c)
		}
		prev = c
		i++
		if i < len(s) && s[i] == ']' {
			break
		}
	}
	if negated {
		for w := range set {
			set[w] = ^set[w]
		}
	}
	set[0] &^= 1<<'/' | 1 // "/" is never in a class; NUL never in a path
	return &set, i + 1, true
}

// addNamedClass adds the bytes of the POSIX class name as git's own
// ctype (not the C library's) defines them: ASCII only, and "space" is
// "\t\n\r " without "\v\f".
func addNamedClass(s *byteSet, name string) bool {
	switch name {
	case "alnum":
		s.addRange('0', '9')
		s.addRange('A', 'Z')
		s.addRange('a', 'z')
	case "alpha":
		s.addRange('A', 'Z')
		s.addRange('a', 'z')
	case "blank":
		s.add('\t')
		s.add(' ')
	case "cntrl":
		s.addRange(0, 0x1f)
		s.add(0x7f)
	case "digit":
		s.addRange('0', '9')
	case "graph":
		s.addRange(0x21, 0x7e)
	case "lower":
		s.addRange('a', 'z')
	case "print":
		s.addRange(0x20, 0x7e)
	case "punct":
		s.addRange(0x21, 0x2f)
		s.addRange(0x3a, 0x40)
		s.addRange(0x5b, 0x60)
		s.addRange(0x7b, 0x7e)
	case "space":
		s.add('\t')
		s.add('\n')
		s.add('\r')
		s.add(' ')
	case "upper":
		s.addRange('A', 'Z')
	case "xdigit":
		s.addRange('0', '9')
		s.addRange('A', 'F')
		s.addRange('a', 'f')
	default:
		return false
	}
	return true
}

// match reports whether pr matches all of text. The states are the
// positions 0…len(insts) in the program, len(insts) accepting; a set of
// them is a bitset.
func (pr *program) match(text string) bool {
	if len(text) < pr.minLen {
		return false
	}
	n := len(pr.insts)
	words := n/64 + 1
	var buf [8]uint64 // two sets of up to 256 states without allocating
	var cur, next []uint64
	if 2*words <= len(buf) {
		cur, next = buf[:words], buf[words:2*words]
	} else {
		b := make([]uint64, 2*words)
		cur, next = b[:words], b[words:]
	}
	pr.add(cur, 0)
	for i := 0; i < len(text); i++ {
		c := text[i]
		clear(next)
		live := false
		for w, word := range cur {
			for word != 0 {
				j := w*64 + bits.TrailingZeros64(word)
				word &= word - 1
				if j == n {
					continue
				}
				switch in := &pr.insts[j]; in.op {
				case opByte:
					if c == in.b {
						pr.add(next, j+1)
						live = true
					}
				case opAny:
					if c != '/' {
						pr.add(next, j+1)
						live = true
					}
				case opClass:
					if in.set.has(c) {
						pr.add(next, j+1)
						live = true
					}
				case opStar:
					if c != '/' {
						pr.add(next, j)
						live = true
					}
				case opAll:
					if j+1 == n {
						return true // the rest of text is all opAll's
					}
					pr.add(next, j)
					live = true
				case opDirsLoop:
					pr.add(next, j)
					if c == '/' {
						pr.add(next, j+1)
					}
					live = true
				}
			}
		}
		if !live {
			return false
		}
		cur, next = next, cur
	}
	return cur[n/64]&(1<<(n%64)) != 0
}

// add puts state j in set with the states it reaches matching nothing.
func (pr *program) add(set []uint64, j int) {
	for {
		bit := uint64(1) << (j % 64)
		if set[j/64]&bit != 0 {
			return // added before, with its followers
		}
		set[j/64] |= bit
		if j == len(pr.insts) {
			return
		}
		switch pr.insts[j].op {
		case opStar, opAll:
			j++
		case opDirs:
			pr.add(set, j+1) // into the loop (which stops there)…
			j += 2           // …or past it
		default:
			return
		}
	}
}
