package files

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kilnhq/kiln/internal/quota"
)

// FuzzResolve feeds arbitrary user paths through Clean and the resolver of
// a root planted with escape symlinks (to its parent, to /, to a sibling
// "server", by absolute and relative targets). Invariant: no operation
// ever returns the content of, lists, describes (StatFollow) or creates
// (OpenWrite) anything outside the root.
func FuzzResolve(f *testing.F) {
	for _, s := range []string{
		"", "/", ".", "..", "../outside/secret", "/etc/passwd", "up/outside/secret", "abs/etc/passwd",
		"sib/secret", "a/../../outside/secret", "inner/../up", "up", "./up/./outside", "up//outside//secret",
		"%2e%2e/secret", "up/outside/new", "dirlink/new", "..\\outside\\secret", "\x00", "loop/loop/loop", "dirlink/../up", strings.Repeat("a/", 100),
	} {
		f.Add(s)
	}
	base := f.TempDir()
	secret := "S3CRET-OUTSIDE-THE-ROOT"
	must := func(err error) {
		if err != nil {
			f.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(base, "outside"), 0o755))
	must(os.WriteFile(filepath.Join(base, "outside", "secret"), []byte(secret), 0o644))
	must(os.MkdirAll(filepath.Join(base, "other-server"), 0o755))
	must(os.WriteFile(filepath.Join(base, "other-server", "secret"), []byte(secret), 0o644))
	// The outside files carry a time nothing inside has: a stat that
	// reached one would show it.
	outsideTime := time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC)
	for _, d := range []string{"outside", "other-server"} {
		must(os.Chtimes(filepath.Join(base, d, "secret"), outsideTime, outsideTime))
		must(os.Chtimes(filepath.Join(base, d), outsideTime, outsideTime))
	}
	root := filepath.Join(base, "root")
	must(os.MkdirAll(filepath.Join(root, "inner"), 0o755))
	must(os.WriteFile(filepath.Join(root, "inner", "ok.txt"), []byte("inside"), 0o644))
	must(os.Symlink("..", filepath.Join(root, "up")))
	must(os.Symlink("/", filepath.Join(root, "abs")))
	must(os.Symlink(filepath.Join(base, "other-server"), filepath.Join(root, "sib")))
	must(os.Symlink("../other-server/secret", filepath.Join(root, "inner", "rel-escape")))
	must(os.Symlink("loop", filepath.Join(root, "loop")))
	must(os.Symlink("inner", filepath.Join(root, "dirlink")))
	r, err := Open(root)
	must(err)
	f.Cleanup(func() { r.Close() })
	disk := quota.NewAccount(1<<30, quota.TempNames{})

	f.Fuzz(func(t *testing.T, in string) {
		rel, err := Clean("path", in)
		if err != nil {
			return
		}
		if strings.HasPrefix(rel, "/") || rel == ".." || strings.HasPrefix(rel, "../") || strings.Contains(rel, "/../") {
			t.Fatalf("Clean(%q) = %q escapes syntactically", in, rel)
		}
		if b, err := r.ReadFile(rel, 1<<16); err == nil && bytes.Contains(b, []byte(secret)) {
			t.Fatalf("ReadFile(%q) read a file outside the root", in)
		}
		if ents, err := r.List(rel); err == nil {
			for _, e := range ents {
				if e.Name == "secret" || e.Name == "passwd" || e.Name == "other-server" {
					t.Fatalf("List(%q) listed %q from outside the root", in, e.Name)
				}
			}
		}
		if e, err := r.Stat(rel); err == nil && e.Name == "secret" {
			t.Fatalf("Stat(%q) reached outside the root", in)
		}
		if fh, _, err := r.OpenRead(rel); err == nil {
			b := make([]byte, 64)
			n, _ := fh.Read(b)
			fh.Close()
			if bytes.Contains(b[:n], []byte(secret)) {
				t.Fatalf("OpenRead(%q) opened a file outside the root", in)
			}
		}
		m, err := NewMatcher("pattern", "secret")
		if err == nil && rel == "." {
			if res, _, _ := r.Search(context.Background(), rel, m); len(res) > 0 {
				t.Fatalf("Search found %v outside the root", res)
			}
		}
		// The SFTP seam: stat through links, and a create (then removed)
		// never reach or make anything outside.
		if e, err := r.StatFollow(rel); err == nil && e.ModTime.Equal(outsideTime) {
			t.Fatalf("StatFollow(%q) described a file outside the root", in)
		}
		if h, err := r.OpenWrite(rel, WriteFlags{Create: true, Exclusive: true}, disk); err == nil {
			h.Close()
			_ = r.RemoveFile(rel, nil)
		}
		for _, dir := range []string{filepath.Join(base, "outside"), filepath.Join(base, "other-server")} {
			if ents, _ := os.ReadDir(dir); len(ents) != 1 {
				t.Fatalf("after OpenWrite(%q), %s holds %d entries, want only the secret", in, dir, len(ents))
			}
		}
	})
}
