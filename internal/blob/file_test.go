package blob

import (
	"bytes"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func openFileStore(t *testing.T, dir string, opts Options) Store {
	t.Helper()
	s, err := Open(t.Context(), (&url.URL{Scheme: "file", Path: dir}).String(), opts)
	if err != nil {
		t.Fatalf("Open(file://%s): %v", dir, err)
	}
	return s
}

func TestFileStore(t *testing.T) {
	testStore(t, func(t *testing.T) Store { return openFileStore(t, t.TempDir(), Options{}) })
}

// stagedNames lists what the staging directory holds, directories and
// the files in them, as paths relative to it.
func stagedNames(t *testing.T, dir string) []string {
	t.Helper()
	var names []string
	top := filepath.Join(dir, stageDir)
	err := filepath.WalkDir(top, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p != top {
			rel, _ := filepath.Rel(top, p)
			names = append(names, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return names
}

func TestFileLayout(t *testing.T) {
	dir := t.TempDir()
	s := openFileStore(t, dir, Options{})
	data := []byte("chunk")
	key := chunkKey(data)
	put(t, s, key, data)
	got, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(key)))
	if err != nil || string(got) != "chunk" {
		t.Errorf("the blob's file: %q, %v, want %q", got, err, data)
	}
	fi, err := os.Stat(filepath.Join(dir, filepath.FromSlash(key)))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("the blob's mode: %v, %v, want 0600", fi.Mode(), err)
	}
	if s.String() != "file://"+dir {
		t.Errorf("String() = %q, want %q", s.String(), "file://"+dir)
	}
}

// A Put in flight is staged where List does not look and Get cannot name.
func TestFileInFlightInvisible(t *testing.T) {
	dir := t.TempDir()
	s := openFileStore(t, dir, Options{})
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		_, err := s.Put(t.Context(), "manifests/slow", pr, 10)
		done <- err
	}()
	if _, err := pw.Write([]byte("12345")); err != nil {
		t.Fatal(err)
	}
	// Put has taken the first half (the pipe returned): it is staged.
	if names := stagedNames(t, dir); len(names) != 1 {
		t.Fatalf("staged files = %q, want one", names)
	}
	if keys := listKeys(t, s, ""); len(keys) != 0 {
		t.Errorf("List during a Put = %q, want nothing", keys)
	}
	wantMissing(t, s, "manifests/slow")
	pw.CloseWithError(errReader)
	if err := <-done; !errors.Is(err, errReader) {
		t.Errorf("Put(reader failing mid-way) = %v, want %v", err, errReader)
	}
	if names := stagedNames(t, dir); len(names) != 0 {
		t.Errorf("staged files after a failed Put = %q, want none", names)
	}
	wantMissing(t, s, "manifests/slow")
}

// Open removes the staged files older than CleanBefore: a crash's.
func TestFileClean(t *testing.T) {
	dir := t.TempDir()
	openFileStore(t, dir, Options{})
	start := time.Now()
	old := filepath.Join(dir, stageDir, "put-OLD")
	fresh := filepath.Join(dir, stageDir, "put-FRESH")
	for _, p := range []string{old, fresh} {
		if err := os.WriteFile(p, []byte("half"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chtimes(old, start.Add(-time.Hour), start.Add(-time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(fresh, start.Add(time.Hour), start.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	openFileStore(t, dir, Options{CleanBefore: start})
	if got := stagedNames(t, dir); !slices.Equal(got, []string{"put-FRESH"}) {
		t.Errorf("staged files after Open = %q, want [put-FRESH]", got)
	}
	// Without CleanBefore nothing is removed.
	if err := os.Chtimes(fresh, start.Add(-time.Hour), start.Add(-time.Hour)); err != nil {
		t.Fatal(err)
	}
	openFileStore(t, dir, Options{})
	if got := stagedNames(t, dir); !slices.Equal(got, []string{"put-FRESH"}) {
		t.Errorf("staged files after Open without CleanBefore = %q, want [put-FRESH]", got)
	}
}

// A key that is another key's directory is no blob in the file backend,
// and cannot become one.
func TestFileKeyIsDirectory(t *testing.T) {
	s := openFileStore(t, t.TempDir(), Options{})
	put(t, s, "a/b", []byte("x"))
	wantMissing(t, s, "a")
	created, err := s.Put(t.Context(), "a", strings.NewReader("y"), 1)
	if err == nil || created {
		t.Errorf("Put(a) over the directory a = %v, %v, want an error", created, err)
	}
	if err := s.Delete(t.Context(), "a"); err != nil {
		t.Errorf("Delete(a) of a directory = %v, want nil (no blob there)", err)
	}
	if got := get(t, s, "a/b"); string(got) != "x" {
		t.Errorf("Get(a/b) = %q, want x", got)
	}
	// And a blob's name is no directory.
	wantMissing(t, s, "a/b/c")
	if _, err := s.Put(t.Context(), "a/b/c", strings.NewReader("z"), 1); err == nil {
		t.Errorf("Put(a/b/c) under the blob a/b succeeded, want an error")
	}
	if err := s.Delete(t.Context(), "a/b/c"); err != nil {
		t.Errorf("Delete(a/b/c) = %v, want nil", err)
	}
}

func TestOpenFileURLs(t *testing.T) {
	dir := t.TempDir()
	for _, good := range []string{"file://" + dir, "file://localhost" + dir, "file://" + dir + "/new/sub"} {
		if _, err := Open(t.Context(), good, Options{}); err != nil {
			t.Errorf("Open(%q): %v", good, err)
		}
	}
	for _, bad := range []string{
		"file://./kiln-data/blobs", "file:kiln-data", "file://host/dir", "file://" + dir + "?x=1",
		"ftp://host/dir", "/abs/dir", "",
	} {
		if s, err := Open(t.Context(), bad, Options{}); err == nil {
			t.Errorf("Open(%q) = %v, want an error", bad, s)
		}
	}
}

func FuzzValidateKey(f *testing.F) {
	for _, k := range invalidKeys {
		f.Add(k)
	}
	for _, k := range []string{"a", "chunks/ab/abcd", "a/../b", "a/.b", "..a", "a..", "~tmp"} {
		f.Add(k)
	}
	f.Fuzz(func(t *testing.T, key string) {
		if ValidateKey(key) != nil {
			return
		}
		// A valid key is a clean, local, relative path: it cannot leave
		// the store's directory nor name the staging directory.
		if !filepath.IsLocal(key) || filepath.Clean(key) != key || strings.HasPrefix(key, stageDir) {
			t.Errorf("ValidateKey(%q) = nil for a path that is not clean and local", key)
		}
		if checkPrefix(key) != nil || checkPrefix(key+"/") != nil {
			t.Errorf("checkPrefix refuses the valid key %q", key)
		}
	})
}

// A segment longer than a file name is an invalid key here, not an I/O
// error.
func TestFileLongSegment(t *testing.T) {
	s := openFileStore(t, t.TempDir(), Options{})
	key := "manifests/" + strings.Repeat("a", nameMax+1)
	if _, err := s.Put(t.Context(), key, strings.NewReader("x"), 1); !errors.Is(err, ErrInvalidKey) {
		t.Errorf("Put(a %d-byte segment) error = %v, want ErrInvalidKey", nameMax+1, err)
	}
	if _, err := s.Stat(t.Context(), key); !errors.Is(err, ErrInvalidKey) {
		t.Errorf("Stat(a %d-byte segment) error = %v, want ErrInvalidKey", nameMax+1, err)
	}
	put(t, s, "manifests/"+strings.Repeat("a", nameMax), []byte("x"))
}

// A file batch's blobs stay staged, invisible, until Commit; Close drops
// what was not committed.
func TestFileBatchStaged(t *testing.T) {
	dir := t.TempDir()
	s := openFileStore(t, dir, Options{})
	b := NewBatch(s)
	one, two := []byte("one"), []byte("two")
	for _, data := range [][]byte{one, two} {
		if created, err := b.Put(t.Context(), chunkKey(data), strings.NewReader(string(data)), int64(len(data))); err != nil || !created {
			t.Fatalf("Batch.Put(%q) = %v, %v, want true, nil", data, created, err)
		}
	}
	// Staged in the batch's own directory, which goes with the batch.
	if names := stagedNames(t, dir); len(names) != 3 || !strings.HasPrefix(names[0], "batch-") ||
		!strings.HasPrefix(names[1], names[0]+"/b-") || !strings.HasPrefix(names[2], names[0]+"/b-") {
		t.Errorf("staged before Commit = %q, want a batch directory and two files in it", names)
	}
	wantMissing(t, s, chunkKey(one))
	if keys := listKeys(t, s, ""); len(keys) != 0 {
		t.Errorf("List before Commit = %q, want nothing", keys)
	}
	if err := b.Commit(t.Context()); err != nil {
		t.Fatal(err)
	}
	if names := stagedNames(t, dir); len(names) != 0 {
		t.Errorf("staged files after Commit = %q, want none", names)
	}
	if got := listKeys(t, s, "chunks/"); len(got) != 2 {
		t.Errorf("List after Commit = %q, want two keys", got)
	}

	b = NewBatch(s)
	three := []byte("three")
	if _, err := b.Put(t.Context(), chunkKey(three), strings.NewReader("three"), 5); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if names := stagedNames(t, dir); len(names) != 0 {
		t.Errorf("staged files after Close = %q, want none", names)
	}
	wantMissing(t, s, chunkKey(three))
}

// A batch writes a blob handed over as a *bytes.Reader with O_DIRECT
// (direct.go): whole blocks straight from an aligned buffer, the rest
// through the bounce buffer, the file cut back to its size. Every size
// around the block and bounce boundaries, from an aligned and an
// unaligned buffer, comes back byte for byte; so it does through the page
// cache, where the file system refuses O_DIRECT.
func TestFileBatchDirect(t *testing.T) {
	sizes := []int{0, 1, 4095, 4096, 4097, 8191, bounceSize - 1, bounceSize, bounceSize + 4097, 1<<20 + 3, 3 << 20}
	raw := make([]byte, 4<<20)
	rand.Read(raw)
	skip := 0
	for !aligned(raw[skip:]) {
		skip++
	}
	for _, direct := range []bool{true, false} {
		dir := t.TempDir()
		s := openFileStore(t, dir, Options{})
		fst := s.(*fileStore)
		fst.noDirect.Store(!direct)
		b := NewBatch(s)
		want := map[string][]byte{}
		for _, size := range sizes {
			for _, off := range []int{skip, skip + 1} {
				src := raw[off : off+size]
				data := append([]byte(nil), src...)
				data = append(data, byte(size), byte(off)) // distinct keys for equal prefixes
				key := chunkKey(data)
				src = raw[off : off+size+2]
				copy(src[size:], data[size:])
				if created, err := b.Put(t.Context(), key, bytes.NewReader(src), int64(len(src))); err != nil || !created {
					t.Fatalf("direct %v: Put of %d bytes at offset %d = %v, %v", direct, len(src), off, created, err)
				}
				want[key] = data
			}
		}
		// A reader of another length than declared stores nothing.
		if _, err := b.Put(t.Context(), chunkKey([]byte("short")), bytes.NewReader([]byte("short")), 9); err == nil {
			t.Errorf("direct %v: Put of 5 bytes declared as 9 succeeded", direct)
		}
		if err := b.Commit(t.Context()); err != nil {
			t.Fatal(err)
		}
		if direct && fst.noDirect.Load() {
			t.Logf("NOTE: the file system of %s refuses O_DIRECT: both passes went through the page cache", dir)
		}
		for key, data := range want {
			if got := get(t, s, key); !bytes.Equal(got, data) {
				t.Errorf("direct %v: %s: got %d bytes, want %d (equal: %v)", direct, key, len(got), len(data), bytes.Equal(got, data))
			}
			fi, err := os.Stat(filepath.Join(dir, filepath.FromSlash(key)))
			if err != nil || fi.Size() != int64(len(data)) {
				t.Errorf("direct %v: %s on disk: %v, %v; want %d bytes", direct, key, fi, err, len(data))
			}
		}
		wantMissing(t, s, chunkKey([]byte("short")))
		if names := stagedNames(t, dir); len(names) != 0 {
			t.Errorf("direct %v: staged after Commit = %q", direct, names)
		}
	}
}

// TestFileBatchDirectPadded: a blob whose buffer's capacity holds its last
// block zero-padded (as the snapshot engine hands its chunks over) is
// written whole, padding included, then cut to its size; one whose
// padding is not zero, or whose capacity stops short, goes through the
// bounce buffer. Either way the store holds exactly the blob, and the
// caller's buffer is left as it was.
func TestFileBatchDirectPadded(t *testing.T) {
	raw := make([]byte, 3<<20)
	skip := 0
	for !aligned(raw[skip:]) {
		skip++
	}
	dir := t.TempDir()
	s := openFileStore(t, dir, Options{})
	b := NewBatch(s)
	want := map[string][]byte{}
	for _, size := range []int{1, 4095, 4096, 4097, 8191, 1<<20 + 3} {
		padded := (size + directAlign - 1) &^ (directAlign - 1)
		for _, tc := range []struct {
			name  string
			cap   int
			dirty bool // a non-zero byte in the padding
		}{{"zero padding", padded, false}, {"more room", padded + directAlign, false}, {"dirty padding", padded, true}, {"short capacity", size, false}} {
			buf := raw[skip : skip+size : skip+tc.cap]
			clear(buf[:tc.cap])
			rand.Read(buf)
			buf[0] = byte(len(want)) // distinct blobs
			if tc.dirty && tc.cap > size {
				buf[:tc.cap][tc.cap-1] = 7
			}
			before := append([]byte(nil), buf[:tc.cap]...)
			key := chunkKey(buf)
			if created, err := b.Put(t.Context(), key, bytes.NewReader(buf), int64(size)); err != nil || !created {
				t.Fatalf("%s, %d bytes: Put = %v, %v", tc.name, size, created, err)
			}
			if !bytes.Equal(buf[:tc.cap], before) {
				t.Errorf("%s, %d bytes: the caller's buffer changed", tc.name, size)
			}
			want[key] = append([]byte(nil), buf...)
		}
	}
	if err := b.Commit(t.Context()); err != nil {
		t.Fatal(err)
	}
	// The writer itself: the zero-padded blob takes no bounce buffer, the
	// dirty one does.
	fd, err := unix.Open(filepath.Join(dir, "w"), unix.O_WRONLY|unix.O_CREAT|unix.O_DIRECT, 0o600)
	if errors.Is(err, unix.EINVAL) {
		t.Log("NOTE: the file system of the temp dir has no O_DIRECT: the writer's paths not told apart")
	} else if err != nil {
		t.Fatal(err)
	} else {
		defer unix.Close(fd)
		buf := raw[skip : skip+100 : skip+directAlign]
		clear(buf[:directAlign])
		for _, dirty := range []bool{false, true} {
			buf[:directAlign][directAlign-1] = map[bool]byte{false: 0, true: 1}[dirty]
			w := &directWriter{fd: fd, pool: &s.(*fileStore).bounce}
			if _, err := w.Write(buf); err != nil {
				t.Fatal(err)
			}
			if (w.bounce != nil) != dirty {
				t.Errorf("dirty padding %v: bounce buffer taken %v", dirty, w.bounce != nil)
			}
			w.release()
			if fi, err := os.Stat(filepath.Join(dir, "w")); err != nil || fi.Size() != 100 {
				t.Errorf("dirty padding %v: %v, %v; want 100 bytes", dirty, fi, err)
			}
			if _, err := unix.Seek(fd, 0, 0); err != nil {
				t.Fatal(err)
			}
		}
	}
	for key, data := range want {
		if got := get(t, s, key); !bytes.Equal(got, data) {
			t.Errorf("%s: got %d bytes, want %d", key, len(got), len(data))
		}
		if fi, err := os.Stat(filepath.Join(dir, filepath.FromSlash(key))); err != nil || fi.Size() != int64(len(data)) {
			t.Errorf("%s on disk: %v, %v; want %d bytes", key, fi, err, len(data))
		}
	}
}

// A disk that refuses a direct write (EINVAL at the first block: here
// provoked with a buffer off the alignment) is told apart as errNoDirect,
// which makes the store stage through the page cache instead.
func TestDirectWriteRefused(t *testing.T) {
	dir := t.TempDir()
	fd, err := unix.Open(filepath.Join(dir, "f"), unix.O_WRONLY|unix.O_CREAT|unix.O_DIRECT, 0o600)
	if errors.Is(err, unix.EINVAL) {
		t.Skip("SKIP: the file system of the temp dir has no O_DIRECT: nothing to refuse")
	}
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	raw := make([]byte, 3*directAlign)
	off := 1
	for aligned(raw[off:]) {
		off++
	}
	w := &directWriter{fd: fd}
	if err := w.pwrite(raw[off : off+directAlign]); !errors.Is(err, errNoDirect) {
		t.Errorf("pwrite from an unaligned buffer = %v, want errNoDirect", err)
	}
}

// TestFileBatchCommitMany: Commit publishes blobs in hundreds of
// directories at once (publishWorkers); when one cannot be published (its
// key names a directory of other keys) Commit fails, every blob is whole
// or absent, and nothing stays staged.
func TestFileBatchCommitMany(t *testing.T) {
	dir := t.TempDir()
	s := openFileStore(t, dir, Options{})
	put(t, s, "bad/x", []byte("x")) // "bad" is a directory now
	for round, withBad := range []bool{true, false} {
		b := NewBatch(s)
		want := map[string]string{}
		for i := range 300 {
			key := fmt.Sprintf("r%d/%03d/v%d", round, i, i%3)
			want[key] = fmt.Sprintf("blob %d of round %d", i, round)
			if _, err := b.Put(t.Context(), key, strings.NewReader(want[key]), int64(len(want[key]))); err != nil {
				t.Fatal(err)
			}
			if withBad && i == 150 {
				if _, err := b.Put(t.Context(), "bad", strings.NewReader("y"), 1); err != nil {
					t.Fatal(err)
				}
			}
		}
		err := b.Commit(t.Context())
		if withBad != (err != nil) {
			t.Fatalf("round %d: Commit = %v, want an error: %v", round, err, withBad)
		}
		for key, data := range want {
			rc, err := s.Get(t.Context(), key)
			switch {
			case err == nil:
				got, _ := io.ReadAll(rc)
				rc.Close()
				if string(got) != data {
					t.Errorf("round %d: %s = %q, want %q", round, key, got, data)
				}
			case !withBad || !errors.Is(err, ErrNotFound):
				t.Errorf("round %d: Get(%s) = %v", round, key, err)
			}
		}
		if names := stagedNames(t, dir); len(names) != 0 {
			t.Errorf("round %d: staged after Commit = %q", round, names)
		}
	}
}
