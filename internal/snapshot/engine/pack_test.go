package engine

import (
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
)

// TestPacks: small files share chunks (packs), within the bounds on
// files per pack and entries held; a changed small file changes its pack
// and the next at most.
func TestPacks(t *testing.T) {
	tr := newTree(t)
	for i := range 3000 {
		tr.file(fmt.Sprintf("playerdata/%05d.dat", i), tr.random(1+i%200), 0o644)
	}
	for i := range 1500 {
		tr.mkdir(fmt.Sprintf("many/d%05d", i), 0o755) // entries held behind an open pack
		tr.file(fmt.Sprintf("many/d%05d/f", i), tr.random(i%3), 0o644)
	}
	for i := range 40 {
		tr.file(fmt.Sprintf("stats/%02d.json", i), tr.random(100<<10), 0o644) // ~4 MiB of mid-sized files
	}
	tr.stampDirs()
	want := state(t, tr.dir)
	store := newStore(t)
	root := openRoot(t, tr.dir)
	first := create(t, root, store, CreateOptions{})
	if len(first.Chunks) > 20 {
		t.Errorf("%d files in %d chunks, want packs (<= 20)", first.Files, len(first.Chunks))
	}
	dst := t.TempDir()
	restore(t, openRoot(t, dst), store, first.ManifestKey, RestoreOptions{Workers: 3})
	if d := diffState(want, state(t, dst)); d != "" {
		t.Errorf("restored tree differs:\n%s", d)
	}

	tr.file("playerdata/01234.dat", []byte("changed"), 0o644)
	second := create(t, root, store, CreateOptions{})
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
	tr := newTree(t)
	for i := range 24 {
		dir := fmt.Sprintf("d%02d", i)
		tr.file(dir+"/a.small", tr.random(100+i), 0o644)
		tr.file(dir+"/b.large", tr.random(minChunk+1+i*(700<<10)), 0o644) // 256 KiB to 16 MiB
		tr.file(dir+"/c.small", tr.random(i), 0o600)
		tr.mkdir(dir+"/e", 0o755)
	}
	tr.stampDirs()
	want := state(t, tr.dir)
	root := openRoot(t, tr.dir)
	var chunks []string
	var entries int
	for _, workers := range []int{1, 2, 4} {
		store := newStore(t)
		var calls, inside atomic.Int32
		var last, total int64
		res := create(t, root, store, CreateOptions{Workers: workers, Progress: func(done, tot int64) {
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
		restore(t, openRoot(t, dst), store, res.ManifestKey, RestoreOptions{})
		if d := diffState(want, state(t, dst)); d != "" {
			t.Errorf("workers %d: restored tree differs:\n%s", workers, d)
		}
	}
}
