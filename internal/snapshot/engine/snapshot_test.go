package engine

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
	"github.com/kilnhq/kiln/internal/quota"
)

// fixture builds a tree with every kind of entry a snapshot records.
func fixture(t testing.TB) *tree {
	tr := newTree(t)
	tr.file("server.properties", []byte("motd=hello\nmax-players=20\n"), 0o644)
	tr.file("empty", nil, 0o600)
	tr.file("start.sh", []byte("#!/bin/sh\nexec java -jar server.jar\n"), 0o755)
	tr.file("world/region/r.0.0.mca", tr.random(30<<20), 0o644)
	tr.file("world/region/r.0.1.mca", tr.random(maxChunk), 0o644)   // exactly one maximal chunk
	tr.file("world/region/r.1.0.mca", tr.random(2*maxChunk), 0o644) // cut at the maximum twice
	tr.file("world/level.dat", tr.random(minChunk), 0o644)          // exactly the minimal chunk
	tr.file("world/session.lock", tr.random(minChunk+1), 0o400)
	for i := range 300 {
		tr.file(fmt.Sprintf("world/playerdata/%04d.dat", i), fmt.Appendf(nil, "player %d %s", i, tr.random(i)), 0o644)
	}
	tr.mkdir("plugins/empty", 0o750)
	tr.mkdir("plugins/Essentials", 0o755)
	tr.file("plugins/Essentials/config.yml", []byte("a: 1\n"), 0o640)
	tr.symlink("plugins/Essentials/config.yml", "config-link")
	tr.symlink("../server.properties", "plugins/props")
	tr.symlink("missing-target", "dangling")
	tr.file("name with spaces & ünïcode\n.txt", []byte("odd name"), 0o644)
	tr.stampDirs()
	return tr
}

func create(t testing.TB, root *files.Root, store Store, opts CreateOptions) Result {
	t.Helper()
	res, err := Create(t.Context(), root, store, opts)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	return res
}

func restore(t testing.TB, root *files.Root, store Store, key string, opts RestoreOptions) RestoreResult {
	t.Helper()
	out, err := Restore(t.Context(), root, unlimited(t), store, key, opts)
	if err != nil {
		t.Fatalf("Restore: %v", err)
	}
	return out
}

func TestRoundTrip(t *testing.T) {
	tr := fixture(t)
	want := state(t, tr.dir)
	store := newStore(t)
	var calls int
	var last [2]int64
	res := create(t, openRoot(t, tr.dir), store, CreateOptions{Progress: func(done, total int64) {
		calls++
		last = [2]int64{done, total}
	}})
	if res.Files != 310 || res.Dirs != 6 || res.Symlinks != 3 {
		t.Errorf("Create counted %d files, %d dirs, %d links; want 310, 6, 3", res.Files, res.Dirs, res.Symlinks)
	}
	if res.Skipped != (Skipped{}) {
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
	keys, err := ChunkKeys(t.Context(), store, res.ManifestKey)
	if err != nil {
		t.Fatalf("ChunkKeys: %v", err)
	}
	slices.Sort(keys)
	if !slices.Equal(keys, res.Chunks) {
		t.Errorf("ChunkKeys = %d keys, Create said %d", len(keys), len(res.Chunks))
	}

	t.Run("into an empty root", func(t *testing.T) {
		dst := t.TempDir()
		out := restore(t, openRoot(t, dst), store, res.ManifestKey, RestoreOptions{})
		if d := diffState(want, state(t, dst)); d != "" {
			t.Errorf("restored tree differs:\n%s", d)
		}
		if out.Files != res.Files || out.SizeBytes != res.SizeBytes || out.Replaced != 0 {
			t.Errorf("Restore = %+v, want %d files, %d bytes, nothing replaced", out, res.Files, res.SizeBytes)
		}
	})
	t.Run("over a changed tree", func(t *testing.T) {
		// Everything that can differ: content, modes, kinds both ways,
		// extra files and directories, a link retargeted.
		tr.file("server.properties", []byte("motd=changed\n"), 0o600)
		tr.file("world/region/r.0.0.mca", tr.random(1<<20), 0o644)
		if err := os.RemoveAll(filepath.Join(tr.dir, "plugins/empty")); err != nil {
			t.Fatal(err)
		}
		tr.file("plugins/empty", []byte("now a file"), 0o644)
		if err := os.Remove(filepath.Join(tr.dir, "start.sh")); err != nil {
			t.Fatal(err)
		}
		tr.file("start.sh/inside", []byte("now a directory"), 0o644)
		tr.file("extra/deep/file", []byte("extra"), 0o644)
		tr.file("world/extra.dat", []byte("extra"), 0o644)
		tr.symlink("empty", "config-link")
		if err := os.Chmod(filepath.Join(tr.dir, "world"), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Remove(filepath.Join(tr.dir, "world/playerdata/0007.dat")); err != nil {
			t.Fatal(err)
		}
		out := restore(t, openRoot(t, tr.dir), store, res.ManifestKey, RestoreOptions{})
		if d := diffState(want, state(t, tr.dir)); d != "" {
			t.Errorf("restored tree differs:\n%s", d)
		}
		if out.Replaced == 0 {
			t.Errorf("Restore replaced nothing")
		}
	})
}

func TestIgnore(t *testing.T) {
	tr := newTree(t)
	tr.file("world/level.dat", []byte("level"), 0o644)
	tr.file("logs/latest.log", []byte("log 1"), 0o644)
	tr.file("cache/big.bin", tr.random(1<<20), 0o644)
	tr.file("plugins/x.jar", []byte("jar"), 0o644)
	tr.file("plugins/x.tmp", []byte("tmp 1"), 0o644)
	tr.stampDirs()
	ignore := func(rel string, isDir bool) bool {
		return rel == "logs" && isDir || rel == "cache" || strings.HasSuffix(rel, ".tmp")
	}
	store := newStore(t)
	root := openRoot(t, tr.dir)
	res := create(t, root, store, CreateOptions{Ignore: ignore})
	if res.Files != 2 {
		t.Errorf("Create recorded %d files, want 2 (world/level.dat, plugins/x.jar)", res.Files)
	}
	snap := state(t, tr.dir)

	// Change everything; the ignored paths must come out as they are now.
	tr.file("world/level.dat", []byte("level 2"), 0o644)
	tr.file("plugins/x.jar", []byte("jar 2"), 0o644)
	tr.file("plugins/x.tmp", []byte("tmp 2"), 0o644)
	tr.file("plugins/new.tmp", []byte("new tmp"), 0o644)
	tr.file("logs/latest.log", []byte("log 2"), 0o644)
	tr.file("newdir/keep.tmp", []byte("kept: ignored"), 0o644)
	tr.file("newdir/drop.txt", []byte("dropped"), 0o644)
	tr.file("gone/file", []byte("dropped"), 0o644)
	before := state(t, tr.dir)

	restore(t, root, store, res.ManifestKey, RestoreOptions{Ignore: ignore})
	got := state(t, tr.dir)
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
	tr := newTree(t)
	for i := range 20 {
		tr.file(fmt.Sprintf("world/region/r.%d.mca", i), tr.random(2<<20+i*4097), 0o644)
	}
	for i := range 100 {
		tr.file(fmt.Sprintf("playerdata/%d.dat", i), fmt.Appendf(nil, "player %d", i), 0o644)
	}
	store := newStore(t)
	root := openRoot(t, tr.dir)
	first := create(t, root, store, CreateOptions{})

	// Change ~1% of the tree: 400 KiB in the middle of one region file.
	p := filepath.Join(tr.dir, "world/region/r.7.mca")
	f, err := os.OpenFile(p, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(tr.random(400<<10), 1<<20); err != nil {
		t.Fatal(err)
	}
	f.Close()
	second := create(t, root, store, CreateOptions{})
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
	third := create(t, root, store, CreateOptions{Known: func(k string) bool { return known[k] }})
	if third.NewChunks != 0 || len(third.Chunks) != len(second.Chunks) {
		t.Errorf("third snapshot: %d new chunks of %d, want 0 of %d", third.NewChunks, len(third.Chunks), len(second.Chunks))
	}
}

func TestCreateSkips(t *testing.T) {
	tr := newTree(t)
	tr.file("a.txt", []byte("a"), 0o644)
	outside := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(outside, []byte("secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(outside, filepath.Join(tr.dir, "hardlink")); err != nil {
		t.Skipf("no hard links across these temporary directories: %v", err)
	}
	tr.symlink(outside, "abs-link")
	tr.symlink("../x", "up")
	tr.symlink("d/../a.txt", "dotdot-after-name")
	tr.symlink(".", "self")
	tr.symlink("self/../..", "through-self") // inside on paper, outside on disk
	if err := syscall.Mkfifo(filepath.Join(tr.dir, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	store := newStore(t)
	res := create(t, openRoot(t, tr.dir), store, CreateOptions{})
	want := Skipped{HardLinks: 1, Links: 4, Special: 1}
	if res.Skipped != want {
		t.Errorf("Skipped = %+v, want %+v", res.Skipped, want)
	}
	if res.Files != 1 || res.Symlinks != 1 {
		t.Errorf("Create recorded %d files, %d links; want 1 (a.txt), 1 (self)", res.Files, res.Symlinks)
	}
}

func TestCreateIDs(t *testing.T) {
	tr := newTree(t)
	tr.file("a", []byte("a"), 0o644)
	store := newStore(t)
	root := openRoot(t, tr.dir)
	id := uuid.NewString()
	res := create(t, root, store, CreateOptions{ID: id})
	if res.ID != id || res.ManifestKey != "manifests/"+id {
		t.Errorf("Create = %q %q, want %q manifests/%s", res.ID, res.ManifestKey, id, id)
	}
	if _, err := Create(t.Context(), root, store, CreateOptions{ID: id}); !errors.Is(err, ErrExists) {
		t.Errorf("Create with a used id: %v, want ErrExists", err)
	}
	for _, bad := range []string{"../x", "ABCDEF00-0000-0000-0000-000000000000", "x"} {
		if _, err := Create(t.Context(), root, store, CreateOptions{ID: bad}); err == nil {
			t.Errorf("Create(ID %q) succeeded", bad)
		}
	}
}

func TestRestoreQuota(t *testing.T) {
	tr := newTree(t)
	tr.file("big", tr.random(3<<20), 0o644)
	store := newStore(t)
	res := create(t, openRoot(t, tr.dir), store, CreateOptions{})
	dst := t.TempDir()
	before := state(t, dst)
	acct := quota.NewAccount(1 << 20)
	r, err := acct.Reserve(0)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Release()
	_, err = Restore(t.Context(), openRoot(t, dst), r, store, res.ManifestKey, RestoreOptions{})
	if !errors.Is(err, files.ErrQuota) {
		t.Fatalf("Restore over the limit: %v, want files.ErrQuota", err)
	}
	if d := diffState(before, state(t, dst)); d != "" {
		t.Errorf("a refused restore changed the tree:\n%s", d)
	}

	// Within the limit: the change is what the tree now costs.
	acct = quota.NewAccount(1 << 30)
	r, err = acct.Reserve(0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Restore(t.Context(), openRoot(t, dst), r, store, res.ManifestKey, RestoreOptions{}); err != nil {
		t.Fatalf("Restore: %v", err)
	}
	if got, want := r.Change(), quota.Cost(3<<20); got != want {
		t.Errorf("reservation change = %d, want %d", got, want)
	}
	r.Commit()
	if got, _ := quota.Usage(dst, noTime); got != quota.Cost(3<<20) {
		t.Errorf("the root costs %d after the restore, want %d", got, quota.Cost(3<<20))
	}

	// Over the same tree with 1 MiB free (3 used of 4): the file stays in
	// place, nothing needs reserving.
	acct = quota.NewAccount(4 << 20)
	acct.Adjust(quota.Cost(3 << 20))
	r, err = acct.Reserve(0)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Release()
	out, err := Restore(t.Context(), openRoot(t, dst), r, store, res.ManifestKey, RestoreOptions{})
	if err != nil || out.Kept != 1 {
		t.Fatalf("Restore over an equal tree near the limit = %+v, %v; want the file kept", out, err)
	}
	if r.Change() != 0 {
		t.Errorf("reservation change = %d, want 0", r.Change())
	}
	// Its content changed (same size): it must be staged, and 3 MiB do
	// not fit in the 1 MiB free; refused, the tree as it was.
	f, err := os.OpenFile(filepath.Join(dst, "big"), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("changed"), 1<<20); err != nil {
		t.Fatal(err)
	}
	f.Close()
	before = state(t, dst)
	if _, err := Restore(t.Context(), openRoot(t, dst), r, store, res.ManifestKey, RestoreOptions{}); !errors.Is(err, files.ErrQuota) {
		t.Errorf("Restore of a changed file over the limit: %v, want files.ErrQuota", err)
	}
	if d := diffState(before, withoutStaging(state(t, dst))); d != "" {
		t.Errorf("a refused restore changed the tree:\n%s", d)
	}
	if left, _ := filepath.Glob(filepath.Join(dst, restorePrefix+"*")); len(left) != 0 {
		t.Errorf("left behind: %v", left)
	}
}
