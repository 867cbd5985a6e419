package files

import (
	"context"
	"errors"
	"path"
	"strings"

	"github.com/kilnhq/kiln/internal/validate"
)

// Bounds on following a path: Linux gives up (ELOOP) after 40 links; a
// path has at most MaxPathLen bytes, so at most that many segments.
const (
	maxLinkHops  = 40
	maxLinkSteps = MaxPathLen
)

// resolver follows paths through a root as the kernel would, following
// the symlinks met on the way, to tell where they lead. lookup describes
// a root-relative path whose parent is a real directory (nil: the root
// as it is); it lets Rename ask about the tree as it will be after a move.
type resolver struct {
	r      *Root
	lookup func(p string) (Entry, error)
}

func (v resolver) stat(p string) (Entry, error) {
	if v.lookup != nil {
		return v.lookup(p)
	}
	return v.r.Stat(p)
}

func (v resolver) readlink(p string) (string, error) { return v.r.Readlink(p) }

// follow walks the segments todo from directory at (segments from the
// root, a real directory) and returns where it ends, as segments; ok is
// false when the walk leaves the root (a ".." above it, an absolute link)
// or gives up (too many links or segments, a path the root cannot name).
// A missing segment ends the lookups: what follows is taken as plain
// directories (whatever is created there later), so a ".." after it still
// counts — a link that dangles today may not lead out tomorrow.
func (v resolver) follow(at []string, todo []string) ([]string, bool) {
	hops, missing := 0, false
	for steps := 0; len(todo) > 0; steps++ {
		if steps > maxLinkSteps {
			return nil, false
		}
		seg := todo[0]
		todo = todo[1:]
		switch seg {
		case "", ".":
			continue
		case "..":
			if len(at) == 0 {
				return nil, false
			}
			at = at[:len(at)-1]
			continue
		}
		if missing {
			at = append(at, seg)
			continue
		}
		p := strings.Join(append(at[:len(at):len(at)], seg), "/")
		e, err := v.stat(p)
		switch {
		case errors.Is(err, ErrNotFound), errors.Is(err, ErrNotDirectory):
			missing = true
			at = append(at, seg)
			continue
		case err != nil:
			return nil, false
		case !e.IsSymlink():
			at = append(at, seg)
			continue
		}
		if hops++; hops > maxLinkHops {
			return nil, false
		}
		t, err := v.readlink(p)
		if err != nil || strings.HasPrefix(t, "/") {
			return nil, false
		}
		todo = append(strings.Split(t, "/"), todo...)
	}
	return at, true
}

// linkInside reports whether a symlink at rel (root-relative; its
// directory may be reached through links inside) to target leads to a
// place inside the root, following every link on the way: its own
// directory's, and those its target passes through.
func (v resolver) linkInside(rel, target string) bool {
	if strings.HasPrefix(target, "/") {
		return false
	}
	dir, ok := v.follow(nil, strings.Split(path.Dir(rel), "/"))
	if !ok {
		return false
	}
	_, ok = v.follow(dir, strings.Split(target, "/"))
	return ok
}

// LinkInside reports whether a symlink at rel to target would lead inside
// the root, as the tree is now (see resolver.linkInside).
func (r *Root) LinkInside(rel, target string) bool {
	return resolver{r: r}.linkInside(rel, target)
}

// Physical is where rel really is: the root-relative path reached by
// following the links inside on its way (rel itself too). ok is false
// when it leads outside.
func (r *Root) Physical(rel string) (string, bool) {
	at, ok := resolver{r: r}.follow(nil, strings.Split(rel, "/"))
	if !ok {
		return "", false
	}
	if len(at) == 0 {
		return ".", true
	}
	return strings.Join(at, "/"), true
}

// maxMovedLinks bounds the links a Rename checks inside a moved
// directory; a directory with more is refused rather than half-checked.
const maxMovedLinks = 10000

// checkMovedLinks refuses (a *validate.Error naming the link) a move of
// from to to that would leave a symlink pointing outside the root: the
// entry itself when it is a link, every link inside it when it is a
// directory (their relative targets change meaning with their place).
// The tree is judged as it will be after the move: what is below to is
// looked up below from, and from itself is gone.
func (r *Root) checkMovedLinks(from, to string) error {
	// Both ends as they really are (their directories may be reached
	// through links inside); the lookups below see physical paths.
	pfrom, ok1 := r.Physical(path.Dir(from))
	pto, ok2 := r.Physical(path.Dir(to))
	if !ok1 || !ok2 {
		return ErrNotFound
	}
	pfrom, pto = join(pfrom, path.Base(from)), join(pto, path.Base(to))
	v := resolver{r: r}
	v.lookup = func(p string) (Entry, error) {
		switch {
		case p == pto:
			return r.Stat(pfrom)
		case strings.HasPrefix(p, pto+"/"):
			return r.Stat(pfrom + p[len(pto):])
		case p == pfrom, strings.HasPrefix(p, pfrom+"/"):
			return Entry{}, ErrNotFound
		}
		return r.Stat(p)
	}
	// Where the moved tree will really be (to's directory may be reached
	// through a link).
	check := func(oldRel, newRel string) error {
		t, err := r.Readlink(oldRel)
		if err != nil {
			return err
		}
		if !v.linkInside(newRel, t) {
			return validate.Errorf("files", "moving %s to %s would make the link %s point outside the server's root", Display(from), Display(to), Display(newRel))
		}
		return nil
	}
	e, err := r.Stat(from)
	if err != nil {
		return err
	}
	switch {
	case e.IsSymlink():
		return check(from, pto)
	case !e.IsDir():
		return nil
	}
	n := 0
	errStop := errors.New("stop")
	var found error
	werr := r.Walk(context.Background(), from, func(rel string, e Entry, _ Opener) error {
		if !e.IsSymlink() {
			return nil
		}
		if n++; n > maxMovedLinks {
			found = validate.Errorf("files", "%s holds more than %d symbolic links; move fewer at once", Display(from), maxMovedLinks)
			return errStop
		}
		if err := check(rel, pto+rel[len(from):]); err != nil {
			found = err
			return errStop
		}
		return nil
	})
	if found != nil {
		return found
	}
	if werr != nil && !errors.Is(werr, errStop) {
		return werr
	}
	return nil
}
