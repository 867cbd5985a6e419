package engine_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/kilnhq/kiln/internal/blob"
	"github.com/kilnhq/kiln/internal/snapshot/engine"
	"github.com/kilnhq/kiln/internal/snapshot/engine/enginetest"
	"github.com/kilnhq/kiln/internal/snapshot/manifest"
	"github.com/kilnhq/kiln/internal/snapshot/restore"
)

// parentTree is a tree with two large files, one more, and a pack's worth
// of small files, every mtime in the past.
func parentTree(t *testing.T) *enginetest.Tree {
	tr := enginetest.NewTree(t)
	tr.File("world/region/r.0.0.mca", tr.Random(3<<20), 0o644)
	tr.File("world/region/r.0.1.mca", tr.Random(1<<20+12345), 0o644)
	tr.File("world/region/r.1.0.mca", tr.Random(700<<10), 0o644)
	for i := range 60 {
		tr.File(fmt.Sprintf("plugins/p%02d.yml", i), bytes.Repeat([]byte{byte('a' + i%26)}, 1000+i), 0o644)
	}
	tr.StampDirs()
	return tr
}

// rewrite writes data over the file rel in place (same inode), and gives
// it mtime m (zero: leave the write's).
func rewrite(t *testing.T, tr *enginetest.Tree, rel string, data []byte, m time.Time) {
	t.Helper()
	p := filepath.Join(tr.Dir, rel)
	dir := filepath.Dir(p)
	fi, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if !m.IsZero() {
		if err := os.Chtimes(p, m, m); err != nil {
			t.Fatal(err)
		}
	}
	// The directory's mtime as it was: only the file changed.
	if err := os.Chtimes(dir, fi.ModTime(), fi.ModTime()); err != nil {
		t.Fatal(err)
	}
}

func mtimeOf(t *testing.T, tr *enginetest.Tree, rel string) time.Time {
	t.Helper()
	fi, err := os.Stat(filepath.Join(tr.Dir, rel))
	if err != nil {
		t.Fatal(err)
	}
	return fi.ModTime()
}

// later is a clock a minute ahead: the tree's files, made just now,
// changed long before a snapshot that reads it.
func later() time.Time { return time.Now().Add(time.Minute) }

// checkRestores restores key into an empty root and compares it with want.
func checkRestores(t *testing.T, store engine.Store, key string, want map[string]string) {
	t.Helper()
	dst := t.TempDir()
	restoreAll(t, enginetest.OpenRoot(t, dst), store, key, restore.Options{})
	if d := enginetest.DiffState(want, enginetest.State(t, dst)); d != "" {
		t.Errorf("restored tree differs:\n%s", d)
	}
}

// checkStored: every chunk the result lists is in the store.
func checkStored(t *testing.T, store engine.Store, res engine.Result) {
	t.Helper()
	for _, k := range res.Chunks {
		if _, err := store.Stat(t.Context(), k); err != nil {
			t.Errorf("chunk %s of the manifest: %v", k, err)
		}
	}
	keys, err := engine.ChunkKeys(t.Context(), store, res.ManifestKey)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(keys)
	if !slices.Equal(keys, res.Chunks) {
		t.Errorf("Result.Chunks = %d keys, the manifest references %d", len(res.Chunks), len(keys))
	}
}

// TestParentReuse: with the previous snapshot as parent, unchanged files
// are not read and keep their extents (small files too, in the parent's
// pack even though another file of that pack changed); a file rewritten
// with the same size is read, whether its mtime moved or was put back
// (its ctime moved); the snapshot restores byte for byte.
func TestParentReuse(t *testing.T) {
	tr := parentTree(t)
	store := enginetest.NewStore(t)
	first := enginetest.Create(t, enginetest.OpenRoot(t, tr.Dir), store, engine.CreateOptions{Now: later})
	if first.ReusedFiles != 0 || first.ParentErr != nil {
		t.Fatalf("first snapshot: reused %d, parent error %v", first.ReusedFiles, first.ParentErr)
	}

	// Same size, new content, mtime put back: only the ctime tells.
	old := mtimeOf(t, tr, "world/region/r.0.1.mca")
	rewrite(t, tr, "world/region/r.0.1.mca", tr.Random(1<<20+12345), old)
	// Same size, new content, new mtime.
	rewrite(t, tr, "world/region/r.1.0.mca", tr.Random(700<<10), time.Time{})
	// One small file of the pack, same size.
	rewrite(t, tr, "plugins/p07.yml", bytes.Repeat([]byte{'Z'}, 1007), mtimeOf(t, tr, "plugins/p07.yml"))
	want := enginetest.State(t, tr.Dir)

	second := enginetest.Create(t, enginetest.OpenRoot(t, tr.Dir), store, engine.CreateOptions{Parent: first.ManifestKey, Now: func() time.Time { return later().Add(time.Minute) }})
	if second.ParentErr != nil {
		t.Fatalf("second snapshot: parent error %v", second.ParentErr)
	}
	if want := second.Files - 3; second.ReusedFiles != want {
		t.Errorf("second snapshot reused %d files, want %d (all but the three changed)", second.ReusedFiles, want)
	}
	if want := int64(3<<20 + 59*1000 + 59*60/2 - 7); second.ReusedBytes != want {
		t.Errorf("second snapshot reused %d bytes, want %d", second.ReusedBytes, want)
	}
	// The large changed files' chunks and a pack holding p07.yml only.
	if second.NewChunks < 3 || second.StoredBytes > int64(3<<20) {
		t.Errorf("second snapshot: %d new chunks, %d bytes stored", second.NewChunks, second.StoredBytes)
	}
	checkStored(t, store, second)
	checkRestores(t, store, second.ManifestKey, want)

	// A third snapshot of the unchanged tree reads nothing of it.
	third := enginetest.Create(t, enginetest.OpenRoot(t, tr.Dir), store, engine.CreateOptions{Parent: second.ManifestKey, Now: func() time.Time { return later().Add(2 * time.Minute) }})
	if third.ReusedFiles != third.Files || third.NewChunks != 0 {
		t.Errorf("third snapshot: reused %d of %d files, %d new chunks; want all, none", third.ReusedFiles, third.Files, third.NewChunks)
	}
	checkRestores(t, store, third.ManifestKey, want)
}

// TestParentWindow: files that changed within engine.ParentWindow of the
// parent's start are read again, even with every stat equal (the parent
// may have read them mid-change within one tick of the clock).
func TestParentWindow(t *testing.T) {
	tr := parentTree(t)
	store := enginetest.NewStore(t)
	// The files' ctimes are now: within the window of a parent starting now.
	first := enginetest.Create(t, enginetest.OpenRoot(t, tr.Dir), store, engine.CreateOptions{})
	want := enginetest.State(t, tr.Dir)
	second := enginetest.Create(t, enginetest.OpenRoot(t, tr.Dir), store, engine.CreateOptions{Parent: first.ManifestKey, Now: later})
	if second.ParentErr != nil || second.ReusedFiles != 0 {
		t.Errorf("second snapshot: reused %d files (parent error %v), want none: all changed within %v of the parent's start",
			second.ReusedFiles, second.ParentErr, engine.ParentWindow)
	}
	if second.NewChunks != 0 {
		t.Errorf("second snapshot stored %d new chunks of an unchanged tree", second.NewChunks)
	}
	checkRestores(t, store, second.ManifestKey, want)
}

// TestParentChunkMissing: a chunk of the parent collected since (its blob
// gone) is not referenced unread: the files that held it are read and it
// is stored again, so the manifest never names a missing chunk.
func TestParentChunkMissing(t *testing.T) {
	tr := parentTree(t)
	store := enginetest.NewStore(t)
	first := enginetest.Create(t, enginetest.OpenRoot(t, tr.Dir), store, engine.CreateOptions{Now: later})
	// The first chunk of r.0.0.mca, and the pack of the small files.
	var gone []string
	err := scanKey(t, store, first.ManifestKey, func(en *manifest.Entry) {
		if en.Path == "world/region/r.0.0.mca" || en.Path == "plugins/p30.yml" {
			gone = append(gone, manifest.ChunkKey("", en.Extents[0].Chunk.Sum))
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range gone {
		if err := store.Delete(t.Context(), k); err != nil {
			t.Fatal(err)
		}
	}
	want := enginetest.State(t, tr.Dir)
	var mu sync.Mutex
	var pinned []string
	second := enginetest.Create(t, enginetest.OpenRoot(t, tr.Dir), store, engine.CreateOptions{Parent: first.ManifestKey, Now: later,
		Pin: func(_ context.Context, key string) error {
			mu.Lock()
			defer mu.Unlock()
			pinned = append(pinned, key)
			return nil
		}})
	if second.ReusedFiles == 0 || second.ReusedFiles == second.Files {
		t.Errorf("second snapshot reused %d of %d files, want some read again", second.ReusedFiles, second.Files)
	}
	if second.NewChunks != len(gone) {
		t.Errorf("second snapshot stored %d chunks, want the %d collected ones again", second.NewChunks, len(gone))
	}
	checkStored(t, store, second)
	checkRestores(t, store, second.ManifestKey, want)
	// Every chunk it references was pinned before it was used.
	for _, k := range second.Chunks {
		if !slices.Contains(pinned, k) {
			t.Errorf("chunk %s referenced without a pin", k)
		}
	}
}

// TestParentVersion1: a version-1 manifest still restores, and as a parent
// it is not used (it records no ctime or inode): every file is read.
func TestParentVersion1(t *testing.T) {
	tr := parentTree(t)
	store := enginetest.NewStore(t)
	first := enginetest.Create(t, enginetest.OpenRoot(t, tr.Dir), store, engine.CreateOptions{Now: later})
	want := enginetest.State(t, tr.Dir)
	var entries []manifest.Entry
	if err := scanKey(t, store, first.ManifestKey, func(en *manifest.Entry) {
		c := *en
		c.Extents = slices.Clone(en.Extents)
		entries = append(entries, c)
	}); err != nil {
		t.Fatal(err)
	}
	v1 := enginetest.PutManifestVersion(t, store, uuid.NewString(), 1, entries...)
	checkRestores(t, store, v1, want)

	second := enginetest.Create(t, enginetest.OpenRoot(t, tr.Dir), store, engine.CreateOptions{Parent: v1, Now: later})
	if !errors.Is(second.ParentErr, engine.ErrParentVersion) || second.ReusedFiles != 0 {
		t.Errorf("second snapshot: parent error %v, reused %d; want ErrParentVersion, none", second.ParentErr, second.ReusedFiles)
	}
	checkRestores(t, store, second.ManifestKey, want)

	// A parent that is not there: not used either.
	third := enginetest.Create(t, enginetest.OpenRoot(t, tr.Dir), store, engine.CreateOptions{Parent: manifest.Key(uuid.NewString()), Now: later})
	if !errors.Is(third.ParentErr, blob.ErrNotFound) || third.ReusedFiles != 0 {
		t.Errorf("third snapshot: parent error %v, reused %d; want blob.ErrNotFound, none", third.ParentErr, third.ReusedFiles)
	}
}

// TestWalkCmp: walkCmp orders paths as the walk visits them.
func TestWalkCmp(t *testing.T) {
	ordered := []string{"a", "a/b", "a/b/c", "a/b-c", "a/b.c", "a-b", "a.b", "a.b/c", "ab", "b"}
	for i := range ordered {
		for j := range ordered {
			want := 0
			if i < j {
				want = -1
			} else if i > j {
				want = 1
			}
			if got := engine.WalkCmp(ordered[i], ordered[j]); got != want {
				t.Errorf("engine.WalkCmp(%q, %q) = %d, want %d", ordered[i], ordered[j], got, want)
			}
		}
	}
}

// scanKey hands every entry of the manifest key to fn.
func scanKey(t *testing.T, store engine.Store, key string, fn func(*manifest.Entry)) error {
	t.Helper()
	_, err := engine.Scan(t.Context(), store, key, func(en *manifest.Entry) error { fn(en); return nil })
	if errors.Is(err, io.EOF) {
		return nil
	}
	return err
}
