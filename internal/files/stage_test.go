package files

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/kilnhq/kiln/internal/quota"
	"github.com/kilnhq/kiln/internal/validate"
)

// newStager stages into dest of a fresh root; the Stager is closed at the
// end of the test.
func newStager(t *testing.T, dest string, free int64) (*Stager, *Root, string) {
	t.Helper()
	r, dir := newRoot(t)
	if err := os.MkdirAll(filepath.Join(dir, dest), 0o755); err != nil {
		t.Fatal(err)
	}
	s, err := r.Stage(dest, budget(free))
	if err != nil {
		t.Fatalf("Stage(%q) = %v", dest, err)
	}
	t.Cleanup(func() { s.Close() })
	return s, r, dir
}

func readHost(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestStagerCreateCommitClose(t *testing.T) {
	s, r, dir := newStager(t, "plugins", 1<<20)
	if !strings.HasPrefix(s.Dir(), "plugins/"+quota.TempPrefix+"stage-") {
		t.Errorf("Dir() = %q, want a temporary name in plugins", s.Dir())
	}
	if err := s.Mkdir("cfg", 0o750); err != nil {
		t.Fatal(err)
	}
	if n, err := s.Create("cfg/a.yml", strings.NewReader("a: 1\n"), 0o600); err != nil || n != 5 {
		t.Fatalf("Create = %d, %v", n, err)
	}
	// Parents are made as needed; setuid is dropped.
	if _, err := s.Create("deep/er/tool", strings.NewReader("#!/bin/sh\n"), 0o4755); err != nil {
		t.Fatal(err)
	}
	if err := s.Symlink("../cfg/a.yml", "deep/link"); err != nil {
		t.Fatal(err)
	}
	// Nothing shows at the destination before Commit.
	if _, err := r.Stat("plugins/cfg"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Stat(plugins/cfg) before Commit = %v, want ErrNotFound", err)
	}
	// Walk does not see the staging directory.
	if err := r.Walk(t.Context(), "plugins", func(rel string, _ Entry, _ Opener) error {
		if rel != "plugins" {
			t.Errorf("Walk saw %q before Commit", rel)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	f, err := s.Open("cfg/a.yml")
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := io.ReadAll(f); string(b) != "a: 1\n" {
		t.Errorf("Open(cfg/a.yml) reads %q", b)
	}
	f.Close()
	if _, err := s.Open("deep/link"); !errors.Is(err, ErrNotFile) {
		t.Errorf("Open(symlink) = %v, want ErrNotFile", err)
	}
	if got := s.Written(); got != 15 {
		t.Errorf("Written() = %d, want 15", got)
	}
	if err := s.Commit(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := readHost(t, filepath.Join(dir, "plugins/deep/link")); got != "a: 1\n" {
		t.Errorf("deep/link reads %q", got)
	}
	for rel, want := range map[string]fs.FileMode{
		"plugins/cfg": fs.ModeDir | 0o750, "plugins/cfg/a.yml": 0o600, "plugins/deep/er/tool": 0o755,
	} {
		if fi, err := os.Lstat(filepath.Join(dir, rel)); err != nil || fi.Mode() != want {
			t.Errorf("mode of %s = %v, %v; want %v", rel, fi.Mode(), err, want)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close = %v", err)
	}
	if ents, _ := os.ReadDir(filepath.Join(dir, "plugins")); len(ents) != 2 {
		t.Errorf("plugins holds %v after Close, want cfg and deep (no staging directory)", ents)
	}
}

func TestStagerCloseWithoutCommit(t *testing.T) {
	s, _, dir := newStager(t, ".", 1<<20)
	if _, err := s.Create("a/b/c", strings.NewReader("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := s.Mkdir("ro", 0o500); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("root holds %v after Close without Commit, want nothing", ents)
	}
}

func TestStageErrors(t *testing.T) {
	r, dir := newRoot(t)
	write(t, dir, "file", "x")
	if err := os.Symlink(t.TempDir(), filepath.Join(dir, "out")); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		dest string
		want error
	}{{"nope", ErrNotFound}, {"file", ErrNotDirectory}, {"out", ErrNotFound}} {
		if s, err := r.Stage(tc.dest, budget(1)); !errors.Is(err, tc.want) {
			t.Errorf("Stage(%q) = %v, want %v", tc.dest, err, tc.want)
			if s != nil {
				s.Close()
			}
		}
	}
}

// TestStagerQuota: the reservation is the whole operation's, counted on
// what entries cost as they are written; the write that would pass it
// fails and leaves nothing.
func TestStagerQuota(t *testing.T) {
	s, _, dir := newStager(t, ".", 5*quota.BlockSize)
	if _, err := s.Create("a", strings.NewReader("123456"), 0o644); err != nil { // 1 block
		t.Fatal(err)
	}
	if _, err := s.Create("b", bytes.NewReader(make([]byte, 5*quota.BlockSize)), 0o644); !errors.Is(err, ErrQuota) {
		t.Fatalf("Create past the limit = %v, want ErrQuota", err)
	}
	if _, err := os.Lstat(filepath.Join(dir, s.Dir(), "b")); !os.IsNotExist(err) {
		t.Errorf("partial file b left behind: %v", err)
	}
	// A stream that passes the limit midway stops there.
	pr, pw := io.Pipe()
	go func() {
		pw.Write(make([]byte, 2*quota.BlockSize))
		pw.Write(make([]byte, 2*quota.BlockSize))
		pw.Write([]byte("5"))
		pw.Close()
	}()
	if _, err := s.Create("c", pr, 0o644); !errors.Is(err, ErrQuota) {
		t.Fatalf("streamed Create past the limit = %v, want ErrQuota", err)
	}
	pr.Close()
	if got := s.Written(); got != 6 {
		t.Errorf("Written() = %d, want 6 (only what stayed)", got)
	}
	// Directories and links cost a block each.
	if err := s.Mkdir("d", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := s.Symlink("a", "l"); err != nil {
		t.Fatal(err)
	}
	if got, want := s.res.Change(), int64(3*quota.BlockSize); got != want {
		t.Errorf("recorded change = %d, want %d (a file, a directory, a link)", got, want)
	}
	if _, err := s.Create("e", bytes.NewReader(make([]byte, 5000)), 0o644); err != nil { // 2 blocks: all 5 used
		t.Errorf("Create within what is left = %v", err)
	}
	if err := s.Mkdir("f", 0o755); !errors.Is(err, ErrQuota) {
		t.Errorf("Mkdir past the limit = %v, want ErrQuota", err)
	}
}

// TestStagerNeverThroughSymlinks plants links in the staging tree (as a
// user with access to the root could) and checks that nothing is created
// through them.
func TestStagerNeverThroughSymlinks(t *testing.T) {
	s, _, dir := newStager(t, ".", 1<<20)
	outside := t.TempDir()
	write(t, outside, "victim", "untouched")
	stage := filepath.Join(dir, s.Dir())
	if err := os.Symlink(outside, filepath.Join(stage, "out")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(outside, "victim"), filepath.Join(stage, "victim")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc", filepath.Join(stage, "etc")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Create("out/new", strings.NewReader("evil"), 0o644); !errors.Is(err, ErrSymlink) {
		t.Errorf("Create through a symlinked directory = %v, want ErrSymlink", err)
	}
	if _, err := s.Create("out/deeper/new", strings.NewReader("evil"), 0o644); !errors.Is(err, ErrSymlink) {
		t.Errorf("Create below a symlinked directory = %v, want ErrSymlink", err)
	}
	if _, err := s.Create("victim", strings.NewReader("evil"), 0o644); !errors.Is(err, ErrExists) {
		t.Errorf("Create over a symlink = %v, want ErrExists", err)
	}
	if err := s.Mkdir("out", 0o755); !errors.Is(err, ErrSymlink) {
		t.Errorf("Mkdir over a symlink = %v, want ErrSymlink", err)
	}
	if err := s.Mkdir("etc/cron.d", 0o755); !errors.Is(err, ErrSymlink) {
		t.Errorf("Mkdir through a symlink = %v, want ErrSymlink", err)
	}
	if err := s.Symlink("x", "out/link"); !errors.Is(err, ErrSymlink) {
		t.Errorf("Symlink through a symlink = %v, want ErrSymlink", err)
	}
	if _, err := s.Open("out/victim"); !errors.Is(err, ErrSymlink) {
		t.Errorf("Open through a symlink = %v, want ErrSymlink", err)
	}
	if got := readHost(t, filepath.Join(outside, "victim")); got != "untouched" {
		t.Errorf("outside victim = %q", got)
	}
	if ents, _ := os.ReadDir(outside); len(ents) != 1 {
		t.Errorf("outside holds %v, want only victim", ents)
	}
	// A file where a directory is needed.
	if _, err := s.Create("f", strings.NewReader("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Create("f/g", strings.NewReader("x"), 0o644); !errors.Is(err, ErrNotDirectory) {
		t.Errorf("Create under a file = %v, want ErrNotDirectory", err)
	}
}

func TestStagerRefusesBadNames(t *testing.T) {
	s, _, _ := newStager(t, "srv", 1<<20)
	for _, rel := range []string{".", "", "../x", "a/../b", "/abs", "a//b", "a\x00b"} {
		if _, err := s.Create(rel, strings.NewReader("x"), 0o644); !errors.Is(err, errUnclean) {
			t.Errorf("Create(%q) = %v, want errUnclean", rel, err)
		}
		if err := s.Mkdir(rel, 0o755); !errors.Is(err, errUnclean) {
			t.Errorf("Mkdir(%q) = %v, want errUnclean", rel, err)
		}
	}
	// Link targets are judged from the entry's final place: srv/a/l.
	for _, target := range []string{"/etc/passwd", "../../../x", "../x/../../../y", ""} {
		err := s.Symlink(target, "a/l")
		if _, ok := errors.AsType[*validate.Error](err); !ok {
			t.Errorf("Symlink(%q) = %v, want a validation error", target, err)
		}
	}
	if err := s.Symlink("../../server.properties", "a/l"); err != nil {
		t.Errorf("Symlink to a file of the root = %v", err)
	}
}

// TestStagerCacheBound extracts more directories than the descriptor
// cache holds, from several goroutines, with a cache of 4, and a deep
// path: the cache stays bounded and every file lands where it should.
func TestStagerCacheBound(t *testing.T) {
	s, _, dir := newStager(t, ".", 1<<30)
	const bound = 4
	s.stage = newDirCache(s.sfd, bound, nil)
	fdsBefore := openFDs(t)
	const dirs, workers = 300, 6
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			for i := w; i < dirs; i += workers {
				rel := fmt.Sprintf("d%d/e%d/f%d", i%7, i%13, i)
				if i%3 == 0 {
					if err := s.Mkdir(rel, 0o755); err != nil {
						errs <- err
						return
					}
				}
				if _, err := s.Create(rel+"/file", strings.NewReader(rel), 0o644); err != nil {
					errs <- err
					return
				}
				if got := s.stage.open(); got > bound {
					errs <- fmt.Errorf("cache holds %d directories, bound %d", got, bound)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	deep := strings.Repeat("x/", 40) + "leaf"
	if _, err := s.Create(deep, strings.NewReader("deep"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := s.stage.open(); got > bound {
		t.Errorf("cache holds %d directories after a deep path, bound %d", got, bound)
	}
	if got := openFDs(t); got > fdsBefore+bound {
		t.Errorf("%d descriptors open, %d before: the cache leaks", got, fdsBefore)
	}
	if err := s.Commit(t.Context()); err != nil {
		t.Fatal(err)
	}
	for i := range dirs {
		rel := fmt.Sprintf("d%d/e%d/f%d", i%7, i%13, i)
		if got := readHost(t, filepath.Join(dir, rel, "file")); got != rel {
			t.Fatalf("%s/file = %q", rel, got)
		}
	}
	if got := readHost(t, filepath.Join(dir, deep)); got != "deep" {
		t.Errorf("%s = %q", deep, got)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if got := openFDs(t); got > fdsBefore {
		t.Errorf("%d descriptors open after Close, %d before", got, fdsBefore)
	}
}

// TestStagerDefaultBound: more directories than stageCacheMax keep at most
// stageCacheMax descriptors.
func TestStagerDefaultBound(t *testing.T) {
	s, _, _ := newStager(t, ".", 1<<30)
	for i := range stageCacheMax + 50 {
		if _, err := s.Create(fmt.Sprintf("d%d/f", i), strings.NewReader("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if got := s.stage.open(); got != stageCacheMax {
		t.Errorf("cache holds %d directories, want the bound %d", got, stageCacheMax)
	}
}

func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

func TestStagerSync(t *testing.T) {
	s, _, dir := newStager(t, ".", 1<<20)
	if _, err := s.Create("a", strings.NewReader("synced"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := s.Sync(); err != nil {
		t.Fatalf("Sync = %v", err)
	}
	if got := readHost(t, filepath.Join(dir, s.Dir(), "a")); got != "synced" {
		t.Errorf("a = %q after Sync", got)
	}
}

// TestStagerCommitMerge: files and links are replaced in one rename, a
// link in the way of a directory is replaced (never followed), existing
// directories are merged, and a file over a directory refuses the whole
// commit before anything moves.
func TestStagerCommitMerge(t *testing.T) {
	s, _, dir := newStager(t, ".", 1<<20)
	outside := t.TempDir()
	write(t, outside, "passwd", "untouched")
	write(t, dir, "keep/old.txt", "kept")
	write(t, dir, "keep/replace.txt", "old")
	write(t, dir, "file-to-dir", "a file")
	if err := os.Symlink(outside, filepath.Join(dir, "link-to-dir")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(outside, "passwd"), filepath.Join(dir, "link-to-file")); err != nil {
		t.Fatal(err)
	}
	for _, rel := range []string{"keep/replace.txt", "keep/new/x", "file-to-dir/x", "link-to-dir/passwd", "link-to-file", "fresh/y"} {
		if _, err := s.Create(rel, strings.NewReader("new "+rel), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Commit(t.Context()); err != nil {
		t.Fatal(err)
	}
	for rel, want := range map[string]string{
		"keep/old.txt": "kept", "keep/replace.txt": "new keep/replace.txt", "keep/new/x": "new keep/new/x",
		"file-to-dir/x": "new file-to-dir/x", "link-to-dir/passwd": "new link-to-dir/passwd",
		"link-to-file": "new link-to-file", "fresh/y": "new fresh/y",
	} {
		if got := readHost(t, filepath.Join(dir, rel)); got != want {
			t.Errorf("%s = %q, want %q", rel, got, want)
		}
	}
	for _, rel := range []string{"link-to-dir", "link-to-file"} {
		if fi, _ := os.Lstat(filepath.Join(dir, rel)); fi.Mode()&fs.ModeSymlink != 0 {
			t.Errorf("%s is still a symlink", rel)
		}
	}
	if got := readHost(t, filepath.Join(outside, "passwd")); got != "untouched" {
		t.Errorf("outside passwd = %q", got)
	}

	// A file over a directory: ErrExists, and nothing moved (the other
	// entry, first in order, included).
	s2, err := s.r.Stage(".", budget(1<<20))
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	for _, rel := range []string{"aaa", "keep"} {
		if _, err := s2.Create(rel, strings.NewReader("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := s2.Commit(t.Context()); !errors.Is(err, ErrExists) {
		t.Fatalf("Commit of a file over a directory = %v, want ErrExists", err)
	}
	if _, err := os.Lstat(filepath.Join(dir, "aaa")); !os.IsNotExist(err) {
		t.Errorf("aaa moved although the commit was refused: %v", err)
	}
	if fi, err := os.Lstat(filepath.Join(dir, "keep")); err != nil || !fi.IsDir() {
		t.Errorf("keep = %v, %v; want the directory untouched", fi, err)
	}
	// A cancelled commit moves nothing either.
	s3, err := s.r.Stage(".", budget(1<<20))
	if err != nil {
		t.Fatal(err)
	}
	defer s3.Close()
	if _, err := s3.Create("bbb", strings.NewReader("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := s3.Commit(ctx); err == nil {
		t.Fatal("Commit with a cancelled context succeeded")
	}
	if _, err := os.Lstat(filepath.Join(dir, "bbb")); !os.IsNotExist(err) {
		t.Errorf("bbb moved by a cancelled commit: %v", err)
	}
}

// TestRenameNeverReplaces: a destination of any kind, a dangling symlink
// included, is ErrExists and stays as it was.
func TestRenameNeverReplaces(t *testing.T) {
	r, dir := newRoot(t)
	write(t, dir, "a", "a")
	write(t, dir, "d/x", "x")
	if err := os.Symlink("nowhere", filepath.Join(dir, "dangling")); err != nil {
		t.Fatal(err)
	}
	for _, to := range []string{"dangling", "d", "d/x"} {
		if err := r.Rename("a", to); !errors.Is(err, ErrExists) {
			t.Errorf("Rename(a, %q) = %v, want ErrExists", to, err)
		}
	}
	if got, _ := os.Readlink(filepath.Join(dir, "dangling")); got != "nowhere" {
		t.Errorf("dangling now points to %q", got)
	}
	if err := r.Rename("nope", "b"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Rename(missing) = %v, want ErrNotFound", err)
	}
	if err := r.Rename("dangling", "moved/link"); err != nil {
		t.Fatal(err)
	}
	if got, err := os.Readlink(filepath.Join(dir, "moved/link")); err != nil || got != "nowhere" {
		t.Errorf("moved link = %q, %v; want the link itself moved", got, err)
	}
	if err := r.Rename("a", "d/y"); err != nil {
		t.Fatal(err)
	}
	if got := readHost(t, filepath.Join(dir, "d/y")); got != "a" {
		t.Errorf("d/y = %q", got)
	}
}
