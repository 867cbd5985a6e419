package restore

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kilnhq/kiln/internal/files"
	"github.com/kilnhq/kiln/internal/snapshot/engine"
	"github.com/kilnhq/kiln/internal/snapshot/engine/enginetest"
)

// TestRestoreOnly: a restore narrowed to a path makes that path what the
// snapshot holds (changed files back, files added under it removed, its
// ignored entries kept) and leaves every other entry of the tree as it
// is; a path the snapshot does not hold is files.ErrNotFound with
// nothing written.
func TestRestoreOnly(t *testing.T) {
	tr := enginetest.Fixture(t)
	want := enginetest.State(t, tr.Dir)
	store := enginetest.NewStore(t)
	res := enginetest.Create(t, enginetest.OpenRoot(t, tr.Dir), store, engine.CreateOptions{})

	// The tree after a day: changes under world/region and elsewhere.
	tr.File("world/region/r.0.0.mca", tr.Random(1<<20), 0o644)
	tr.File("world/region/r.5.5.mca", []byte("new region"), 0o644)
	tr.File("world/region/r.5.5.mca.log", []byte("ignored, kept"), 0o644)
	tr.File("world/level.dat", []byte("changed level"), 0o644)
	tr.File("server.properties", []byte("motd=changed\n"), 0o600)
	tr.File("plugins/New/config.yml", []byte("new plugin"), 0o644)
	if err := os.Remove(filepath.Join(tr.Dir, "world/playerdata/0007.dat")); err != nil {
		t.Fatal(err)
	}
	day := enginetest.State(t, tr.Dir)
	ignoreLogs := func(rel string, _ bool) bool { return strings.HasSuffix(rel, ".log") }

	out := run(t, enginetest.OpenRoot(t, tr.Dir), store, res.ManifestKey, Options{Only: "world/region", Ignore: ignoreLogs})
	expect := map[string]string{}
	for k, v := range day {
		expect[k] = v
	}
	for k, v := range want {
		if strings.HasPrefix(k, "world/region/") || k == "world/region" {
			expect[k] = v
		}
	}
	delete(expect, "world/region/r.5.5.mca")
	expect["world"] = want["world"] // a directory leading to the path: the snapshot's mode and mtime
	got := enginetest.State(t, tr.Dir)
	if d := enginetest.DiffState(expect, got); d != "" {
		t.Errorf("after a restore of world/region:\n%s", d)
	}
	if out.Files != 3 || out.Dirs != 2 || out.SizeBytes != 30<<20+3*engine.MaxChunk {
		t.Errorf("Restore = %+v, want 3 files and 2 directories (world, world/region) of %d bytes", out, 30<<20+3*engine.MaxChunk)
	}

	// One file.
	run(t, enginetest.OpenRoot(t, tr.Dir), store, res.ManifestKey, Options{Only: "world/level.dat"})
	expect["world/level.dat"] = want["world/level.dat"]
	expect["world"] = want["world"]
	if d := enginetest.DiffState(expect, enginetest.State(t, tr.Dir)); d != "" {
		t.Errorf("after a restore of world/level.dat:\n%s", d)
	}

	// A link where the snapshot has a directory leading to the path: it
	// is replaced by that directory, holding only the path.
	if err := os.RemoveAll(filepath.Join(tr.Dir, "plugins")); err != nil {
		t.Fatal(err)
	}
	tr.Symlink("world", "plugins")
	run(t, enginetest.OpenRoot(t, tr.Dir), store, res.ManifestKey, Options{Only: "plugins/Essentials"})
	for k := range expect {
		if k == "plugins" || strings.HasPrefix(k, "plugins/") {
			delete(expect, k)
		}
	}
	for _, k := range []string{"plugins", "plugins/Essentials", "plugins/Essentials/config.yml"} {
		expect[k] = want[k]
	}
	if d := enginetest.DiffState(expect, enginetest.State(t, tr.Dir)); d != "" {
		t.Errorf("after a restore of plugins/Essentials over a link:\n%s", d)
	}

	// Nothing there: refused, nothing written.
	before := enginetest.State(t, tr.Dir)
	for _, only := range []string{"world/regio", "nope", "server.properties/x"} {
		_, err := Run(t.Context(), enginetest.OpenRoot(t, tr.Dir), enginetest.Unlimited(t), store, res.ManifestKey, Options{Only: only})
		if !errors.Is(err, files.ErrNotFound) {
			t.Errorf("Restore(Only %q) = %v, want files.ErrNotFound", only, err)
		}
	}
	if d := enginetest.DiffState(before, enginetest.State(t, tr.Dir)); d != "" {
		t.Errorf("a refused restore changed the tree:\n%s", d)
	}
}

func TestOnPath(t *testing.T) {
	for _, c := range []struct {
		only, rel   string
		under, lead bool
	}{
		{"", "a", true, false},
		{".", "a/b", true, false},
		{"a/b", "a/b", true, false},
		{"a/b", "a/b/c", true, false},
		{"a/b", "a", false, true},
		{"a/b", "a/bc", false, false},
		{"a/b", "a/bc/d", false, false},
		{"a/bc", "a/b", false, false},
		{"a/b/c", "a/b", false, true},
		{"a/b", "b", false, false},
	} {
		if under, lead := engine.OnPath(c.only, c.rel); under != c.under || lead != c.lead {
			t.Errorf("onPath(%q, %q) = %v, %v; want %v, %v", c.only, c.rel, under, lead, c.under, c.lead)
		}
	}
}
