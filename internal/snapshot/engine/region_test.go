package engine_test

import (
	"crypto/sha256"
	"slices"
	"testing"

	"github.com/kilnhq/kiln/internal/snapshot/engine"
	"github.com/kilnhq/kiln/internal/snapshot/engine/enginetest"
	"github.com/kilnhq/kiln/internal/snapshot/manifest"
	"github.com/kilnhq/kiln/internal/snapshot/restore"
)

// TestRegionFileCuts: a region file (.mca, .mcr) is cut into chunks of
// avgChunk bytes at fixed offsets, not where FastCDC would cut the same
// bytes in another file; a sector rewritten in place changes the one
// chunk that holds it; the tree restores byte for byte.
func TestRegionFileCuts(t *testing.T) {
	tr := enginetest.NewTree(t)
	data := tr.Random(5*engine.AvgChunk + engine.AvgChunk/2)
	tr.File("world/region/r.0.0.mca", data, 0o644)
	tr.File("world/region/r.0.1.mcr", data[engine.AvgChunk:], 0o644)
	tr.File("world/other.dat", data, 0o644) // the same bytes, cut by content
	tr.StampDirs()
	root := enginetest.OpenRoot(t, tr.Dir)
	store := enginetest.NewStore(t)
	first := enginetest.Create(t, root, store, engine.CreateOptions{})

	fixed := func(b []byte) []string {
		var keys []string
		for off := 0; off < len(b); off += engine.AvgChunk {
			keys = append(keys, manifest.ChunkKey("", sha256.Sum256(b[off:min(len(b), off+engine.AvgChunk)])))
		}
		return keys
	}
	for _, k := range fixed(data) {
		if !slices.Contains(first.Chunks, k) {
			t.Errorf("no chunk %s: the region file was not cut every %d bytes", k, engine.AvgChunk)
		}
	}
	// The .mcr holds data from avgChunk on: its fixed chunks are the
	// .mca's from the second on. The .dat, the same bytes cut by content,
	// adds chunks of its own to the .mca's 6.
	if want := 6 + 1; len(first.Chunks) <= want {
		t.Errorf("%d chunks, want the region files' 6 and the .dat's own", len(first.Chunks))
	}

	changed := slices.Clone(data)
	copy(changed[2*engine.AvgChunk+5*4096:], tr.Random(4096)) // one sector of the third chunk
	tr.File("world/region/r.0.0.mca", changed, 0o644)
	tr.StampDirs()
	second := enginetest.Create(t, root, store, engine.CreateOptions{})
	if second.NewChunks != 1 {
		t.Errorf("one sector rewritten: %d new chunks, want 1", second.NewChunks)
	}
	if k := fixed(changed)[2]; !slices.Contains(second.Chunks, k) {
		t.Errorf("the rewritten sector's chunk %s is not in the second snapshot", k)
	}
	want := enginetest.State(t, tr.Dir)
	dst := t.TempDir()
	restoreAll(t, enginetest.OpenRoot(t, dst), store, second.ManifestKey, restore.Options{})
	if d := enginetest.DiffState(want, enginetest.State(t, dst)); d != "" {
		t.Errorf("restored tree differs:\n%s", d)
	}
}
