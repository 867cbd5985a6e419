package node

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestOwnTree: every entry becomes the user's, links themselves and not
// their targets, and a file with a second name (which may be outside the
// root) is left.
func TestOwnTree(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("SKIP OWNTREE: chown needs root")
	}
	base := t.TempDir()
	root, outside := filepath.Join(base, "root"), filepath.Join(base, "outside")
	for _, d := range []string{root + "/a/b/c", outside} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(root+"/a/b/c/f", []byte("x"), 0o644)
	os.WriteFile(outside+"/secret", []byte("host"), 0o600)
	os.Link(outside+"/secret", root+"/hard")
	os.Symlink(outside+"/secret", root+"/link")
	os.Symlink(outside, root+"/dirlink")
	const uid, gid = 220001, 220002
	changed, skipped, err := OwnTree(root, uid, gid)
	if err != nil || skipped != 1 || changed != 7 {
		t.Errorf("OwnTree = %d changed, %d skipped, %v; want 7, 1, nil", changed, skipped, err)
	}
	owner := func(p string) (uint32, uint32) {
		var st syscall.Stat_t
		if err := syscall.Lstat(p, &st); err != nil {
			t.Fatal(err)
		}
		return st.Uid, st.Gid
	}
	for _, p := range []string{"", "/a", "/a/b", "/a/b/c", "/a/b/c/f", "/link", "/dirlink"} {
		if u, g := owner(root + p); u != uid || g != gid {
			t.Errorf("%s: %d:%d, want %d:%d", p, u, g, uid, gid)
		}
	}
	for _, p := range []string{outside, outside + "/secret"} {
		if u, _ := owner(p); u != 0 {
			t.Errorf("%s outside the root became %d's", p, u)
		}
	}
	if changed, _, _ := OwnTree(root, uid, gid); changed != 0 {
		t.Errorf("a second OwnTree changed %d entries", changed)
	}
}
