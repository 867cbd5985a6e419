package restore

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/kilnhq/kiln/internal/snapshot/engine"
	"github.com/kilnhq/kiln/internal/snapshot/engine/enginetest"
	"github.com/kilnhq/kiln/internal/snapshot/manifest"
)

// swapFixtures: the tree a snapshot is taken of, and the tree it is
// restored over, unlike it in every way a swap handles.
func snapshotSide(t testing.TB) *enginetest.Tree {
	tr := enginetest.NewTree(t)
	tr.File("a.txt", []byte("snapshot a"), 0o644)
	tr.File("kind/was-dir", []byte("a file in the snapshot"), 0o644)
	tr.File("kind/was-file/inside", []byte("a directory in the snapshot"), 0o644)
	tr.File("world/region/r.0.0.mca", tr.Random(300<<10), 0o644)
	tr.File("world/level.dat", []byte("level"), 0o644)
	tr.Mkdir("world/empty", 0o755)
	tr.Symlink("../a.txt", "world/link")
	tr.File("z/only-in-snapshot", []byte("new"), 0o600)
	tr.File("same/mode", []byte("the same content, another mode"), 0o644)
	tr.File("same/time", []byte("the same content, another mtime"), 0o644)
	tr.StampDirs()
	return tr
}

func liveSide(t testing.TB) *enginetest.Tree {
	tr := enginetest.NewTree(t)
	tree0(tr)
	return tr
}

// tree0 builds the live tree the snapshot is restored over.
func tree0(tr *enginetest.Tree) {
	tr.File("a.txt", []byte("live a, changed since"), 0o600)
	tr.File("kind/was-dir/x", []byte("a directory now"), 0o644)
	tr.File("kind/was-dir/logs/keep.log", []byte("ignored, but under a path the snapshot holds as a file"), 0o644)
	tr.File("kind/was-file", []byte("a file now"), 0o644)
	tr.File("world/region/r.0.0.mca", tr.Random(200<<10), 0o644)
	tr.File("world/region/r.9.9.mca", tr.Random(10<<10), 0o644)
	tr.Symlink("region", "world/link")
	tr.File("logs/latest.log", []byte("ignored: stays"), 0o644)
	tr.File("extra/deep/er", []byte("removed"), 0o644)
	tr.File("extra/x.log", []byte("ignored: stays, and so does extra/"), 0o644)
	tr.File("gone/y", []byte("removed with gone/"), 0o644)
	// Kept in place (their content is the snapshot's): a keep step each.
	tr.File("same/mode", []byte("the same content, another mode"), 0o600)
	tr.File("same/time", []byte("the same content, another mtime"), 0o644)
	tr.StampDirs()
}

// TestRecoverAtEveryStep cuts the swap before each of its steps, as a
// kill -9 would, and checks that Recover then leaves exactly the restored
// tree; and that a restore cut before its commit point leaves the old one.
func TestRecoverAtEveryStep(t *testing.T) {
	logs := func(rel string, isDir bool) bool { return strings.HasSuffix(rel, ".log") }
	snap := snapshotSide(t)
	store := enginetest.NewStore(t)
	res := enginetest.Create(t, enginetest.OpenRoot(t, snap.Dir), store, engine.CreateOptions{Ignore: logs})
	opts := Options{Ignore: logs}

	// What a finished restore leaves.
	done := liveSide(t)
	if out := run(t, enginetest.OpenRoot(t, done.Dir), store, res.ManifestKey, opts); out.Kept != 2 {
		t.Errorf("Restore kept %d files in place, want 2 (same/mode, same/time)", out.Kept)
	}
	want := keptDir(enginetest.State(t, done.Dir))
	for _, p := range []string{"logs/latest.log", "extra/x.log"} {
		if _, ok := want[p]; !ok {
			t.Fatalf("ignored %s was removed", p)
		}
	}
	for p := range want {
		if strings.HasPrefix(p, "kind/was-dir/") || strings.HasPrefix(p, "gone") || strings.HasPrefix(p, "extra/deep") {
			t.Errorf("%s is left; the snapshot does not hold it", p)
		}
	}

	// Nothing to recover in a root without a restore.
	if got, err := Recover(t.Context(), enginetest.OpenRoot(t, done.Dir), enginetest.Names()); err != nil || !reflect.DeepEqual(got, Recovered{}) {
		t.Errorf("Recover(a clean root) = %+v, %v; want nothing", got, err)
	}

	steps := -1
	for k := 0; steps < 0 || k <= steps+1; k++ {
		live := liveSide(t)
		old := enginetest.State(t, live.Dir)
		root := enginetest.OpenRoot(t, live.Dir)
		dir, err := root.OpenDir(".")
		if err != nil {
			t.Fatal(err)
		}
		rootFD := int(dir.Fd())
		st, p, err := prepare(t.Context(), rootFD, enginetest.Unlimited(t), store, res.ManifestKey, manifest.Info{Totals: manifest.Totals{Bytes: res.SizeBytes}}, opts)
		if err != nil {
			t.Fatalf("prepare: %v", err)
		}
		steps = p.steps
		if k == 0 {
			// Cut before the commit point: the journal is not there yet.
			if err := os.Remove(filepath.Join(live.Dir, st.name, journalName)); err != nil {
				t.Fatal(err)
			}
			if d := enginetest.DiffState(old, withoutStaging(enginetest.State(t, live.Dir))); d != "" {
				t.Errorf("staging changed the tree:\n%s", d)
			}
		} else {
			err := runJournal(rootFD, st.fd, st.name, enginetest.Names(), k-1)
			if k-1 < steps && !errors.Is(err, errStopped) || k-1 == steps && err != nil {
				t.Fatalf("runJournal(%d of %d) = %v", k-1, steps, err)
			}
		}
		st.close()
		dir.Close()

		got, err := Recover(t.Context(), enginetest.OpenRoot(t, live.Dir), enginetest.Names())
		if err != nil {
			t.Fatalf("cut before step %d: Recover: %v", k, err)
		}
		if k == 0 {
			if !reflect.DeepEqual(got, Recovered{Discarded: 1}) {
				t.Errorf("Recover = %+v, want one discarded", got)
			}
			if d := enginetest.DiffState(old, enginetest.State(t, live.Dir)); d != "" {
				t.Errorf("cut before the commit point: the tree is not the old one:\n%s", d)
			}
			continue
		}
		if !reflect.DeepEqual(got, Recovered{Finished: 1}) {
			t.Errorf("cut before step %d: Recover = %+v, want one finished", k, got)
		}
		if d := enginetest.DiffState(want, keptDir(enginetest.State(t, live.Dir))); d != "" {
			t.Errorf("cut before step %d of %d: the recovered tree differs:\n%s", k, steps, d)
		}
	}
	// A restore refuses to start over a swap left to finish.
	live := liveSide(t)
	root := enginetest.OpenRoot(t, live.Dir)
	dir, err := root.OpenDir(".")
	if err != nil {
		t.Fatal(err)
	}
	st, _, err := prepare(t.Context(), int(dir.Fd()), enginetest.Unlimited(t), store, res.ManifestKey, manifest.Info{Totals: manifest.Totals{Bytes: res.SizeBytes}}, opts)
	if err != nil {
		t.Fatal(err)
	}
	st.close()
	dir.Close()
	if _, err := Run(t.Context(), root, enginetest.Unlimited(t), store, res.ManifestKey, opts); !errors.Is(err, ErrPending) {
		t.Errorf("Restore over a pending swap: %v, want ErrPending", err)
	}
	if _, err := Recover(t.Context(), root, enginetest.Names()); err != nil {
		t.Fatal(err)
	}
	run(t, root, store, res.ManifestKey, opts)
	if d := enginetest.DiffState(want, keptDir(enginetest.State(t, live.Dir))); d != "" {
		t.Errorf("recovered, then restored again: the tree differs:\n%s", d)
	}

	if steps < 8 {
		t.Errorf("the swap had %d steps; the fixture should need more", steps)
	}
	t.Logf("cut at each of %d steps", steps+1)
}

// keptDir forgets the mtime of extra/: the snapshot does not hold it, it
// stays for the ignored file in it, and it is changed (now) by the removal
// of the rest.
func keptDir(s map[string]string) map[string]string {
	if d, ok := s["extra"]; ok {
		s["extra"] = d[:strings.Index(d, " mtime=")]
	}
	return s
}

// withoutStaging leaves the restore's own directory out of a state.
func withoutStaging(s map[string]string) map[string]string {
	for p := range s {
		if strings.HasPrefix(p, restorePrefix) {
			delete(s, p)
		}
	}
	return s
}
