package engine_test

import (
	"testing"

	"github.com/kilnhq/kiln/internal/snapshot/engine"
	"github.com/kilnhq/kiln/internal/snapshot/engine/enginetest"
	"github.com/kilnhq/kiln/internal/snapshot/ignore"
	"github.com/kilnhq/kiln/internal/snapshot/restore"
)

// TestGitignore: the ignore package's Match is what the options take;
// excluded directories are skipped whole on create and kept on restore,
// a re-included file is restored.
func TestGitignore(t *testing.T) {
	m, err := ignore.Parse("logs/\n*.tmp\n!keep.tmp\n/cache\n")
	if err != nil {
		t.Fatal(err)
	}
	tr := enginetest.NewTree(t)
	tr.File("logs/latest.log", []byte("log"), 0o644)
	tr.File("a.tmp", []byte("tmp"), 0o644)
	tr.File("plugins/keep.tmp", []byte("kept by the snapshot"), 0o644)
	tr.File("cache/x", []byte("cache"), 0o644)
	tr.File("world/cache/x", []byte("not the root's cache: in the snapshot"), 0o644)
	tr.StampDirs()
	store := enginetest.NewStore(t)
	root := enginetest.OpenRoot(t, tr.Dir)
	res := enginetest.Create(t, root, store, engine.CreateOptions{Ignore: m.Match})
	if res.Files != 2 {
		t.Errorf("Create recorded %d files, want 2 (plugins/keep.tmp, world/cache/x)", res.Files)
	}
	snap := enginetest.State(t, tr.Dir)

	tr.File("plugins/keep.tmp", []byte("changed"), 0o644)
	tr.File("world/cache/x", []byte("changed"), 0o644)
	tr.File("logs/latest.log", []byte("log 2"), 0o644)
	tr.File("a.tmp", []byte("tmp 2"), 0o644)
	before := enginetest.State(t, tr.Dir)
	restoreAll(t, root, store, res.ManifestKey, restore.Options{Ignore: m.Match})
	got := enginetest.State(t, tr.Dir)
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
