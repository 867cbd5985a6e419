package engine_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/google/uuid"

	"github.com/kilnhq/kiln/internal/files"
	"github.com/kilnhq/kiln/internal/snapshot/engine"
	"github.com/kilnhq/kiln/internal/snapshot/engine/enginetest"
	"github.com/kilnhq/kiln/internal/snapshot/restore"
)

func restoreAll(t testing.TB, root *files.Root, store engine.Store, key string, opts restore.Options) restore.Result {
	t.Helper()
	out, err := restore.Run(t.Context(), root, enginetest.Unlimited(t), store, key, opts)
	if err != nil {
		t.Fatalf("Restore: %v", err)
	}
	return out
}

func TestRoundTrip(t *testing.T) {
	tr := enginetest.Fixture(t)
	want := enginetest.State(t, tr.Dir)
	store := enginetest.NewStore(t)
	var calls int
	var last [2]int64
	var ends []int64 // done of the calls with done == total
	res := enginetest.Create(t, enginetest.OpenRoot(t, tr.Dir), store, engine.CreateOptions{Progress: func(done, total int64) {
		calls++
		if done < last[0] {
			t.Errorf("Progress went back from %d to %d", last[0], done)
		}
		if done == total {
			ends = append(ends, done)
		}
		last = [2]int64{done, total}
	}})
	if res.Files != 310 || res.Dirs != 6 || res.Symlinks != 3 {
		t.Errorf("Create counted %d files, %d dirs, %d links; want 310, 6, 3", res.Files, res.Dirs, res.Symlinks)
	}
	if res.Skipped != (engine.Skipped{}) {
		t.Errorf("Create skipped %+v, want nothing", res.Skipped)
	}
	var size int64
	for _, d := range want {
		var n int64
		if i := strings.Index(d, " size="); i >= 0 {
			fmt.Sscanf(d[i:], " size=%d", &n)
		}
		size += n
	}
	if res.SizeBytes != size {
		t.Errorf("SizeBytes = %d, want %d", res.SizeBytes, size)
	}
	if calls == 0 || last[0] != size || last[1] != size {
		t.Errorf("Progress: %d calls, last %v; want the last to be [%d %d]", calls, last, size, size)
	}
	// Nothing changed under the walk: done reaches total only with every
	// byte (before, the cutter's own end was reported as the end while
	// the file cutters still cut: a client saw 100 % mid-snapshot).
	for _, d := range ends {
		if d != size {
			t.Errorf("Progress said done at %d of %d bytes", d, size)
		}
	}
	if !slices.IsSorted(res.Chunks) || len(slices.Compact(slices.Clone(res.Chunks))) != len(res.Chunks) {
		t.Errorf("Chunks are not sorted and unique")
	}
	if res.NewChunks != len(res.Chunks) {
		t.Errorf("NewChunks = %d, want all %d (empty store)", res.NewChunks, len(res.Chunks))
	}
	for _, k := range res.Chunks {
		if _, err := store.Stat(t.Context(), k); err != nil {
			t.Errorf("chunk %s: %v", k, err)
		}
	}
	keys, err := engine.ChunkKeys(t.Context(), store, res.ManifestKey)
	if err != nil {
		t.Fatalf("ChunkKeys: %v", err)
	}
	slices.Sort(keys)
	if !slices.Equal(keys, res.Chunks) {
		t.Errorf("ChunkKeys = %d keys, Create said %d", len(keys), len(res.Chunks))
	}

	t.Run("into an empty root", func(t *testing.T) {
		dst := t.TempDir()
		out := restoreAll(t, enginetest.OpenRoot(t, dst), store, res.ManifestKey, restore.Options{})
		if d := enginetest.DiffState(want, enginetest.State(t, dst)); d != "" {
			t.Errorf("restored tree differs:\n%s", d)
		}
		if out.Files != res.Files || out.SizeBytes != res.SizeBytes || out.Replaced != 0 {
			t.Errorf("Restore = %+v, want %d files, %d bytes, nothing replaced", out, res.Files, res.SizeBytes)
		}
	})
	t.Run("over a changed tree", func(t *testing.T) {
		// Everything that can differ: content, modes, kinds both ways,
		// extra files and directories, a link retargeted.
		tr.File("server.properties", []byte("motd=changed\n"), 0o600)
		tr.File("world/region/r.0.0.mca", tr.Random(1<<20), 0o644)
		if err := os.RemoveAll(filepath.Join(tr.Dir, "plugins/empty")); err != nil {
			t.Fatal(err)
		}
		tr.File("plugins/empty", []byte("now a file"), 0o644)
		if err := os.Remove(filepath.Join(tr.Dir, "start.sh")); err != nil {
			t.Fatal(err)
		}
		tr.File("start.sh/inside", []byte("now a directory"), 0o644)
		tr.File("extra/deep/file", []byte("extra"), 0o644)
		tr.File("world/extra.dat", []byte("extra"), 0o644)
		tr.Symlink("empty", "config-link")
		if err := os.Chmod(filepath.Join(tr.Dir, "world"), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Remove(filepath.Join(tr.Dir, "world/playerdata/0007.dat")); err != nil {
			t.Fatal(err)
		}
		out := restoreAll(t, enginetest.OpenRoot(t, tr.Dir), store, res.ManifestKey, restore.Options{})
		if d := enginetest.DiffState(want, enginetest.State(t, tr.Dir)); d != "" {
			t.Errorf("restored tree differs:\n%s", d)
		}
		if out.Replaced == 0 {
			t.Errorf("Restore replaced nothing")
		}
	})
}

func TestIgnore(t *testing.T) {
	tr := enginetest.NewTree(t)
	tr.File("world/level.dat", []byte("level"), 0o644)
	tr.File("logs/latest.log", []byte("log 1"), 0o644)
	tr.File("cache/big.bin", tr.Random(1<<20), 0o644)
	tr.File("plugins/x.jar", []byte("jar"), 0o644)
	tr.File("plugins/x.tmp", []byte("tmp 1"), 0o644)
	tr.StampDirs()
	ignore := func(rel string, isDir bool) bool {
		return rel == "logs" && isDir || rel == "cache" || strings.HasSuffix(rel, ".tmp")
	}
	store := enginetest.NewStore(t)
	root := enginetest.OpenRoot(t, tr.Dir)
	res := enginetest.Create(t, root, store, engine.CreateOptions{Ignore: ignore})
	if res.Files != 2 {
		t.Errorf("Create recorded %d files, want 2 (world/level.dat, plugins/x.jar)", res.Files)
	}
	snap := enginetest.State(t, tr.Dir)

	// Change everything; the ignored paths must come out as they are now.
	tr.File("world/level.dat", []byte("level 2"), 0o644)
	tr.File("plugins/x.jar", []byte("jar 2"), 0o644)
	tr.File("plugins/x.tmp", []byte("tmp 2"), 0o644)
	tr.File("plugins/new.tmp", []byte("new tmp"), 0o644)
	tr.File("logs/latest.log", []byte("log 2"), 0o644)
	tr.File("newdir/keep.tmp", []byte("kept: ignored"), 0o644)
	tr.File("newdir/drop.txt", []byte("dropped"), 0o644)
	tr.File("gone/file", []byte("dropped"), 0o644)
	before := enginetest.State(t, tr.Dir)

	restoreAll(t, root, store, res.ManifestKey, restore.Options{Ignore: ignore})
	got := enginetest.State(t, tr.Dir)
	for _, p := range []string{"world/level.dat", "plugins/x.jar"} {
		if got[p] != snap[p] {
			t.Errorf("%s = %s, want the snapshot's %s", p, got[p], snap[p])
		}
	}
	for _, p := range []string{"logs/latest.log", "cache/big.bin", "plugins/x.tmp", "plugins/new.tmp", "newdir/keep.tmp"} {
		if got[p] != before[p] {
			t.Errorf("ignored %s = %s, want it untouched: %s", p, got[p], before[p])
		}
	}
	for _, p := range []string{"newdir/drop.txt", "gone/file", "gone"} {
		if _, ok := got[p]; ok {
			t.Errorf("%s is still there; the snapshot does not hold it and it is not ignored", p)
		}
	}
}

func TestDedup(t *testing.T) {
	tr := enginetest.NewTree(t)
	for i := range 20 {
		tr.File(fmt.Sprintf("world/region/r.%d.mca", i), tr.Random(2<<20+i*4097), 0o644)
	}
	for i := range 100 {
		tr.File(fmt.Sprintf("playerdata/%d.dat", i), fmt.Appendf(nil, "player %d", i), 0o644)
	}
	store := enginetest.NewStore(t)
	root := enginetest.OpenRoot(t, tr.Dir)
	first := enginetest.Create(t, root, store, engine.CreateOptions{})

	// Change ~1% of the tree: 400 KiB in the middle of one region file.
	p := filepath.Join(tr.Dir, "world/region/r.7.mca")
	f, err := os.OpenFile(p, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(tr.Random(400<<10), 1<<20); err != nil {
		t.Fatal(err)
	}
	f.Close()
	second := enginetest.Create(t, root, store, engine.CreateOptions{})
	if second.NewChunks == 0 || second.NewChunks > 3 {
		t.Errorf("second snapshot uploaded %d chunks, want 1 to 3 (of %d)", second.NewChunks, len(second.Chunks))
	}
	if second.StoredBytes*10 > first.StoredBytes {
		t.Errorf("second snapshot stored %d bytes, the first %d: want < 10%%", second.StoredBytes, first.StoredBytes)
	}
	t.Logf("first: %d chunks, %d bytes stored; second: %d new of %d, %d bytes stored",
		first.NewChunks, first.StoredBytes, second.NewChunks, len(second.Chunks), second.StoredBytes)

	// Known chunks are neither looked up nor uploaded.
	known := map[string]bool{}
	for _, k := range second.Chunks {
		known[k] = true
	}
	third := enginetest.Create(t, root, store, engine.CreateOptions{Known: func(k string) bool { return known[k] }})
	if third.NewChunks != 0 || len(third.Chunks) != len(second.Chunks) {
		t.Errorf("third snapshot: %d new chunks of %d, want 0 of %d", third.NewChunks, len(third.Chunks), len(second.Chunks))
	}
}

func TestCreateSkips(t *testing.T) {
	tr := enginetest.NewTree(t)
	tr.File("a.txt", []byte("a"), 0o644)
	outside := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(outside, []byte("secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(outside, filepath.Join(tr.Dir, "hardlink")); err != nil {
		t.Skipf("no hard links across these temporary directories: %v", err)
	}
	tr.Symlink(outside, "abs-link")
	tr.Symlink("../x", "up")
	tr.Symlink("d/../a.txt", "dotdot-after-name")
	tr.Symlink(".", "self")
	tr.Symlink("self/../..", "through-self") // inside on paper, outside on disk
	if err := syscall.Mkfifo(filepath.Join(tr.Dir, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	store := enginetest.NewStore(t)
	res := enginetest.Create(t, enginetest.OpenRoot(t, tr.Dir), store, engine.CreateOptions{})
	want := engine.Skipped{HardLinks: 1, Links: 4, Special: 1}
	if res.Skipped != want {
		t.Errorf("Skipped = %+v, want %+v", res.Skipped, want)
	}
	if res.Files != 1 || res.Symlinks != 1 {
		t.Errorf("Create recorded %d files, %d links; want 1 (a.txt), 1 (self)", res.Files, res.Symlinks)
	}
}

func TestCreateIDs(t *testing.T) {
	tr := enginetest.NewTree(t)
	tr.File("a", []byte("a"), 0o644)
	store := enginetest.NewStore(t)
	root := enginetest.OpenRoot(t, tr.Dir)
	id := uuid.NewString()
	res := enginetest.Create(t, root, store, engine.CreateOptions{ID: id})
	if res.ID != id || res.ManifestKey != "manifests/"+id {
		t.Errorf("Create = %q %q, want %q manifests/%s", res.ID, res.ManifestKey, id, id)
	}
	if _, err := engine.Create(t.Context(), root, store, engine.CreateOptions{ID: id}); !errors.Is(err, engine.ErrExists) {
		t.Errorf("Create with a used id: %v, want ErrExists", err)
	}
	for _, bad := range []string{"../x", "ABCDEF00-0000-0000-0000-000000000000", "x"} {
		if _, err := engine.Create(t.Context(), root, store, engine.CreateOptions{ID: bad}); err == nil {
			t.Errorf("Create(ID %q) succeeded", bad)
		}
	}
}
