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
	"reflect"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/kilnhq/kiln/internal/quota"
	"github.com/kilnhq/kiln/internal/validate"
)

func newRoot(t *testing.T) (*Root, string) {
	t.Helper()
	dir := t.TempDir()
	r, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r, dir
}

func write(t *testing.T, dir, rel, content string) {
	t.Helper()
	p := filepath.Join(dir, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestClean(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		bad      bool
	}{
		{"", ".", false},
		{"/", ".", false},
		{"/plugins", "plugins", false},
		{"plugins/", "plugins", false},
		{"//a///b/./c", "a/b/c", false},
		{"/a/../b", "", true},
		{"..", "", true},
		{"a/..", "", true},
		{"a\x00b", "", true},
		{"\xff", "", true},
		{strings.Repeat("a", 256), "", true},
		{strings.Repeat("a/", 2049), "", true},
		{"a\\..\\b", "a\\..\\b", false}, // a backslash is a name character on Linux
		{"...", "...", false},
	} {
		got, err := Clean("path", tc.in)
		if tc.bad {
			if _, ok := errors.AsType[*validate.Error](err); !ok {
				t.Errorf("Clean(%q) = %q, %v; want a validation error", tc.in, got, err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("Clean(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}

func TestListStatAndEntries(t *testing.T) {
	r, dir := newRoot(t)
	write(t, dir, "server.properties", "motd=hi\n")
	write(t, dir, "world/level.dat", "\x0a\x00\x00")
	write(t, dir, "noext", "#!/bin/sh\necho hi\n")
	if err := os.Symlink("world", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(dir, "pipe"), 0o600); err != nil {
		t.Fatal(err)
	}
	list, err := r.List(".")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range list {
		got = append(got, e.Name+" "+e.ModeString()+" "+e.ModeBits()+" "+e.MIME)
	}
	want := []string{
		"world drwxr-xr-x 755 inode/directory",
		"link lrwxrwxrwx 777 inode/symlink",
		"noext -rw-r--r-- 644 text/plain; charset=utf-8",
		"pipe prw------- 600 inode/fifo",
		"server.properties -rw-r--r-- 644 text/x-java-properties",
	}
	if !slices.Equal(got, want) {
		t.Errorf("List = %q\nwant %q", got, want)
	}
	e, err := r.Stat("server.properties")
	if err != nil || e.Size != 8 || e.CreatedAt.IsZero() || e.ModTime.Location().String() != "UTC" {
		t.Errorf("Stat = %+v, %v", e, err)
	}
	if _, err := r.List("server.properties"); !errors.Is(err, ErrNotDirectory) {
		t.Errorf("List(file) = %v, want ErrNotDirectory", err)
	}
	if _, err := r.List("nope"); !errors.Is(err, ErrNotFound) {
		t.Errorf("List(missing) = %v, want ErrNotFound", err)
	}
	// A FIFO is not read (and does not hang the request).
	if _, err := r.ReadFile("pipe", 100); !errors.Is(err, ErrNotFile) {
		t.Errorf("ReadFile(fifo) = %v, want ErrNotFile", err)
	}
	if _, err := r.ReadFile("server.properties", 7); !errors.Is(err, ErrTooLarge) {
		t.Errorf("ReadFile over the limit = %v, want ErrTooLarge", err)
	}
	// A symlink inside the root is followed for reads.
	if b, err := r.ReadFile("link/level.dat", 100); err != nil || string(b) != "\x0a\x00\x00" {
		t.Errorf("ReadFile through an inner link = %q, %v", b, err)
	}
}

// budget is a reservation of a fresh ledger with free bytes free.
func budget(free int64) *quota.Reservation {
	r, _ := quota.NewAccount(free, quota.TempNames{}).Reserve(0)
	return r
}

func TestWriteFileAtomicAndQuota(t *testing.T) {
	r, dir := newRoot(t)
	// A file and two new directories: three blocks.
	res := budget(3 * quota.BlockSize)
	e, err := r.WriteFile("plugins/a/config.yml", strings.NewReader("a: 1\n"), res)
	if err != nil || e.Size != 5 || e.Name != "config.yml" || e.MIME != "application/yaml" {
		t.Fatalf("WriteFile = %+v, %v", e, err)
	}
	if got := res.Change(); got != 3*quota.BlockSize {
		t.Errorf("recorded change = %d, want 3 blocks", got)
	}
	if _, err := r.WriteFile("plugins/b/x", strings.NewReader(""), budget(quota.BlockSize)); !errors.Is(err, ErrQuota) {
		t.Errorf("WriteFile needing a new directory and a file with one block free = %v, want ErrQuota", err)
	}
	if err := os.Chmod(filepath.Join(dir, "plugins/a/config.yml"), 0o600); err != nil {
		t.Fatal(err)
	}
	// Replacing gives back the old cost: a one-block file may be
	// rewritten within its block with nothing free.
	res = budget(0)
	if _, err := r.WriteFile("plugins/a/config.yml", strings.NewReader("a: 1234\n"), res); err != nil {
		t.Fatalf("replace within the budget: %v", err)
	}
	if res.Change() != 0 {
		t.Errorf("recorded change of a same-cost rewrite = %d, want 0", res.Change())
	}
	if e, _ := r.Stat("plugins/a/config.yml"); e.Mode.Perm() != 0o600 {
		t.Errorf("mode after replace = %v, want the old 0600 kept", e.Mode.Perm())
	}
	// Over the budget: nothing changes, no temporary file is left.
	_, err = r.WriteFile("plugins/a/config.yml", bytes.NewReader(make([]byte, 5000)), budget(10))
	if !errors.Is(err, ErrQuota) {
		t.Fatalf("WriteFile over quota = %v, want ErrQuota", err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "plugins/a/config.yml")); string(b) != "a: 1234\n" {
		t.Errorf("content after a refused write = %q", b)
	}
	ents, _ := os.ReadDir(filepath.Join(dir, "plugins/a"))
	if len(ents) != 1 {
		t.Errorf("directory after a refused write holds %d entries, want 1 (no temp file)", len(ents))
	}
	// A directory is not replaced.
	if _, err := r.WriteFile("plugins", strings.NewReader("x"), budget(1<<20)); !errors.Is(err, ErrNotFile) {
		t.Errorf("WriteFile over a directory = %v, want ErrNotFile", err)
	}
	// A symlink at the target is replaced, never written through.
	outside := filepath.Join(t.TempDir(), "victim")
	write(t, filepath.Dir(outside), "victim", "untouched")
	if err := os.Symlink(outside, filepath.Join(dir, "evil")); err != nil {
		t.Fatal(err)
	}
	if _, err := r.WriteFile("evil", strings.NewReader("pwned"), budget(100)); err != nil {
		t.Fatalf("WriteFile over a symlink = %v", err)
	}
	if b, _ := os.ReadFile(outside); string(b) != "untouched" {
		t.Errorf("the symlink's target was written: %q", b)
	}
	if fi, _ := os.Lstat(filepath.Join(dir, "evil")); !fi.Mode().IsRegular() {
		t.Errorf("evil is %v, want a regular file replacing the link", fi.Mode())
	}
}

// TestWriteFileEntry: the entry WriteFile returns (described from the
// open file, typed from the bytes it wrote) is what Stat says afterwards,
// also when it replaces a large file (whose inode write keeps open across
// the rename) and when a name says nothing of the type.
func TestWriteFileEntry(t *testing.T) {
	r, dir := newRoot(t)
	big := bytes.Repeat([]byte("x"), 3*holdMin)
	if _, err := r.WriteFile("noext", bytes.NewReader(big), budget(1<<30)); err != nil {
		t.Fatal(err)
	}
	png := append([]byte("\x89PNG\r\n\x1a\n"), make([]byte, 700)...)
	got, err := r.WriteFile("noext", bytes.NewReader(png), budget(1<<30))
	if err != nil {
		t.Fatal(err)
	}
	want, err := r.Stat("noext")
	if err != nil {
		t.Fatal(err)
	}
	if got != want || got.MIME != "image/png" || got.Size != int64(len(png)) {
		t.Fatalf("WriteFile returned %+v, Stat says %+v (want image/png, %d bytes)", got, want, len(png))
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "noext")); !bytes.Equal(b, png) {
		t.Fatalf("content after replacing a large file: %d bytes, want the %d written", len(b), len(png))
	}
	// A short text file without extension: typed from its few bytes.
	got, _ = r.WriteFile("notes", strings.NewReader("hello\n"), budget(1<<30))
	if want, _ := r.Stat("notes"); got != want {
		t.Fatalf("WriteFile returned %+v, Stat says %+v", got, want)
	}
}

func TestRenameCopyDeleteChmodMkdir(t *testing.T) {
	r, dir := newRoot(t)
	write(t, dir, "a.txt", "hello")
	write(t, dir, "b.txt", "other")
	if err := r.Rename("a.txt", "sub/dir/a.txt"); err != nil {
		t.Fatal(err)
	}
	if err := r.Rename("b.txt", "sub/dir/a.txt"); !errors.Is(err, ErrExists) {
		t.Errorf("Rename onto an existing file = %v, want ErrExists", err)
	}
	if err := r.Rename("sub", "sub/dir/x"); err == nil {
		t.Error("Rename into itself succeeded")
	}
	c1, err := r.Copy("sub/dir/a.txt", budget(1<<20))
	if err != nil || c1.Name != "a copy.txt" {
		t.Fatalf("Copy = %+v, %v", c1, err)
	}
	c2, _ := r.Copy("sub/dir/a.txt", budget(1<<20))
	if c2.Name != "a copy 2.txt" {
		t.Errorf("second copy = %q, want %q", c2.Name, "a copy 2.txt")
	}
	if _, err := r.Copy("sub/dir/a.txt", budget(4)); !errors.Is(err, ErrQuota) {
		t.Errorf("Copy over quota = %v, want ErrQuota", err)
	}
	if _, err := r.Copy("sub", budget(1<<20)); !errors.Is(err, ErrNotFile) {
		t.Errorf("Copy(dir) = %v, want ErrNotFile", err)
	}
	if err := r.Chmod("sub/dir/a.txt", 0o600); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(filepath.Join(dir, "sub/dir/a.txt")); fi.Mode().Perm() != 0o600 {
		t.Errorf("mode = %v", fi.Mode())
	}
	if _, err := ParseMode("mode", "4755"); err == nil {
		t.Error("ParseMode accepted setuid")
	}
	if m, err := ParseMode("mode", "0750"); err != nil || m != 0o750 {
		t.Errorf("ParseMode(0750) = %v, %v", m, err)
	}
	if err := r.Mkdir("x/y/z", budget(1<<20)); err != nil {
		t.Fatal(err)
	}
	if err := r.Mkdir("sub/dir/a.txt", budget(1<<20)); !errors.Is(err, ErrExists) {
		t.Errorf("Mkdir over a file = %v, want ErrExists", err)
	}
	if err := r.Delete("sub"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "sub")); !os.IsNotExist(err) {
		t.Errorf("sub after Delete: %v", err)
	}
	if err := r.Delete("."); err == nil {
		t.Error("Delete(root) succeeded")
	}
	if err := r.Delete("nope"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Delete(missing) = %v", err)
	}
}

func TestSearch(t *testing.T) {
	r, dir := newRoot(t)
	write(t, dir, "plugins/Essentials/config.yml", "x")
	write(t, dir, "plugins/LuckPerms/CONFIG.YML", "x")
	write(t, dir, "world/region/r.0.0.mca", "x")
	deep := strings.Repeat("d/", 40)
	write(t, dir, deep+"config.yml", "x")
	if err := os.Symlink("/etc", filepath.Join(dir, "etc-link")); err != nil {
		t.Fatal(err)
	}
	m, _ := NewMatcher("pattern", "*.yml")
	res, truncated, err := r.Search(context.Background(), ".", m)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, x := range res {
		got = append(got, x.Directory+"/"+x.Entry.Name)
	}
	slices.Sort(got)
	want := []string{"/plugins/Essentials/config.yml", "/plugins/LuckPerms/CONFIG.YML"}
	if !slices.Equal(got, want) || !truncated {
		t.Errorf("Search(*.yml) = %q truncated=%v; want %q and truncated (depth bound)", got, truncated, want)
	}
	m, _ = NewMatcher("pattern", "REGION")
	res, _, _ = r.Search(context.Background(), ".", m)
	if len(res) != 1 || res[0].Directory != "/world" || !res[0].Entry.IsDir() {
		t.Errorf("Search(REGION) = %+v", res)
	}
	// Nothing behind the /etc link is found.
	m, _ = NewMatcher("pattern", "passwd")
	if res, _, _ = r.Search(context.Background(), ".", m); len(res) != 0 {
		t.Errorf("Search followed a symlink out: %+v", res)
	}
	if _, err := NewMatcher("pattern", "[a"); err == nil {
		t.Error("NewMatcher accepted a broken glob")
	}
}

func TestOpenReadStreams(t *testing.T) {
	r, dir := newRoot(t)
	write(t, dir, "big.bin", strings.Repeat("x", 1<<20))
	f, e, err := r.OpenRead("big.bin")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	n, _ := io.Copy(io.Discard, f)
	if n != 1<<20 || e.Size != 1<<20 {
		t.Errorf("read %d bytes, entry size %d", n, e.Size)
	}
	if _, _, err := r.OpenRead("."); !errors.Is(err, ErrNotFile) {
		t.Errorf("OpenRead(dir) = %v", err)
	}
}

// Root methods take only cleaned paths: a raw user string is a bug and is
// refused, never resolved.
func TestUncleanPathsRefused(t *testing.T) {
	r, _ := newRoot(t)
	for _, p := range []string{"/", "/etc/passwd", "../x", "a/../b", "a//b", ""} {
		if _, err := r.List(p); !errors.Is(err, errUnclean) {
			t.Errorf("List(%q) = %v, want errUnclean", p, err)
		}
		if _, err := r.WriteFile(p, strings.NewReader("x"), budget(10)); !errors.Is(err, errUnclean) {
			t.Errorf("WriteFile(%q) = %v, want errUnclean", p, err)
		}
		if err := r.Delete(p); !errors.Is(err, errUnclean) {
			t.Errorf("Delete(%q) = %v, want errUnclean", p, err)
		}
	}
}

func TestWalkAndSymlink(t *testing.T) {
	r, dir := newRoot(t)
	write(t, dir, "b/2.txt", "22")
	write(t, dir, "a/1.txt", "1")
	write(t, dir, "a/sub/3.txt", "333")
	if err := r.Symlink("../b/2.txt", "a/link"); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc", filepath.Join(dir, "etc")); err != nil {
		t.Fatal(err)
	}
	var got []string
	err := r.Walk(context.Background(), ".", func(rel string, e Entry, open Opener) error {
		s := rel + " " + e.ModeString()[:1]
		if open.Valid() {
			f, err := open.Open()
			if err != nil {
				return err
			}
			b, _ := io.ReadAll(f)
			f.Close()
			s += " " + string(b)
		}
		got = append(got, s)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{". d", "a d", "a/1.txt - 1", "a/link l", "a/sub d", "a/sub/3.txt - 333", "b d", "b/2.txt - 22", "etc l"}
	if !slices.Equal(got, want) {
		t.Errorf("Walk = %q\nwant %q", got, want)
	}
	if tgt, err := r.Readlink("a/link"); err != nil || tgt != "../b/2.txt" {
		t.Errorf("Readlink = %q, %v", tgt, err)
	}
	for _, bad := range []struct{ target, at string }{{"/etc/passwd", "x"}, {"../x", "y"}, {"a/../../x", "z"}, {"../../x", "a/q"}} {
		if err := r.Symlink(bad.target, bad.at); err == nil {
			t.Errorf("Symlink(%q at %q) succeeded; want it refused", bad.target, bad.at)
		}
	}
	if err := r.Symlink("x", "a/link"); !errors.Is(err, ErrExists) {
		t.Errorf("Symlink over an existing entry = %v, want ErrExists", err)
	}
}

func TestWriteFileTemp(t *testing.T) {
	r, dir := newRoot(t)
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		_, err := r.WriteFileTemp("downloads/a.jar", "dl_abc", pr, budget(1<<20))
		done <- err
	}()
	pw.Write([]byte("partial"))
	// While the write runs, its partial file has the known name.
	if _, err := os.Stat(filepath.Join(dir, "downloads", quota.TempNames{}.Name("dl_abc"))); err != nil {
		t.Fatalf("temporary file: %v", err)
	}
	pw.CloseWithError(errors.New("connection reset"))
	if err := <-done; err == nil {
		t.Fatal("WriteFileTemp succeeded on a broken source")
	}
	if _, err := os.Stat(filepath.Join(dir, "downloads", quota.TempNames{}.Name("dl_abc"))); !os.IsNotExist(err) {
		t.Errorf("partial file left after a failed write: %v", err)
	}
	// A leftover of a crash is removed by RemoveTemp.
	write(t, dir, "downloads/"+quota.TempNames{}.Name("dl_old"), "junk")
	if err := r.RemoveTemp("downloads", "dl_old", quota.TempNames{}); err != nil {
		t.Fatal(err)
	}
	if err := r.RemoveTemp("downloads", "dl_none", quota.TempNames{}); err != nil {
		t.Errorf("RemoveTemp of nothing = %v", err)
	}
	if _, err := r.WriteFileTemp("x", "a/b", strings.NewReader("x"), budget(10)); err == nil {
		t.Error("a tag with a slash was accepted")
	}
}

// TestWriteFilePrivate: a file holding a secret is 0600 from its first
// byte (its temporary file too, never readable by others before a
// chmod), over a file that was 0644, and keeps the content written.
func TestWriteFilePrivate(t *testing.T) {
	r, dir := newRoot(t)
	write(t, dir, "plugins/db.yml", "old")
	if err := os.Chmod(filepath.Join(dir, "plugins/db.yml"), 0o644); err != nil {
		t.Fatal(err)
	}
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		_, err := r.WriteFilePrivate("plugins/db.yml", pr, budget(1<<20))
		done <- err
	}()
	pw.Write([]byte("password: "))
	ents, err := os.ReadDir(filepath.Join(dir, "plugins"))
	if err != nil || len(ents) != 2 {
		t.Fatalf("plugins while writing = %v, %v; want the file and its temporary file", ents, err)
	}
	for _, e := range ents {
		if fi, _ := e.Info(); e.Name() != "db.yml" && fi.Mode().Perm() != 0o600 {
			t.Errorf("temporary file %s is %v, want 0600", e.Name(), fi.Mode().Perm())
		}
	}
	pw.Write([]byte("s3cret\n"))
	pw.Close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(dir, "plugins/db.yml"))
	b, _ := os.ReadFile(filepath.Join(dir, "plugins/db.yml"))
	if err != nil || fi.Mode().Perm() != 0o600 || string(b) != "password: s3cret\n" {
		t.Errorf("db.yml = %q, mode %v, %v; want the secret, 0600", b, fi.Mode().Perm(), err)
	}
}

// TestModeString: ls's letters, setuid/setgid/sticky included.
func TestModeString(t *testing.T) {
	for _, c := range []struct {
		mode fs.FileMode
		want string
	}{
		{0o644, "-rw-r--r--"},
		{fs.ModeDir | 0o755, "drwxr-xr-x"},
		{fs.ModeSymlink | 0o777, "lrwxrwxrwx"},
		{fs.ModeSetuid | 0o755, "-rwsr-xr-x"},
		{fs.ModeSetuid | 0o644, "-rwSr--r--"},
		{fs.ModeDir | fs.ModeSetgid | 0o755, "drwxr-sr-x"},
		{fs.ModeSetgid | 0o744, "-rwxr-Sr--"},
		{fs.ModeDir | fs.ModeSticky | 0o777, "drwxrwxrwt"},
		{fs.ModeDir | fs.ModeSticky | 0o776, "drwxrwxrwT"},
		{fs.ModeNamedPipe | 0o600, "prw-------"},
		{fs.ModeDevice | fs.ModeCharDevice | 0o666, "crw-rw-rw-"},
	} {
		e := Entry{Mode: c.mode}
		if got := e.ModeString(); got != c.want {
			t.Errorf("ModeString(%v) = %q, want %q", c.mode, got, c.want)
		}
		if got := string(e.AppendModeString([]byte("x"))); got != "x"+c.want {
			t.Errorf("AppendModeString(%v) = %q", c.mode, got)
		}
	}
}

// TestListOrder: directories first, then everything else, each by name in
// byte order — on a directory large enough to be statted in parallel.
func TestListOrder(t *testing.T) {
	r, dir := newRoot(t)
	var dirs, others []string
	for i := range parallelStatMin + 100 {
		name := fmt.Sprintf("%c%03d", "bAa_"[i%4], (i*7919)%1000)
		if i%7 == 0 {
			if err := os.Mkdir(filepath.Join(dir, name), 0o755); err != nil {
				t.Fatal(err)
			}
			dirs = append(dirs, name)
		} else {
			write(t, dir, name, "x")
			others = append(others, name)
		}
	}
	slices.Sort(dirs)
	slices.Sort(others)
	list, err := r.List(".")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range list {
		got = append(got, e.Name)
	}
	if want := append(dirs, others...); !slices.Equal(got, want) {
		t.Fatalf("List order:\n got %v\nwant %v", got, want)
	}
}

// TestOpenerOpenFD: the walk's Opener gives a regular file's descriptor
// with its own stat; a FIFO swapped in after the walk's stat is refused
// (ErrNotFile) without blocking the open, and so is a symlink; the zero
// Opener (a directory's) opens nothing.
func TestOpenerOpenFD(t *testing.T) {
	r, dir := newRoot(t)
	write(t, dir, "d/file", "12345")
	write(t, dir, "d/fifo", "x")
	write(t, dir, "d/link", "x")
	type result struct {
		size int64
		data string
		err  error
	}
	got := map[string]result{}
	err := r.Walk(t.Context(), ".", func(rel string, e Entry, open Opener) error {
		switch rel {
		case "d/fifo": // a regular file when stat'ed, a FIFO when opened
			if err := os.Remove(filepath.Join(dir, rel)); err != nil {
				return err
			}
			if err := syscall.Mkfifo(filepath.Join(dir, rel), 0o644); err != nil {
				return err
			}
		case "d/link":
			if err := os.Remove(filepath.Join(dir, rel)); err != nil {
				return err
			}
			if err := os.Symlink("file", filepath.Join(dir, rel)); err != nil {
				return err
			}
		}
		fd, st, err := open.OpenFD()
		res := result{err: err}
		if err == nil {
			buf := make([]byte, 64)
			n, rerr := syscall.Read(fd, buf)
			syscall.Close(fd)
			if rerr != nil {
				return rerr
			}
			res.size, res.data = st.Size, string(buf[:n])
		}
		got[rel] = res
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if g := got["d/file"]; g.err != nil || g.size != 5 || g.data != "12345" {
		t.Errorf("d/file: %+v, want size 5, 12345", g)
	}
	for _, rel := range []string{"d/fifo", "d/link", "d", "."} {
		if g := got[rel]; !errors.Is(g.err, ErrNotFile) {
			t.Errorf("%s: %+v, want ErrNotFile", rel, g)
		}
	}
}

// TestWalkTypes: WalkTypes visits what Walk visits, in the same order;
// a regular file's Entry holds its name only (its kind: Mode 0) with a
// valid Opener whose OpenFD stat is the file's; every other entry is
// Walk's. A directory of 3,000 long names takes several getdents calls.
func TestWalkTypes(t *testing.T) {
	r, dir := newRoot(t)
	write(t, dir, "a/1.txt", "1")
	write(t, dir, "a/sub/3.txt", "333")
	if err := os.Chmod(filepath.Join(dir, "a/1.txt"), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := r.Symlink("1.txt", "a/link"); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(dir, "a/fifo"), 0o600); err != nil {
		t.Fatal(err)
	}
	for i := range 3000 {
		write(t, dir, fmt.Sprintf("big/%s-%04d", strings.Repeat("n", 60), i), "x")
	}
	type visit struct {
		rel  string
		e    Entry
		file bool
	}
	collect := func(walk func(context.Context, string, WalkFunc) error) []visit {
		var out []visit
		err := walk(t.Context(), ".", func(rel string, e Entry, open Opener) error {
			out = append(out, visit{rel, e, open.Valid()})
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	full, lazy := collect(r.Walk), collect(r.WalkTypes)
	if len(full) != len(lazy) || len(full) != 3000+8 { // ".", a, its 4 entries, a/sub/3.txt, big
		t.Fatalf("Walk visited %d entries, WalkTypes %d; want %d both", len(full), len(lazy), 3000+8)
	}
	for i := range full {
		f, l := full[i], lazy[i]
		switch {
		case f.rel != l.rel:
			t.Fatalf("entry %d: Walk %s, WalkTypes %s", i, f.rel, l.rel)
		case f.file != l.file:
			t.Errorf("%s: Opener valid %v under Walk, %v under WalkTypes", f.rel, f.file, l.file)
		case f.e.IsFile() && (l.e.Mode != 0 || l.e.Size != 0 || !l.e.ModTime.IsZero() || l.e.Name != f.e.Name):
			t.Errorf("%s: WalkTypes entry %+v, want its name only", f.rel, l.e)
		case !f.e.IsFile() && !reflect.DeepEqual(f.e, l.e):
			t.Errorf("%s: WalkTypes entry %+v, Walk's %+v", f.rel, l.e, f.e)
		}
	}
	// The Opener's stat is the file's.
	err := r.WalkTypes(t.Context(), "a", func(rel string, e Entry, open Opener) error {
		if rel != "a/1.txt" {
			return nil
		}
		fd, st, err := open.OpenFD()
		if err != nil {
			return err
		}
		syscall.Close(fd)
		if st.Size != 1 || st.Mode&0o777 != 0o640 {
			t.Errorf("a/1.txt: OpenFD stat size %d mode %o, want 1, 640", st.Size, st.Mode&0o777)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
