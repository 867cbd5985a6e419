package engine

import (
	"fmt"
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
