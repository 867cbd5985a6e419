package quota

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestCost(t *testing.T) {
	for _, c := range []struct{ size, want int64 }{
		{0, 4096}, {1, 4096}, {4096, 4096}, {4097, 8192}, {1 << 20, 1 << 20}, {1<<20 + 1, 1<<20 + 4096},
	} {
		if got := Cost(c.size); got != c.want {
			t.Errorf("Cost(%d) = %d, want %d", c.size, got, c.want)
		}
	}
}

// TestReserveExactUnderConcurrency: many writers growing at once never
// hold more than the limit together, and what they commit adds up.
func TestReserveExactUnderConcurrency(t *testing.T) {
	const limit = 10 << 20
	a := NewAccount(limit, TempNames{})
	a.Adjust(1 << 20) // already used
	var wg sync.WaitGroup
	var committed, peak atomic.Int64
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := a.Reserve(0)
			if err != nil {
				t.Error(err)
				return
			}
			w := &Writer{Res: r}
			for range 100 {
				if err := w.Reserve(7000); err != nil {
					if !errors.Is(err, ErrQuota) {
						t.Errorf("Reserve: %v", err)
					}
					break
				}
				f := a.Figures()
				if s := f.Used + f.Reserved; s > peak.Load() {
					peak.Store(s)
				}
				if f.Used+f.Reserved > limit {
					t.Errorf("used %d + reserved %d > limit %d", f.Used, f.Reserved, limit)
				}
			}
			if w.Delta()%2 == 0 {
				committed.Add(w.Delta())
				r.Changed(w.Delta())
				r.Commit()
			} else {
				r.Release()
			}
		}()
	}
	wg.Wait()
	f := a.Figures()
	if f.Reserved != 0 {
		t.Errorf("reserved after every writer ended = %d, want 0", f.Reserved)
	}
	if want := 1<<20 + committed.Load(); f.Used != want {
		t.Errorf("used = %d, want %d", f.Used, want)
	}
	if peak.Load() > limit {
		t.Errorf("peak %d > limit", peak.Load())
	}
}

func TestWriterCredit(t *testing.T) {
	a := NewAccount(100<<10, TempNames{})
	a.Adjust(96 << 10) // 4 KiB free
	r, _ := a.Reserve(0)
	// Replacing a 64 KiB file: up to 68 KiB may be written.
	w := &Writer{Res: r, Credit: Cost(64 << 10)}
	if err := w.Reserve(68 << 10); err != nil {
		t.Fatalf("Reserve within the credit and the free space: %v", err)
	}
	if err := w.Reserve(1); !errors.Is(err, ErrQuota) {
		t.Fatalf("Reserve past it = %v, want ErrQuota", err)
	}
	r.Changed(w.Delta())
	r.Commit()
	if f := a.Figures(); f.Used != 100<<10 || f.Reserved != 0 {
		t.Errorf("figures = %+v, want used 100 KiB, nothing reserved", f)
	}
	// A shorter rewrite gives bytes back.
	r, _ = a.Reserve(0)
	w = &Writer{Res: r, Credit: Cost(68 << 10)}
	_ = w.Reserve(10)
	r.Changed(w.Delta())
	r.Commit()
	if f := a.Figures(); f.Used != 100<<10-64<<10 {
		t.Errorf("used after a shorter rewrite = %d, want %d", f.Used, 100<<10-64<<10)
	}
}

func write(t *testing.T, p string, n int) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, make([]byte, n), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestUsage(t *testing.T) {
	dir := t.TempDir()
	write(t, dir+"/a", 10)              // 4096
	write(t, dir+"/d/b", 5000)          // dir 4096 + 8192
	write(t, dir+"/d/e/c", 0)           // dir 4096 + 4096
	os.Symlink("/etc/passwd", dir+"/l") // 4096, not followed
	os.Symlink("/", dir+"/d/root")      // 4096, not descended
	want := int64(4096 + 4096 + 8192 + 4096 + 4096 + 4096 + 4096)
	got, err := Usage(dir)
	if err != nil || got != want {
		t.Errorf("Usage = %d, %v; want %d", got, err, want)
	}
	if got, err := Usage(dir + "/missing"); got != 0 || err != nil {
		t.Errorf("Usage(missing) = %d, %v; want 0, nil", got, err)
	}
}

// TestUsageDeeperThanPathMax builds a tree whose paths pass PATH_MAX
// (by descriptor: no path could name its bottom) and measures it.
func TestUsageDeeperThanPathMax(t *testing.T) {
	dir := t.TempDir()
	const depth = 3000 // 3000 × "deep/" = 15,000 bytes of path
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	for range depth {
		if err := unix.Mkdirat(fd, "deep", 0o755); err != nil {
			t.Fatal(err)
		}
		nfd, err := unix.Openat(fd, "deep", unix.O_RDONLY|unix.O_DIRECTORY, 0)
		unix.Close(fd)
		if err != nil {
			t.Fatal(err)
		}
		fd = nfd
	}
	wfd, err := unix.Openat(fd, "bottom", unix.O_WRONLY|unix.O_CREAT, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	unix.Write(wfd, make([]byte, 5000))
	unix.Close(wfd)
	unix.Close(fd)
	a := NewAccount(1<<30, TempNames{})
	got, err := a.Walk(dir, time.Time{})
	if want := int64(depth*4096 + 8192); err != nil || got != want {
		t.Fatalf("Walk of a %d-deep tree = %d, %v; want %d", depth, got, err, want)
	}
	if f := a.Figures(); f.Used != got || f.WalkedAt.IsZero() {
		t.Errorf("figures after the walk = %+v", f)
	}
}

func TestWalkTemporaries(t *testing.T) {
	names := NewTempNames(bytes.Repeat([]byte{3}, 32))
	other := NewTempNames(bytes.Repeat([]byte{4}, 32))
	leftover, stage := names.Name("old"), names.Name("stage-x")
	// Look-alikes Kiln did not make (a user's, a game server's, another
	// key's): old, yet never removed, and counted.
	forged, wrongTag, otherKey := TempPrefix+"restore-x", TempPrefix+"old-0123456789abcdef", other.Name("old")
	dir := t.TempDir()
	write(t, dir+"/keep", 100)                 // 4096
	write(t, dir+"/"+leftover, 9000)           // a leftover: removed
	write(t, dir+"/sub/"+stage+"/deep/f", 100) // a leftover tree: removed; sub: 4096
	write(t, dir+"/"+TempPrefix+"new", 9000)   // untracked, new: counted (12288)
	write(t, dir+"/"+TempPrefix+"mine", 50000) // tracked: left out
	write(t, dir+"/"+forged+"/journal", 10)    // 4096 + 4096
	write(t, dir+"/"+wrongTag, 10)             // 4096
	write(t, dir+"/"+otherKey, 10)             // 4096
	old := time.Now().Add(-time.Hour)
	for _, p := range []string{leftover, "sub/" + stage, forged, wrongTag, otherKey} {
		if err := os.Chtimes(dir+"/"+p, old, old); err != nil {
			t.Fatal(err)
		}
	}
	os.Chmod(dir+"/sub/"+stage+"/deep", 0o500) // a leftover staging tree whose modes were narrowed
	a := NewAccount(1<<30, names)
	r, _ := a.Reserve(50000)
	f, err := os.Open(dir + "/" + TempPrefix + "mine")
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Track(int(f.Fd())); err != nil {
		t.Fatal(err)
	}
	f.Close()
	start := time.Now().Add(-time.Minute)
	foreign := int64(4 * 4096)
	got, err := a.Walk(dir, start)
	if want := int64(4096+4096+12288) + foreign; err != nil || got != want {
		t.Errorf("Walk = %d, %v; want %d", got, err, want)
	}
	for _, p := range []string{leftover, "sub/" + stage} {
		if _, err := os.Lstat(dir + "/" + p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("leftover %s still there: %v", p, err)
		}
	}
	for _, p := range []string{"keep", TempPrefix + "new", TempPrefix + "mine", forged + "/journal", wrongTag, otherKey} {
		if _, err := os.Lstat(dir + "/" + p); err != nil {
			t.Errorf("%s removed: %v", p, err)
		}
	}
	// Once the writer is done, its file is counted like any other.
	r.Release()
	got, _ = a.Walk(dir, start)
	if want := int64(4096+4096+12288) + foreign + Cost(50000); got != want {
		t.Errorf("Walk after the release = %d, want %d", got, want)
	}
	// An account without a key removes nothing: nothing is Kiln's.
	write(t, dir+"/"+leftover, 10)
	os.Chtimes(dir+"/"+leftover, old, old)
	if _, err := NewAccount(1<<30, TempNames{}).Walk(dir, start); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(dir + "/" + leftover); err != nil {
		t.Errorf("a keyless walk removed %s: %v", leftover, err)
	}
}

// TestTempNames: a name is Kiln's only under the key that made it.
func TestTempNames(t *testing.T) {
	names := NewTempNames(bytes.Repeat([]byte{3}, 32))
	n := names.Name("restore-ab-cd")
	if !strings.HasPrefix(n, TempPrefix+"restore-ab-cd-") || len(n) != len(TempPrefix+"restore-ab-cd-")+16 {
		t.Fatalf("Name = %q", n)
	}
	if !names.Ours(n) || !Reserved(n) {
		t.Errorf("Ours(%q) = false", n)
	}
	for _, bad := range []string{
		n[:len(n)-1] + "0", // another tag
		n + "x", TempPrefix + "restore-ab-cd", "restore-ab-cd-" + n[len(n)-16:], "x" + n,
		NewTempNames(bytes.Repeat([]byte{4}, 32)).Name("restore-ab-cd"),
	} {
		if names.Ours(bad) {
			t.Errorf("Ours(%q) = true", bad)
		}
	}
	if (TempNames{}).Ours(TempNames{}.Name("x")) {
		t.Error("a keyless TempNames owns a name")
	}
}

// TestWalkKeepsCommitsMadeMeanwhile: a commit that lands while a walk
// runs is not lost when the walk's figure replaces the old one.
func TestWalkKeepsCommitsMadeMeanwhile(t *testing.T) {
	dir := t.TempDir()
	for i := range 2000 {
		write(t, filepath.Join(dir, strings.Repeat("d", 1+i%7), "f"+string(rune('a'+i%26))+time.Duration(i).String()), 1)
	}
	a := NewAccount(1<<40, TempNames{})
	base, _ := Usage(dir)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 200 {
			r, _ := a.Reserve(4096)
			r.Changed(4096)
			r.Commit()
		}
	}()
	_, err := a.Walk(dir, time.Time{})
	<-done
	if err != nil {
		t.Fatal(err)
	}
	// Commits before the walk began are replaced by the walk (they were
	// not files in dir); the rest are on top. At least the ones made
	// during it, at most all of them.
	if u := a.Figures().Used; u < base || u > base+200*4096 {
		t.Errorf("used = %d, want between %d and %d", u, base, base+200*4096)
	}
}

func TestIsDiskFull(t *testing.T) {
	if !IsDiskFull(&os.PathError{Op: "write", Path: "x", Err: unix.ENOSPC}) || !IsDiskFull(unix.EDQUOT) || IsDiskFull(ErrQuota) {
		t.Error("IsDiskFull is wrong")
	}
}

// TestWriters: Figures.Writers counts the reservations made and not yet
// ended — one of 0 bytes included (a writer that grows as it writes), a
// refused one not, a second Commit or Release not twice.
func TestWriters(t *testing.T) {
	a := NewAccount(10*BlockSize, TempNames{})
	r0, err := a.Reserve(0)
	if err != nil {
		t.Fatal(err)
	}
	r1, err := a.Reserve(BlockSize)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Reserve(100 * BlockSize); !errors.Is(err, ErrQuota) {
		t.Fatalf("Reserve past the limit = %v, want ErrQuota", err)
	}
	if f := a.Figures(); f.Writers != 2 || f.Reserved != BlockSize {
		t.Fatalf("Figures = %+v, want 2 writers holding one block", f)
	}
	r0.Commit()
	r0.Release()
	if f := a.Figures(); f.Writers != 1 {
		t.Fatalf("Writers = %d after one ended (twice), want 1", f.Writers)
	}
	r1.Release()
	if f := a.Figures(); f.Writers != 0 || f.Reserved != 0 {
		t.Fatalf("Figures = %+v after both ended, want none", f)
	}
}

// TestHold: a held account refuses every new reservation but its
// holder's (ErrHeld), lets those made before go on, is held once at a
// time, and after Release reserves for anyone again (the holder's Hold
// no more).
func TestHold(t *testing.T) {
	a := NewAccount(10*BlockSize, TempNames{})
	before, err := a.Reserve(0)
	if err != nil {
		t.Fatal(err)
	}
	h, ok := a.Hold()
	if !ok {
		t.Fatal("Hold of a free account refused")
	}
	if _, ok := a.Hold(); ok {
		t.Error("a second Hold was granted")
	}
	if _, err := a.Reserve(0); !errors.Is(err, ErrHeld) {
		t.Errorf("Reserve while held = %v, want ErrHeld", err)
	}
	if err := before.Grow(BlockSize); err != nil {
		t.Errorf("Grow of a reservation made before the hold = %v", err)
	}
	mine, err := h.Reserve(BlockSize)
	if err != nil {
		t.Fatalf("the holder's Reserve = %v", err)
	}
	if f := a.Figures(); f.Writers != 2 || f.Reserved != 2*BlockSize {
		t.Errorf("Figures = %+v, want 2 writers, 2 blocks", f)
	}
	mine.Changed(BlockSize)
	mine.Commit()
	before.Release()
	h.Release()
	h.Release()
	if _, err := h.Reserve(0); !errors.Is(err, ErrHeld) {
		t.Errorf("the holder's Reserve after Release = %v, want ErrHeld", err)
	}
	r, err := a.Reserve(0)
	if err != nil {
		t.Fatalf("Reserve after Release = %v", err)
	}
	r.Release()
	if f := a.Figures(); f.Writers != 0 || f.Reserved != 0 || f.Used != BlockSize {
		t.Errorf("Figures = %+v at the end, want no writer and the holder's block used", f)
	}
}
