package engine_test

import (
	"fmt"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/kilnhq/kiln/internal/snapshot/engine"
	"github.com/kilnhq/kiln/internal/snapshot/engine/enginetest"
	"github.com/kilnhq/kiln/internal/snapshot/restore"
)

// TestPacks: small files share chunks (packs), within the bounds on
// files per pack and entries held; a changed small file changes its pack
// and the next at most.
func TestPacks(t *testing.T) {
	tr := enginetest.NewTree(t)
	for i := range 3000 {
		tr.File(fmt.Sprintf("playerdata/%05d.dat", i), tr.Random(1+i%200), 0o644)
	}
	for i := range 1500 {
		tr.Mkdir(fmt.Sprintf("many/d%05d", i), 0o755) // entries held behind an open pack
		tr.File(fmt.Sprintf("many/d%05d/f", i), tr.Random(i%3), 0o644)
	}
	for i := range 40 {
		tr.File(fmt.Sprintf("stats/%02d.json", i), tr.Random(100<<10), 0o644) // ~4 MiB of mid-sized files
	}
	tr.StampDirs()
	want := enginetest.State(t, tr.Dir)
	store := enginetest.NewStore(t)
	root := enginetest.OpenRoot(t, tr.Dir)
	first := enginetest.Create(t, root, store, engine.CreateOptions{})
	if len(first.Chunks) > 20 {
		t.Errorf("%d files in %d chunks, want packs (<= 20)", first.Files, len(first.Chunks))
	}
	dst := t.TempDir()
	restoreAll(t, enginetest.OpenRoot(t, dst), store, first.ManifestKey, restore.Options{Workers: 3})
	if d := enginetest.DiffState(want, enginetest.State(t, dst)); d != "" {
		t.Errorf("restored tree differs:\n%s", d)
	}

	tr.File("playerdata/01234.dat", []byte("changed"), 0o644)
	second := enginetest.Create(t, root, store, engine.CreateOptions{})
	if second.NewChunks == 0 || second.NewChunks > 2 {
		t.Errorf("one small file changed: %d new chunks, want 1 or 2", second.NewChunks)
	}
	t.Logf("%d files: %d chunks; one changed: %d new", first.Files, len(first.Chunks), second.NewChunks)
}

// TestFileCutters: whatever the number of file cutters (Workers 1, 2, 4:
// 1 to 4 large files cut at once, 4 to 9 slabs), a tree where large
// files, small ones and directories alternate in walk order is stored
// as the same chunks, with the same manifest entries, and restores byte
// for byte; Progress is called one call at a time and ends at the total.
func TestFileCutters(t *testing.T) {
	tr := enginetest.NewTree(t)
	for i := range 24 {
		dir := fmt.Sprintf("d%02d", i)
		tr.File(dir+"/a.small", tr.Random(100+i), 0o644)
		tr.File(dir+"/b.large", tr.Random(engine.MinChunk+1+i*(700<<10)), 0o644) // 256 KiB to 16 MiB
		tr.File(dir+"/c.small", tr.Random(i), 0o600)
		tr.Mkdir(dir+"/e", 0o755)
	}
	tr.StampDirs()
	want := enginetest.State(t, tr.Dir)
	root := enginetest.OpenRoot(t, tr.Dir)
	var chunks []string
	var entries int
	for _, workers := range []int{1, 2, 4} {
		store := enginetest.NewStore(t)
		var calls, inside atomic.Int32
		var last, total int64
		res := enginetest.Create(t, root, store, engine.CreateOptions{Workers: workers, Progress: func(done, tot int64) {
			if inside.Add(1) != 1 {
				t.Error("Progress called while a call is in progress")
			}
			calls.Add(1)
			last, total = done, tot
			inside.Add(-1)
		}})
		if calls.Load() == 0 || last != total || last != res.SizeBytes {
			t.Errorf("workers %d: %d Progress calls, last %d of %d, want the size %d", workers, calls.Load(), last, total, res.SizeBytes)
		}
		if chunks == nil {
			chunks, entries = res.Chunks, res.Files+res.Dirs
		} else if !slices.Equal(res.Chunks, chunks) || res.Files+res.Dirs != entries {
			t.Errorf("workers %d: %d chunks, %d entries; workers 1: %d, %d", workers, len(res.Chunks), res.Files+res.Dirs, len(chunks), entries)
		}
		dst := t.TempDir()
		restoreAll(t, enginetest.OpenRoot(t, dst), store, res.ManifestKey, restore.Options{})
		if d := enginetest.DiffState(want, enginetest.State(t, dst)); d != "" {
			t.Errorf("workers %d: restored tree differs:\n%s", workers, d)
		}
	}
}
