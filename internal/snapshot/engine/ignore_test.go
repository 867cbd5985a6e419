package engine

import (
	"testing"

	"github.com/kilnhq/kiln/internal/snapshot/ignore"
)

// TestGitignore: the ignore package's Match is what the options take;
// excluded directories are skipped whole on create and kept on restore,
// a re-included file is restored.
func TestGitignore(t *testing.T) {
	m, err := ignore.Parse("logs/\n*.tmp\n!keep.tmp\n/cache\n")
	if err != nil {
		t.Fatal(err)
	}
	tr := newTree(t)
	tr.file("logs/latest.log", []byte("log"), 0o644)
	tr.file("a.tmp", []byte("tmp"), 0o644)
	tr.file("plugins/keep.tmp", []byte("kept by the snapshot"), 0o644)
	tr.file("cache/x", []byte("cache"), 0o644)
	tr.file("world/cache/x", []byte("not the root's cache: in the snapshot"), 0o644)
	tr.stampDirs()
	store := newStore(t)
	root := openRoot(t, tr.dir)
	res := create(t, root, store, CreateOptions{Ignore: m.Match})
	if res.Files != 2 {
		t.Errorf("Create recorded %d files, want 2 (plugins/keep.tmp, world/cache/x)", res.Files)
	}
	snap := state(t, tr.dir)

	tr.file("plugins/keep.tmp", []byte("changed"), 0o644)
	tr.file("world/cache/x", []byte("changed"), 0o644)
	tr.file("logs/latest.log", []byte("log 2"), 0o644)
	tr.file("a.tmp", []byte("tmp 2"), 0o644)
	before := state(t, tr.dir)
	restore(t, root, store, res.ManifestKey, RestoreOptions{Ignore: m.Match})
	got := state(t, tr.dir)
	for p, want := range map[string]string{
		"plugins/keep.tmp": snap["plugins/keep.tmp"],
		"world/cache/x":    snap["world/cache/x"],
		"logs/latest.log":  before["logs/latest.log"],
		"a.tmp":            before["a.tmp"],
		"cache/x":          before["cache/x"],
	} {
		if got[p] != want {
			t.Errorf("%s = %s, want %s", p, got[p], want)
		}
	}
}
