package archive

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"
	"github.com/ulikunitz/xz"

	"github.com/kilnhq/kiln/internal/files"
)

func readString(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestDecompressFormats(t *testing.T) {
	plain := tarOf(t, dir("cfg/"), file("cfg/a.yml", "a: 1\n"), symlink("cfg/link", "a.yml"), dir("empty/"))
	var zst, xzb bytes.Buffer
	zw, _ := zstd.NewWriter(&zst)
	zw.Write(plain)
	zw.Close()
	xw, _ := xz.NewWriter(&xzb)
	xw.Write(plain)
	xw.Close()
	for _, tc := range []struct {
		archive string
		data    []byte
	}{
		{"a.tar", plain}, {"a.tar.gz", gz(t, plain)}, {"a.tgz", gz(t, plain)},
		{"a.tar.zst", zst.Bytes()}, {"a.tzst", zst.Bytes()}, {"a.tar.xz", xzb.Bytes()}, {"a.txz", xzb.Bytes()},
		{"a.ZIP", zipOf(t, zipItem{"cfg/", fs.ModeDir | 0o755, ""}, zipItem{"cfg/a.yml", 0o644, "a: 1\n"},
			zipItem{"cfg/link", fs.ModeSymlink | 0o777, "a.yml"}, zipItem{"empty/", fs.ModeDir | 0o755, ""})},
	} {
		t.Run(tc.archive, func(t *testing.T) {
			w := newWorld(t)
			writeFile(t, w.root, tc.archive, string(tc.data), 0o644)
			if err := Decompress(t.Context(), w.r, tc.archive, ".", budget(1<<30)); err != nil {
				t.Fatalf("Decompress = %v", err)
			}
			if got := readString(t, filepath.Join(w.root, "cfg/link")); got != "a: 1\n" {
				t.Errorf("cfg/link reads %q", got)
			}
			if fi, err := os.Stat(filepath.Join(w.root, "empty")); err != nil || !fi.IsDir() {
				t.Errorf("empty/ = %v, %v", fi, err)
			}
		})
	}
}

func TestDecompressSingleGz(t *testing.T) {
	w := newWorld(t)
	writeFile(t, w.root, "logs/latest.log.gz", string(gz(t, []byte("line 1\nline 2\n"))), 0o644)
	if err := Decompress(t.Context(), w.r, "logs/latest.log.gz", "logs", budget(1<<30)); err != nil {
		t.Fatal(err)
	}
	if got := readString(t, filepath.Join(w.root, "logs/latest.log")); got != "line 1\nline 2\n" {
		t.Errorf("latest.log = %q", got)
	}
}

// TestDecompressHardLink: a hard link to an earlier file is extracted as
// a copy (never a link: nothing in the tree then shares an inode).
func TestDecompressHardLink(t *testing.T) {
	w := newWorld(t)
	exe := file("bin/tool", strings.Repeat("x", 3<<20)) // streamed, not buffered
	exe.h.Mode = 0o755
	writeFile(t, w.root, "a.tar", string(tarOf(t, exe, file("small", "s"), hardlink("bin/tool2", "bin/tool"), hardlink("small2", "small"))), 0o644)
	if err := Decompress(t.Context(), w.r, "a.tar", ".", budget(1<<30)); err != nil {
		t.Fatal(err)
	}
	for _, pair := range [][2]string{{"bin/tool", "bin/tool2"}, {"small", "small2"}} {
		a, _ := os.Stat(filepath.Join(w.root, pair[0]))
		b, err := os.Stat(filepath.Join(w.root, pair[1]))
		if err != nil || os.SameFile(a, b) || a.Mode() != b.Mode() || a.Size() != b.Size() {
			t.Errorf("%s vs %s: %v %v %v, want a separate copy with the same mode", pair[0], pair[1], a, b, err)
		}
	}
	// The copy counts against the disk limit.
	w2 := newWorld(t)
	writeFile(t, w2.root, "a.tar", string(tarOf(t, exe, hardlink("bin/tool2", "bin/tool"))), 0o644)
	if err := Decompress(t.Context(), w2.r, "a.tar", ".", budget(5<<20)); !errors.Is(err, files.ErrQuota) {
		t.Errorf("Decompress with room for one copy = %v, want ErrQuota", err)
	}
}

func TestDecompressMerge(t *testing.T) {
	w := newWorld(t)
	writeFile(t, w.root, "plugins/keep.yml", "kept", 0o644)
	writeFile(t, w.root, "plugins/replace.yml", "old", 0o600)
	writeFile(t, w.root, "world/level.dat", "old level", 0o644)
	if err := os.Symlink("world", filepath.Join(w.root, "was-a-link")); err != nil {
		t.Fatal(err)
	}
	// A link in the destination pointing outside: replaced, never written through.
	if err := os.Symlink(filepath.Join(w.base, "outside"), filepath.Join(w.root, "escape")); err != nil {
		t.Fatal(err)
	}
	outside := w.outside(t)
	writeFile(t, w.root, "a.tar.gz", string(gz(t, tarOf(t,
		file("plugins/replace.yml", "new"), file("plugins/added.yml", "added"),
		file("was-a-link/x", "x"), file("escape/passwd", "not outside")))), 0o644)
	if err := Decompress(t.Context(), w.r, "a.tar.gz", ".", budget(1<<30)); err != nil {
		t.Fatal(err)
	}
	for rel, want := range map[string]string{
		"plugins/keep.yml": "kept", "plugins/replace.yml": "new", "plugins/added.yml": "added",
		"world/level.dat": "old level", "was-a-link/x": "x", "escape/passwd": "not outside",
	} {
		if got := readString(t, filepath.Join(w.root, rel)); got != want {
			t.Errorf("%s = %q, want %q", rel, got, want)
		}
	}
	for _, rel := range []string{"was-a-link", "escape"} {
		if fi, err := os.Lstat(filepath.Join(w.root, rel)); err != nil || !fi.IsDir() {
			t.Errorf("%s = %v, %v; want a directory in place of the link", rel, fi, err)
		}
	}
	if d := diffSnapshots(outside, w.outside(t)); d != "" {
		t.Errorf("outside changed:\n%s", d)
	}
	if fi, _ := os.Stat(filepath.Join(w.root, "plugins/replace.yml")); fi.Mode().Perm() != 0o644 {
		t.Errorf("replaced file mode = %v, want the archive's 0644", fi.Mode())
	}
}

// TestDecompressFileOverDirectory: refused before anything moves.
func TestDecompressFileOverDirectory(t *testing.T) {
	w := newWorld(t)
	writeFile(t, w.root, "world/level.dat", "level", 0o644)
	writeFile(t, w.root, "a.tar", string(tarOf(t, file("aaa-first.txt", "1"), file("world", "a file"))), 0o644)
	before := snapshot(t, w.root, false)
	if err := Decompress(t.Context(), w.r, "a.tar", ".", budget(1<<30)); !errors.Is(err, files.ErrExists) {
		t.Fatalf("Decompress = %v, want ErrExists", err)
	}
	if d := diffSnapshots(before, snapshot(t, w.root, false)); d != "" {
		t.Errorf("root changed:\n%s", d)
	}
}

func TestDecompressDirectoryModes(t *testing.T) {
	w := newWorld(t)
	ro := dir("ro/")
	ro.h.Mode = 0o555
	none := dir("none/")
	none.h.Mode = 0
	writeFile(t, w.root, "a.tar", string(tarOf(t, ro, file("ro/f", "f"), none, file("none/g", "g"))), 0o644)
	if err := Decompress(t.Context(), w.r, "a.tar", ".", budget(1<<30)); err != nil {
		t.Fatal(err)
	}
	for rel, want := range map[string]fs.FileMode{"ro": 0o755, "none": 0o700} {
		if fi, err := os.Stat(filepath.Join(w.root, rel)); err != nil || fi.Mode().Perm() != want {
			t.Errorf("mode of %s = %v, %v; want %v (owner rwx kept)", rel, fi.Mode(), err, want)
		}
	}
}

func TestDecompressErrors(t *testing.T) {
	w := newWorld(t)
	writeFile(t, w.root, "a.tar", string(tarOf(t, file("x", "x"))), 0o644)
	writeFile(t, w.root, "file", "x", 0o644)
	if err := os.Mkdir(filepath.Join(w.root, "d.tar"), 0o755); err != nil {
		t.Fatal(err)
	}
	cancelled, cancel := context.WithCancel(t.Context())
	cancel()
	for _, tc := range []struct {
		name, archive, dir string
		ctx                context.Context
		check              func(error) bool
	}{
		{"missing archive", "nope.tar", ".", t.Context(), is(files.ErrNotFound)},
		{"archive is a directory", "d.tar", ".", t.Context(), is(files.ErrNotFile)},
		{"dir is a file", "a.tar", "file", t.Context(), is(files.ErrNotDirectory)},
		{"dir missing", "a.tar", "nope", t.Context(), is(files.ErrNotFound)},
		{"unclean path", "./a.tar", ".", t.Context(), isValidation},
		{"cancelled", "a.tar", ".", cancelled, is(context.Canceled)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := snapshot(t, w.root, false)
			if err := Decompress(tc.ctx, w.r, tc.archive, tc.dir, budget(1<<30)); !tc.check(err) {
				t.Fatalf("Decompress(%q, %q) = %v, wrong error", tc.archive, tc.dir, err)
			}
			if d := diffSnapshots(before, snapshot(t, w.root, false)); d != "" {
				t.Errorf("root changed:\n%s", d)
			}
		})
	}
}
