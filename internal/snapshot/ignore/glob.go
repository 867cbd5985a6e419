package ignore

import "strings"

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

// glob is a wildmatch pattern compiled to instructions: instruction i
// is the way from state i to state i+1, and the last state accepts.
type glob struct {
	insts []inst
}

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

// compile appends s, a wildmatch pattern, as git's dowild reads it
// with WM_PATHNAME when pathname is set and without it otherwise. A
// subject matched without WM_PATHNAME never holds a "/" here, so "*",
// "?" and classes never match "/" in either mode, and a "**" is special
// only with WM_PATHNAME. It reports false for a pattern dowild can never
// match: one ending in "\" or holding a malformed "[…]".
func (g *glob) compile(s string, pathname bool) bool {
	for i := 0; i < len(s); {
		switch c := s[i]; c {
		case '\\':
			if i+1 == len(s) {
				return false
			}
			g.emit(inst{op: opByte, b: s[i+1]})
			i += 2
		case '?':
			g.emit(inst{op: opAny})
			i++
		case '[':
			set, next, ok := compileClass(s, i)
			if !ok {
				return false
			}
			g.emit(inst{op: opClass, set: set})
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
				g.emit(inst{op: opStar})
			case j < len(s) && s[j] == '/':
				g.emit(inst{op: opDirs})
				j++ // the "/" belongs to opDirsLoop
			default:
				g.emit(inst{op: opAll})
			}
			i = j
		default:
			g.emit(inst{op: opByte, b: c})
			i++
		}
	}
	return true
}

// emit appends in; opDirs brings its opDirsLoop along. It folds
// "**/**/" into one "**/" and "**/**" into one "**" (the same
// languages): "**/**/**/…" costs no more than "**/", and no chain of
// ε-edges is longer than two (opDirs, then opStar), which bounds
// program.close.
func (g *glob) emit(in inst) {
	if n := len(g.insts); n > 0 && g.insts[n-1].op == opDirsLoop {
		switch in.op {
		case opDirs:
			return
		case opAll:
			g.insts = g.insts[:n-2]
		}
	}
	g.insts = append(g.insts, in)
	if in.op == opDirs {
		g.insts = append(g.insts, inst{op: opDirsLoop})
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
