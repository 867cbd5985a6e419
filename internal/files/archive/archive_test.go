package archive

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kilnhq/kiln/internal/files"
	"github.com/kilnhq/kiln/internal/quota"
	"github.com/kilnhq/kiln/internal/validate"
)

// world is a temporary directory laid out like a node: the server root
// under test, a sibling server and a directory outside both, so a test can
// check that nothing but the root changed.
type world struct {
	base string      // contains everything below
	root string      // base/servers/srv: the server's root
	r    *files.Root // opened on root
}

func newWorld(t *testing.T) *world {
	t.Helper()
	base := t.TempDir()
	w := &world{base: base, root: filepath.Join(base, "servers", "srv")}
	writeFile(t, base, "servers/other/server.properties", "motd=other\n", 0o644)
	writeFile(t, base, "servers/other/world/level.dat", "other world", 0o644)
	writeFile(t, base, "outside/passwd", "root:x:0:0::/root:/bin/sh\n", 0o644)
	writeFile(t, base, "outside/cron.d/job", "* * * * * root true\n", 0o644)
	writeFile(t, base, "etc/passwd", "fake passwd\n", 0o644)
	if err := os.MkdirAll(w.root, 0o755); err != nil {
		t.Fatal(err)
	}
	r, err := files.Open(w.root)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	w.r = r
	return w
}

func writeFile(t *testing.T, dir, rel, content string, perm fs.FileMode) {
	t.Helper()
	p := filepath.Join(dir, filepath.FromSlash(rel))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), perm); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, perm); err != nil {
		t.Fatal(err)
	}
}

// snapshot describes every object under dir (not following symlinks):
// kind and permission bits, content hash, link target and, with times,
// modification times. Paths are relative to dir.
func snapshot(t *testing.T, dir string, times bool) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		desc := fi.Mode().String()
		switch {
		case fi.Mode().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			sum := sha256.Sum256(b)
			desc += " " + hex.EncodeToString(sum[:8])
		case fi.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			desc += " -> " + target
		}
		if times {
			desc += " " + fi.ModTime().Format(time.RFC3339Nano)
		}
		out[filepath.ToSlash(rel)] = desc
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// outside is the snapshot of everything in the world but the root, with
// times: what no operation may change.
func (w *world) outside(t *testing.T) map[string]string {
	t.Helper()
	all := snapshot(t, w.base, true)
	for k := range all {
		if k == "servers/srv" || strings.HasPrefix(k, "servers/srv/") {
			delete(all, k)
		}
	}
	return all
}

func diffSnapshots(before, after map[string]string) string {
	var lines []string
	for k, v := range before {
		if a, ok := after[k]; !ok {
			lines = append(lines, "- "+k+" "+v)
		} else if a != v {
			lines = append(lines, "~ "+k+" "+v+" => "+a)
		}
	}
	for k, v := range after {
		if _, ok := before[k]; !ok {
			lines = append(lines, "+ "+k+" "+v)
		}
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}

// sampleTree writes a tree with modes, symlinks, an empty directory, a
// long and a non-ASCII name into dir (host path).
func sampleTree(t *testing.T, dir string) {
	t.Helper()
	writeFile(t, dir, "server.properties", "motd=hello\nmax-players=20\n", 0o644)
	writeFile(t, dir, "start.sh", "#!/bin/sh\nexec java -jar server.jar\n", 0o755)
	writeFile(t, dir, "secret.txt", "token", 0o600)
	writeFile(t, dir, "empty.txt", "", 0o644)
	writeFile(t, dir, "world/region/r.0.0.mca", strings.Repeat("chunk data ", 50000), 0o644)
	writeFile(t, dir, "world/level.dat", "\x0a\x00\x00level", 0o644)
	writeFile(t, dir, "plugins/Äpfel/конфиг.yml", "enabled: true\n", 0o640)
	long := strings.Repeat("long-directory-name/", 8) + "file-with-a-rather-long-name.yml"
	writeFile(t, dir, long, "deep\n", 0o644)
	if err := os.MkdirAll(filepath.Join(dir, "logs", "empty"), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(dir, "logs", "empty"), 0o750); err != nil {
		t.Fatal(err)
	}
	for link, target := range map[string]string{
		"current-world": "world",
		"world/props":   "../server.properties",
		"dangling":      "missing/file",
	} {
		if err := os.Symlink(target, filepath.Join(dir, link)); err != nil {
			t.Fatal(err)
		}
	}
	// Kiln's own temporary files are never archived.
	writeFile(t, dir, quota.TempPrefix+"0123456789abcdef", "partial write", 0o644)
}

func TestRoundTrip(t *testing.T) {
	for _, format := range []Format{TarGz, Zip, TarZst} {
		t.Run(string(format), func(t *testing.T) {
			w := newWorld(t)
			sampleTree(t, filepath.Join(w.root, "src"))
			want := snapshot(t, filepath.Join(w.root, "src"), false)
			delete(want, quota.TempPrefix+"0123456789abcdef")
			delete(want, ".")
			outside := w.outside(t)

			e, err := Compress(t.Context(), w.r, "src", []string{"src"}, format, budget(1<<30))
			if err != nil {
				t.Fatalf("Compress = %v", err)
			}
			if !strings.HasPrefix(e.Name, "archive-") || !strings.HasSuffix(e.Name, "."+string(format)) || !e.IsFile() {
				t.Fatalf("Compress = %+v, want a file archive-*.%s", e, format)
			}
			if err := os.Mkdir(filepath.Join(w.root, "dst"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := Decompress(t.Context(), w.r, "src/"+e.Name, "dst", budget(1<<30)); err != nil {
				t.Fatalf("Decompress = %v", err)
			}
			got := snapshot(t, filepath.Join(w.root, "dst"), false)
			delete(got, ".")
			if d := diffSnapshots(want, got); d != "" {
				t.Errorf("extracted tree differs from the original:\n%s", d)
			}
			if d := diffSnapshots(outside, w.outside(t)); d != "" {
				t.Errorf("outside the root changed:\n%s", d)
			}
		})
	}
}

// TestTarGzIsPlainGzip reads Compress's tar.gz with the standard library:
// pgzip's output is an ordinary gzip stream any tool reads.
func TestTarGzIsPlainGzip(t *testing.T) {
	w := newWorld(t)
	sampleTree(t, w.root)
	e, err := Compress(t.Context(), w.r, ".", []string{"world", "server.properties"}, TarGz, budget(1<<30))
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(filepath.Join(w.root, e.Name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	var names []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
	}
	want := []string{"server.properties", "world/", "world/level.dat", "world/props", "world/region/", "world/region/r.0.0.mca"}
	if !slices.Equal(names, want) {
		t.Errorf("entries = %q, want %q", names, want)
	}
}

func TestCompressNames(t *testing.T) {
	w := newWorld(t)
	sampleTree(t, w.root)
	now := time.Date(2026, 11, 22, 10, 15, 3, 0, time.UTC)
	var got []string
	for range 3 {
		e, err := compress(t.Context(), w.r, "world", []string{"world/level.dat"}, TarGz, budget(1<<30), now)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, e.Name)
	}
	want := []string{"archive-2026-11-22T10-15-03Z.tar.gz", "archive-2026-11-22T10-15-03Z-2.tar.gz", "archive-2026-11-22T10-15-03Z-3.tar.gz"}
	if !slices.Equal(got, want) {
		t.Errorf("archive names = %q, want %q", got, want)
	}
}

func TestCompressErrors(t *testing.T) {
	for _, tc := range []struct {
		name   string
		dir    string
		names  []string
		format Format
		free   int64
		check  func(error) bool
	}{
		{"outside dir", "world", []string{"plugins"}, TarGz, 1 << 30, isValidation},
		{"unclean name", ".", []string{"world/../plugins"}, TarGz, 1 << 30, isValidation},
		{"no names", ".", nil, TarGz, 1 << 30, isValidation},
		{"bad format", ".", []string{"world"}, "rar", 1 << 30, isValidation},
		{"missing", ".", []string{"nope"}, TarGz, 1 << 30, is(files.ErrNotFound)},
		{"dir is a file", "server.properties", []string{"server.properties"}, TarGz, 1 << 30, is(files.ErrNotDirectory)},
		{"quota tar.gz", ".", []string{"world"}, TarGz, 100, is(files.ErrQuota)},
		{"quota zip", ".", []string{"world"}, Zip, 100, is(files.ErrQuota)},
		{"quota tar.zst", ".", []string{"world"}, TarZst, 100, is(files.ErrQuota)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t)
			sampleTree(t, w.root)
			before := snapshot(t, w.root, false)
			outside := w.outside(t)
			_, err := Compress(t.Context(), w.r, tc.dir, tc.names, tc.format, budget(tc.free))
			if !tc.check(err) {
				t.Fatalf("Compress(%q, %q) = %v, wrong error", tc.dir, tc.names, err)
			}
			if d := diffSnapshots(before, snapshot(t, w.root, false)); d != "" {
				t.Errorf("root changed:\n%s", d)
			}
			if d := diffSnapshots(outside, w.outside(t)); d != "" {
				t.Errorf("outside changed:\n%s", d)
			}
		})
	}
}

func TestCompressCancelled(t *testing.T) {
	w := newWorld(t)
	sampleTree(t, w.root)
	before := snapshot(t, w.root, false)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := Compress(ctx, w.r, ".", []string{"world"}, TarGz, budget(1<<30))
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Compress = %v, want context.Canceled", err)
	}
	if d := diffSnapshots(before, snapshot(t, w.root, false)); d != "" {
		t.Errorf("root changed:\n%s", d)
	}
}

// TestCompressDoesNotFollowLinks archives a link to a directory outside
// the root: nothing of what it points to is stored, nor the link itself
// (links that stay inside: links_test.go).
func TestCompressDoesNotFollowLinks(t *testing.T) {
	w := newWorld(t)
	if err := os.Symlink(filepath.Join(w.base, "outside"), filepath.Join(w.root, "escape")); err != nil {
		t.Fatal(err)
	}
	e, err := Compress(t.Context(), w.r, ".", []string{"escape"}, TarGz, budget(1<<30))
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(w.root, e.Name))
	if err != nil {
		t.Fatal(err)
	}
	entries := tarEntries(t, data)
	if len(entries) != 0 {
		t.Errorf("entries = %+v, want none", entries)
	}
}

func tarEntries(t *testing.T, gz []byte) []*tar.Header {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	var out []*tar.Header
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, h)
	}
}

func isValidation(err error) bool {
	_, ok := errors.AsType[*validate.Error](err)
	return ok
}

func is(target error) func(error) bool {
	return func(err error) bool { return errors.Is(err, target) }
}

func isEntry(err error) bool {
	_, ok := errors.AsType[*EntryError](err)
	return ok && errors.Is(err, ErrUnsupported)
}

func TestParseFormat(t *testing.T) {
	for in, want := range map[string]Format{"": TarGz, "tar.gz": TarGz, "zip": Zip, "tar.zst": TarZst} {
		if got, err := ParseFormat("format", in); err != nil || got != want {
			t.Errorf("ParseFormat(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"tgz", "rar", "TAR.GZ", "tar.xz"} {
		if _, err := ParseFormat("format", in); !isValidation(err) {
			t.Errorf("ParseFormat(%q) = %v, want a validation error", in, err)
		}
	}
}

func TestKindOf(t *testing.T) {
	for _, tc := range []struct {
		name string
		kind kind
		stem string
	}{
		{"a.zip", kindZip, "a"}, {"plugin.JAR", kindZip, "plugin"}, {"a.tar", kindTar, "a"},
		{"a.tar.gz", kindTarGz, "a"}, {"a.tgz", kindTarGz, "a"}, {"a.tar.zst", kindTarZst, "a"},
		{"a.tzst", kindTarZst, "a"}, {"a.tar.xz", kindTarXz, "a"}, {"a.txz", kindTarXz, "a"},
		{"latest.log.gz", kindGz, "latest.log"}, {".gz", kindNone, ""}, {"a.rar", kindNone, ""},
		{"a.7z", kindNone, ""}, {"a.xz", kindNone, ""}, {"noext", kindNone, ""},
	} {
		if k, stem := kindOf(tc.name); k != tc.kind || stem != tc.stem {
			t.Errorf("kindOf(%q) = %d, %q; want %d, %q", tc.name, k, stem, tc.kind, tc.stem)
		}
	}
}

func ExampleEntryError() {
	err := error(&EntryError{Name: "../../etc/passwd", Reason: "contains a \"..\" segment"})
	fmt.Println(err, errors.Is(err, ErrUnsupported))
	// Output: archive entry "../../etc/passwd" contains a ".." segment true
}
