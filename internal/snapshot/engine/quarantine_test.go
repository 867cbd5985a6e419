package engine_test

import (
	"bytes"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/kilnhq/kiln/internal/blob"
	"github.com/kilnhq/kiln/internal/snapshot/engine"
	"github.com/kilnhq/kiln/internal/snapshot/engine/enginetest"
	"github.com/kilnhq/kiln/internal/snapshot/manifest"
	"github.com/kilnhq/kiln/internal/snapshot/restore"
)

// corruptChunk replaces the stored bytes of the chunk under key with the
// same bytes, one bit flipped in the middle (what a disk's decay does),
// and returns them.
func corruptChunk(t *testing.T, store blob.Store, key string) []byte {
	t.Helper()
	rc, err := store.Get(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(rc)
	rc.Close()
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0x10
	if err := store.Delete(t.Context(), key); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Put(t.Context(), key, bytes.NewReader(b), int64(len(b))); err != nil {
		t.Fatal(err)
	}
	return b
}

// TestQuarantineChunk: a chunk found corrupt poisons the snapshots taken
// after it (a look-up finds it, so it is referenced again, unread) until
// QuarantineChunk moves it out of chunks/: then the next snapshot of the
// same tree stores it again and restores byte for byte. Reads name the
// corrupt chunk (ChunkError); a whole or a missing chunk is not moved.
func TestQuarantineChunk(t *testing.T) {
	tr := parentTree(t)
	want := enginetest.State(t, tr.Dir)
	store := enginetest.NewStore(t)
	first := enginetest.Create(t, enginetest.OpenRoot(t, tr.Dir), store, engine.CreateOptions{Now: later})
	var bad manifest.ChunkRef
	err := scanKey(t, store, first.ManifestKey, func(en *manifest.Entry) {
		if en.Path == "world/region/r.0.1.mca" {
			bad = en.Extents[0].Chunk
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	badKey := manifest.ChunkKey("", bad.Sum)
	corrupt := corruptChunk(t, store, badKey)

	// Without it set aside, a snapshot taken again (with the first as its
	// parent, or without) references the corrupt chunk: found, not stored.
	for _, parent := range []string{first.ManifestKey, ""} {
		again := enginetest.Create(t, enginetest.OpenRoot(t, tr.Dir), store, engine.CreateOptions{Parent: parent, Now: later})
		dst := t.TempDir()
		_, err := restore.Run(t.Context(), enginetest.OpenRoot(t, dst), enginetest.Unlimited(t), store, again.ManifestKey, restore.Options{})
		ce, ok := errors.AsType[*engine.ChunkError](err)
		if !ok || !ce.Corrupt() || ce.Key != badKey || ce.Ref != bad || !errors.Is(err, engine.ErrCorruptChunk) {
			t.Fatalf("restore of a snapshot taken after the corruption (parent %q) = %v; want a ChunkError naming %s", parent, err, badKey)
		}
	}

	at := time.UnixMilli(1_700_000_000_123)
	to, err := engine.QuarantineChunk(t.Context(), store, badKey, bad, at)
	if err != nil || to != "quarantine/"+badKey+".1700000000123" {
		t.Fatalf("QuarantineChunk = %q, %v; want it moved to quarantine/%s.1700000000123", to, err, badKey)
	}
	if _, err := store.Stat(t.Context(), badKey); !errors.Is(err, blob.ErrNotFound) {
		t.Errorf("Stat of the quarantined chunk = %v, want blob.ErrNotFound", err)
	}
	rc, err := store.Get(t.Context(), to)
	if err != nil {
		t.Fatal(err)
	}
	kept, _ := io.ReadAll(rc)
	rc.Close()
	if !bytes.Equal(kept, corrupt) {
		t.Errorf("the quarantined copy holds %d bytes, not the corrupt chunk's %d", len(kept), len(corrupt))
	}
	// The first snapshot now misses it: a ChunkError too, not corrupt.
	_, err = restore.Run(t.Context(), enginetest.OpenRoot(t, t.TempDir()), enginetest.Unlimited(t), store, first.ManifestKey, restore.Options{})
	if ce, ok := errors.AsType[*engine.ChunkError](err); !ok || ce.Corrupt() || ce.Key != badKey || !errors.Is(err, blob.ErrNotFound) {
		t.Errorf("restore with the chunk set aside = %v; want a ChunkError (missing) naming %s", err, badKey)
	}

	// The next snapshot, with the first as its parent, stores it again.
	next := enginetest.Create(t, enginetest.OpenRoot(t, tr.Dir), store, engine.CreateOptions{Parent: first.ManifestKey, Now: later})
	if next.NewChunks != 1 {
		t.Errorf("the snapshot after the quarantine stored %d chunks, want the quarantined one again", next.NewChunks)
	}
	checkStored(t, store, next)
	checkRestores(t, store, next.ManifestKey, want)
	// And the first is whole again: the chunk is under its name once more.
	checkRestores(t, store, first.ManifestKey, want)

	// A whole chunk, and a missing one, are not moved.
	if to, err := engine.QuarantineChunk(t.Context(), store, badKey, bad, at.Add(time.Second)); err != nil || to != "" {
		t.Errorf("QuarantineChunk of a whole chunk = %q, %v; want not moved", to, err)
	}
	if _, err := store.Stat(t.Context(), badKey); err != nil {
		t.Errorf("the whole chunk after QuarantineChunk: %v", err)
	}
	gone := manifest.ChunkRef{Sum: [32]byte{1}, Len: 5}
	if to, err := engine.QuarantineChunk(t.Context(), store, manifest.ChunkKey("", gone.Sum), gone, at); err != nil || to != "" {
		t.Errorf("QuarantineChunk of a missing chunk = %q, %v; want not moved", to, err)
	}
}
