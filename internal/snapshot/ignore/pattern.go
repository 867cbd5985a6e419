package ignore

import "strings"

// pattern is one line of the ignore text, compiled.
type pattern struct {
	negative bool // "!" in front: a match re-includes
	dirOnly  bool // "/" at the end: matches directories only
	basename bool // no "/" left: matched against each entry's name, at any depth
	never    bool // git can never match it: it is left out of the automaton
	insts    []inst
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
		p.never = true // git compares an empty pattern with non-empty names
		return p
	}
	// git compares the part before the first wildcard as it is and hands
	// only the rest to wildmatch. That rest is the "pattern" whose start
	// lets a "**" be special, so "foo**/bar" is "foo" then "**/bar".
	lit, rest := line, ""
	if n := strings.IndexAny(line, `*?[\`); n >= 0 {
		lit, rest = line[:n], line[n:]
	}
	var g glob
	for i := 0; i < len(lit); i++ {
		g.emit(inst{op: opByte, b: lit[i]})
	}
	if !g.compile(rest, !p.basename) {
		p.never = true
		return p
	}
	p.insts = g.insts
	return p
}
