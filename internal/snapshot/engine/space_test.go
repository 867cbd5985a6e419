package engine_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/kilnhq/kiln/internal/blob"
	"github.com/kilnhq/kiln/internal/snapshot/engine"
	"github.com/kilnhq/kiln/internal/snapshot/engine/enginetest"
	"github.com/kilnhq/kiln/internal/snapshot/restore"
)

// TestChunkSpaces: snapshots of one chunk space share chunks, snapshots
// of two spaces share none (each stores its own, named under its space),
// a parent of another space is not used, and every snapshot restores.
func TestChunkSpaces(t *testing.T) {
	tr := enginetest.Fixture(t)
	tr.StampDirs()
	want := enginetest.State(t, tr.Dir)
	store := enginetest.NewStore(t)

	a := enginetest.Create(t, enginetest.OpenRoot(t, tr.Dir), store, engine.CreateOptions{Space: "team_a"})
	if len(a.Chunks) == 0 || a.NewChunks != len(a.Chunks) {
		t.Fatalf("first snapshot: %d chunks, %d new; want some, all new", len(a.Chunks), a.NewChunks)
	}
	for _, k := range a.Chunks {
		if !strings.HasPrefix(k, "chunks/team_a/") || len(k) != len("chunks/team_a/")+2+1+64 {
			t.Fatalf("chunk key %q, want chunks/team_a/<2 hex>/<64 hex>", k)
		}
	}
	keys, err := engine.ChunkKeys(t.Context(), store, a.ManifestKey)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(keys)
	if !slices.Equal(keys, a.Chunks) {
		t.Errorf("ChunkKeys = %v, want the snapshot's %v", keys, a.Chunks)
	}

	// The same tree in another space: every chunk stored again, under it;
	// the parent of the other space is refused and every file read.
	b := enginetest.Create(t, enginetest.OpenRoot(t, tr.Dir), store, engine.CreateOptions{Space: "team-b", Parent: a.ManifestKey})
	if !errors.Is(b.ParentErr, engine.ErrParentSpace) || b.ReusedFiles != 0 {
		t.Errorf("snapshot in another space: parent error %v, %d files reused; want ErrParentSpace, none", b.ParentErr, b.ReusedFiles)
	}
	// Stored bytes count the manifest too (its space's name changes its
	// size): the chunks' bytes are the same.
	manifestSize := func(r engine.Result) int64 {
		in, err := store.Stat(t.Context(), r.ManifestKey)
		if err != nil {
			t.Fatal(err)
		}
		return in.Size
	}
	if b.NewChunks != len(a.Chunks) || b.StoredBytes-manifestSize(b) != a.StoredBytes-manifestSize(a) {
		t.Errorf("snapshot in another space: %d new chunks, %d bytes of chunks stored; want %d, %d (nothing shared)",
			b.NewChunks, b.StoredBytes-manifestSize(b), len(a.Chunks), a.StoredBytes-manifestSize(a))
	}
	for i, k := range b.Chunks {
		if k != strings.Replace(a.Chunks[i], "/team_a/", "/team-b/", 1) {
			t.Fatalf("chunk %d: %q in space team-b, %q in team_a: want the same sum under each", i, k, a.Chunks[i])
		}
	}
	// The same space again: nothing new (and the shared space, untouched
	// so far, would store everything).
	again := enginetest.Create(t, enginetest.OpenRoot(t, tr.Dir), store, engine.CreateOptions{Space: "team_a"})
	if again.NewChunks != 0 || again.StoredBytes != manifestSize(again) {
		t.Errorf("second snapshot in team_a: %d new chunks, %d bytes stored; want none, its manifest's %d", again.NewChunks, again.StoredBytes, manifestSize(again))
	}
	shared := enginetest.Create(t, enginetest.OpenRoot(t, tr.Dir), store, engine.CreateOptions{})
	if shared.NewChunks != len(a.Chunks) || !strings.HasPrefix(shared.Chunks[0], "chunks/") || strings.Count(shared.Chunks[0], "/") != 2 {
		t.Errorf("snapshot in the shared space: %d new chunks, first key %q; want %d, chunks/<2 hex>/<64 hex>", shared.NewChunks, shared.Chunks[0], len(a.Chunks))
	}

	for _, m := range []string{a.ManifestKey, b.ManifestKey, again.ManifestKey, shared.ManifestKey} {
		dst := t.TempDir()
		restoreAll(t, enginetest.OpenRoot(t, dst), store, m, restore.Options{})
		if d := enginetest.DiffState(want, enginetest.State(t, dst)); d != "" {
			t.Errorf("%s restored differs:\n%s", m, d)
		}
	}

	// A space that is not a plain name is refused before anything is
	// stored.
	empty := enginetest.NewStore(t)
	for _, bad := range []string{"../manifests", "a/b", "Team", strings.Repeat("x", 65)} {
		if _, err := engine.Create(t.Context(), enginetest.OpenRoot(t, tr.Dir), empty, engine.CreateOptions{Space: bad}); err == nil || !strings.Contains(err.Error(), "chunk space") {
			t.Errorf("Create in space %q = %v, want it refused", bad, err)
		}
	}
	n := 0
	if err := empty.List(t.Context(), "", func(blob.Info) error { n++; return nil }); err != nil || n != 0 {
		t.Errorf("the store after refused spaces holds %d blobs (%v), want none", n, err)
	}
}
