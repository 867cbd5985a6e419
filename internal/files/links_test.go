package files

import (
	"os"
	"path/filepath"
	"testing"
)

// TestLinksJudgedThroughTheTree: a link target is checked against the
// tree it lives in (its own directory's links and the links its target
// passes through), not lexically; moves re-check the links they carry;
// a chain of links fine one by one is refused together.
func TestLinksJudgedThroughTheTree(t *testing.T) {
	r, dir := newRoot(t)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(dir, "deep/er"), 0o755))
	must(os.MkdirAll(filepath.Join(dir, "w/a"), 0o755))
	must(os.Symlink(".", filepath.Join(dir, "self"))) // planted: leads to the root itself

	for _, c := range []struct {
		name, target, rel string
		ok                bool
	}{
		{"plain inside", "deep/er", "d", true},
		{"up to the root from deep", "../..", "deep/er/u", true},
		{"through two links, still inside", "d/u", "y", true},
		// "d/u/.." reads as "d", but d/u is the root: its ".." is outside.
		{"a chain that leads out", "d/u/..", "z", false},
		// self/x lies in the root: its ".." is the root's parent.
		{"its own directory is a link", "..", "self/x", false},
		{"lexically out", "../x", "top", false},
		{"absolute", "/etc/passwd", "abs", false},
		{"dangling, then out", "missing/../..", "dang", false},
		{"dangling inside", "missing/file", "dang2", true},
	} {
		err := r.Symlink(c.target, c.rel)
		if (err == nil) != c.ok {
			t.Errorf("%s: Symlink(%q, %q) = %v, want ok=%v", c.name, c.target, c.rel, err, c.ok)
		}
		if err != nil && !isValidation(err) {
			t.Errorf("%s: refusal is %T %v, want a validation error", c.name, err, err)
		}
	}

	// A link whose relative target is fine where it is, moved where it
	// is not: refused, alone or inside a moved directory.
	must(r.Symlink("../../deep", "w/a/l")) // w/a/../../deep = deep
	if err := r.Rename("w/a/l", "l2"); !isValidation(err) {
		t.Errorf("Rename of a link to where it leads out = %v, want a validation error", err)
	}
	if err := r.Rename("w/a", "a2"); !isValidation(err) {
		t.Errorf("Rename of a directory holding such a link = %v, want a validation error", err)
	}
	if err := r.Rename("w", "deep/w"); err != nil {
		t.Errorf("Rename keeping the link inside = %v", err) // deep/w/a/../../deep = deep/deep
	}
	if _, err := os.Lstat(filepath.Join(dir, "deep/w/a/l")); err != nil {
		t.Errorf("the moved link: %v", err)
	}
	// A move into a directory reached through a link is judged from the
	// real place: self/… is the root.
	must(r.Symlink("../er", "deep/sib"))
	if err := r.Rename("deep/sib", "self/sib"); !isValidation(err) {
		t.Errorf("Rename through a link to the root = %v, want a validation error", err)
	}
}

// TestStagedLinksFromTheRealDestination: a Stager whose destination is
// reached through a link judges ".." from where it really is.
func TestStagedLinksFromTheRealDestination(t *testing.T) {
	r, dir := newRoot(t)
	if err := os.Symlink(".", filepath.Join(dir, "here")); err != nil {
		t.Fatal(err)
	}
	s, err := r.Stage("here", budget(1<<20))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Symlink("../x", "l"); !isValidation(err) {
		t.Errorf("staged link ../x into a destination that is the root = %v, want a validation error", err)
	}
	if err := s.Symlink("x", "l2"); err != nil {
		t.Errorf("staged link inside = %v", err)
	}
}
