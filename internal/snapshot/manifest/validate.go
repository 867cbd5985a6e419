package manifest

import (
	"path"
	"strings"

	"github.com/kilnhq/kiln/internal/files"
	"github.com/kilnhq/kiln/internal/quota"
)

// Validator checks the entries of a manifest as they are read, in
// constant memory per directory level: entries come in walk order
// (parents first, the names of a directory in byte order), so a path is
// a duplicate, or lies under something that is not a directory, exactly
// when its parent is not one of the directories still open or its name
// is not after its previous sibling's.
type Validator struct {
	stack []openDir // "." first
}

// openDir is a directory of the path being walked, and the last name seen
// in it.
type openDir struct {
	path, last string
}

func NewValidator() *Validator { return &Validator{stack: []openDir{{path: "."}}} }

// Check refuses (ErrInvalid) an entry that a restore must not
// create: a path that is not clean and relative ("..", absolute, empty,
// "."), a name Kiln keeps for its own temporary files, a duplicate or an
// entry out of order, an entry under anything but a directory of the
// manifest, a link whose target is absolute, leads out of the root, or
// has a ".." after a name (it could climb out through another link).
func (v *Validator) Check(en *Entry) error {
	p := en.Path
	for seg := range strings.SplitSeq(p, "/") {
		if strings.HasPrefix(seg, quota.TempPrefix) {
			return invalidf("path %q uses Kiln's temporary prefix", p)
		}
	}
	if c, err := files.Clean("path", p); err != nil || c != p || p == "." {
		return invalidf("path %q is not a clean relative path", p)
	}
	parent, name := path.Dir(p), path.Base(p)
	for len(v.stack) > 1 && v.stack[len(v.stack)-1].path != parent {
		v.stack = v.stack[:len(v.stack)-1]
	}
	top := &v.stack[len(v.stack)-1]
	if top.path != parent {
		return invalidf("%q is not under a directory listed before it", p)
	}
	if name <= top.last {
		return invalidf("%q is a duplicate or out of order", p)
	}
	top.last = name
	switch en.Kind {
	case KindDir:
		v.stack = append(v.stack, openDir{path: p})
	case KindLink:
		if !LinkAllowed(p, en.Target) {
			return invalidf("link %q -> %q leads out of the root", p, en.Target)
		}
	}
	return nil
}

// LinkAllowed is the rule for links a snapshot records and restores
// (archive's too): the target is relative, stays inside lexically from
// the link's place (files.LinkTarget), and has all its ".." first
// (files.DotDotsFirst says why).
func LinkAllowed(rel, target string) bool {
	return files.LinkTarget("target", rel, target) == nil && files.DotDotsFirst(target)
}
