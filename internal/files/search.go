package files

import (
	"context"
	"os"
	"path"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/kilnhq/kiln/internal/validate"
)

// Search bounds (api.md §4).
const (
	MaxResults     = 1000
	MaxSearchDepth = 32
)

// Match is one search result: the entry and the directory holding it
// (display form, "/plugins").
type Match struct {
	Directory string
	Entry     Entry
}

// Matcher decides whether a name matches a user's pattern.
type Matcher func(name string) bool

// NewMatcher compiles pattern: a case-insensitive glob (*, ?, [...]) on the
// name when it has a glob character, else a case-insensitive substring.
func NewMatcher(field, pattern string) (Matcher, error) {
	if pattern == "" || len(pattern) > MaxNameLen || strings.ContainsAny(pattern, "/\x00") {
		return nil, validate.Errorf(field, "must be 1-%d bytes without \"/\"", MaxNameLen)
	}
	p := strings.ToLower(pattern)
	if !strings.ContainsAny(p, "*?[") {
		return func(name string) bool { return strings.Contains(strings.ToLower(name), p) }, nil
	}
	if _, err := path.Match(p, ""); err != nil {
		return nil, validate.Errorf(field, "is not a valid glob pattern")
	}
	return func(name string) bool {
		ok, _ := path.Match(p, strings.ToLower(name))
		return ok
	}, nil
}

// Search is SearchLimit with the most results an answer may hold.
func (r *Root) Search(ctx context.Context, rel string, match Matcher) ([]Match, bool, error) {
	return r.SearchLimit(ctx, rel, match, MaxResults)
}

// SearchLimit walks directory rel (at most MaxSearchDepth levels below
// it) and returns the entries whose name matches, at most limit, stopping
// early when ctx ends (the results so far are returned with ctx's error).
// It never follows a symlink: directories are opened relative to their
// parent's descriptor with O_NOFOLLOW, so a link swapped in mid-walk is not
// entered. truncated reports that more than limit entries matched (the
// walk stops at the first one past it) or that the depth bound was hit.
func (r *Root) SearchLimit(ctx context.Context, rel string, match Matcher, limit int) (out []Match, truncated bool, err error) {
	err = r.withDir(rel, func(fd int) error {
		dfd, err := unix.Openat(fd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return classify(&os.PathError{Op: "openat", Path: rel, Err: err})
		}
		w := walker{ctx: ctx, match: match, limit: max(limit, 1)}
		w.walk(dfd, Display(rel), 0)
		out, truncated = w.out, w.truncated
		return w.err
	})
	return out, truncated, err
}

type walker struct {
	ctx       context.Context
	match     Matcher
	limit     int
	out       []Match
	truncated bool
	err       error
	visited   int
}

// walk reads directory dfd (which it closes) named dir.
func (w *walker) walk(dfd int, dir string, depth int) {
	f := os.NewFile(uintptr(dfd), dir)
	defer f.Close()
	for {
		ents, err := f.ReadDir(256)
		for _, d := range ents {
			if w.done() {
				return
			}
			name := d.Name()
			if w.match(name) {
				e, err := statAt(dfd, name)
				if err == nil {
					if len(w.out) == w.limit { // one more than fits
						w.truncated = true
						return
					}
					e.MIME = typeOf(e, func() []byte { return sniffAt(dfd, name) })
					w.out = append(w.out, Match{Directory: dir, Entry: e})
				}
			}
			if d.Type()&os.ModeType == os.ModeDir {
				if depth+1 > MaxSearchDepth {
					w.truncated = true
					continue
				}
				sub, err := unix.Openat(dfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
				if err != nil {
					continue // gone, or swapped for a link: not entered
				}
				w.walk(sub, path.Join(dir, name), depth+1)
			}
		}
		if err != nil || len(ents) == 0 {
			return // io.EOF at the end; a read error ends this directory
		}
	}
}

// done reports whether the walk must stop: enough results, or ctx ended
// (checked every 256 entries: a syscall-free check is cheap, but not free).
func (w *walker) done() bool {
	if w.truncated || w.err != nil {
		return true
	}
	w.visited++
	if w.visited%256 == 0 && w.ctx.Err() != nil {
		w.err = w.ctx.Err()
		return true
	}
	return false
}
