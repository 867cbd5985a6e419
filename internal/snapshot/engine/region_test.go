package engine

import (
	"crypto/sha256"
	"slices"
	"testing"

	"github.com/kilnhq/kiln/internal/snapshot/manifest"
)

// TestRegionFileCuts: a region file (.mca, .mcr) is cut into chunks of
// avgChunk bytes at fixed offsets, not where FastCDC would cut the same
// bytes in another file; a sector rewritten in place changes the one
// chunk that holds it; the tree restores byte for byte.
func TestRegionFileCuts(t *testing.T) {
	tr := newTree(t)
	data := tr.random(5*avgChunk + avgChunk/2)
	tr.file("world/region/r.0.0.mca", data, 0o644)
	tr.file("world/region/r.0.1.mcr", data[avgChunk:], 0o644)
	tr.file("world/other.dat", data, 0o644) // the same bytes, cut by content
	tr.stampDirs()
	root := openRoot(t, tr.dir)
	store := newStore(t)
	first := create(t, root, store, CreateOptions{})

	fixed := func(b []byte) []string {
		var keys []string
		for off := 0; off < len(b); off += avgChunk {
			keys = append(keys, manifest.ChunkKey("", sha256.Sum256(b[off:min(len(b), off+avgChunk)])))
		}
		return keys
	}
	for _, k := range fixed(data) {
		if !slices.Contains(first.Chunks, k) {
			t.Errorf("no chunk %s: the region file was not cut every %d bytes", k, avgChunk)
		}
	}
	// The .mcr holds data from avgChunk on: its fixed chunks are the
	// .mca's from the second on. The .dat, the same bytes cut by content,
	// adds chunks of its own to the .mca's 6.
	if want := 6 + 1; len(first.Chunks) <= want {
		t.Errorf("%d chunks, want the region files' 6 and the .dat's own", len(first.Chunks))
	}

	changed := slices.Clone(data)
	copy(changed[2*avgChunk+5*4096:], tr.random(4096)) // one sector of the third chunk
	tr.file("world/region/r.0.0.mca", changed, 0o644)
	tr.stampDirs()
	second := create(t, root, store, CreateOptions{})
	if second.NewChunks != 1 {
		t.Errorf("one sector rewritten: %d new chunks, want 1", second.NewChunks)
	}
	if k := fixed(changed)[2]; !slices.Contains(second.Chunks, k) {
		t.Errorf("the rewritten sector's chunk %s is not in the second snapshot", k)
	}
	want := state(t, tr.dir)
	dst := t.TempDir()
	restore(t, openRoot(t, dst), store, second.ManifestKey, RestoreOptions{})
	if d := diffState(want, state(t, dst)); d != "" {
		t.Errorf("restored tree differs:\n%s", d)
	}
}
