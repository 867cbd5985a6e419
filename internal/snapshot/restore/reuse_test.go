package restore

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kilnhq/kiln/internal/quota"
	"github.com/kilnhq/kiln/internal/snapshot/engine"
	"github.com/kilnhq/kiln/internal/snapshot/engine/enginetest"
	"github.com/kilnhq/kiln/internal/snapshot/manifest"
)

// inodes maps every regular file of dir to its inode number.
func inodes(t testing.TB, dir string) map[string]uint64 {
	t.Helper()
	out := map[string]uint64{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		out[rel] = st.Ino
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// treeCost is what the disk ledger charges for dir's entries (the root
// itself left out).
func treeCost(t testing.TB, dir string) int64 {
	t.Helper()
	var n int64
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		if d.Type().IsRegular() {
			info, err := d.Info()
			if err != nil {
				return err
			}
			n += quota.Cost(info.Size())
		} else {
			n += quota.EntryCost
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// rewriteInPlace replaces the content of rel with data in place (same inode),
// then puts its mtime back: a change a stat cannot see.
func rewriteInPlace(t testing.TB, dir, rel string, data []byte) {
	t.Helper()
	p := filepath.Join(dir, rel)
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(p, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(data, 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	ts := []unix.Timespec{st.Atim, st.Mtim}
	if err := unix.UtimesNanoAt(unix.AT_FDCWD, p, ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		t.Fatal(err)
	}
	var now unix.Stat_t
	if err := unix.Lstat(p, &now); err != nil {
		t.Fatal(err)
	}
	if now.Size != st.Size || now.Mtim != st.Mtim || now.Ino != st.Ino {
		t.Fatalf("rewriteInPlace %s: the stat changed (size %d→%d, mtime %v→%v)", rel, st.Size, now.Size, st.Mtim, now.Mtim)
	}
}

// TestRestoreKeepsUnchanged restores a snapshot over a copy of its tree in
// which a few things changed: only the changed files are written (the
// others keep their inodes), a change the stat cannot see (same size and
// mtime) is restored, kinds changed both ways are restored, and a file
// whose content is the snapshot's keeps its inode and gets its mode and
// mtime back.
func TestRestoreKeepsUnchanged(t *testing.T) {
	tr := enginetest.NewTree(t)
	for i := range 200 {
		tr.File(fmt.Sprintf("world/playerdata/%04d.dat", i), fmt.Appendf(nil, "player %d %s", i, tr.Random(100+i)), 0o644)
	}
	tr.File("world/region/r.0.0.mca", tr.Random(3<<20), 0o644) // several chunks
	tr.File("world/region/r.0.1.mca", tr.Random(3<<20), 0o644)
	tr.File("world/level.dat", tr.Random(engine.MinChunk+10), 0o644) // a chunk of its own
	tr.File("config/a.yml", []byte("a: 1\n"), 0o640)
	tr.File("modes.txt", []byte("mode changes"), 0o644)
	tr.File("times.txt", []byte("mtime changes"), 0o644)
	tr.File("zero", nil, 0o600)
	tr.File("asdir", []byte("a file, a directory in the tree"), 0o644)
	tr.File("aslink", []byte("a file, a link in the tree"), 0o644)
	tr.File("wasdir/x", []byte("in a directory that is a file in the tree"), 0o644)
	tr.Symlink("config/a.yml", "waslink")
	tr.File("vialink/inner.txt", []byte("under a directory that is a link in the tree"), 0o644)
	tr.File("hard.txt", []byte("a second name in the tree"), 0o644)
	tr.StampDirs()
	want := enginetest.State(t, tr.Dir)
	store := enginetest.NewStore(t)
	snap := enginetest.Create(t, enginetest.OpenRoot(t, tr.Dir), store, engine.CreateOptions{})
	ignored := func(rel string, isDir bool) bool { return rel == "ignored" }

	live := t.TempDir()
	run(t, enginetest.OpenRoot(t, live), store, snap.ManifestKey, Options{})
	if d := enginetest.DiffState(want, enginetest.State(t, live)); d != "" {
		t.Fatalf("the copy differs:\n%s", d)
	}
	at := func(rel string) string { return filepath.Join(live, rel) }
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	// Changes a stat cannot see: same size, same mtime.
	rewriteInPlace(t, live, "world/playerdata/0042.dat", []byte("PLAYER")) // in a pack
	rewriteInPlace(t, live, "world/level.dat", []byte("level changed"))    // a whole chunk
	region := make([]byte, 1)
	fr, err := os.Open(at("world/region/r.0.1.mca"))
	must(err)
	_, err = fr.ReadAt(region, 2<<20)
	must(err)
	fr.Close()
	region[0] ^= 0xff
	f, err := os.OpenFile(at("world/region/r.0.1.mca"), os.O_WRONLY, 0)
	must(err)
	var st unix.Stat_t
	must(unix.Fstat(int(f.Fd()), &st))
	_, err = f.WriteAt(region, 2<<20) // one byte, in a chunk in the middle
	must(err)
	must(f.Close())
	must(unix.UtimesNanoAt(unix.AT_FDCWD, at("world/region/r.0.1.mca"), []unix.Timespec{st.Atim, st.Mtim}, 0))
	// Metadata only.
	must(os.Chmod(at("modes.txt"), 0o600))
	must(os.Chtimes(at("times.txt"), time.Unix(1, 0), time.Unix(1, 0)))
	// Kinds.
	must(os.Remove(at("asdir")))
	must(os.MkdirAll(at("asdir/sub"), 0o755))
	must(os.WriteFile(at("asdir/sub/f"), []byte("x"), 0o644))
	must(os.Remove(at("aslink")))
	must(os.Symlink("zero", at("aslink")))
	must(os.RemoveAll(at("wasdir")))
	must(os.WriteFile(at("wasdir"), []byte("in a directory that is a file in the tree"), 0o644))
	must(os.Remove(at("waslink")))
	must(os.WriteFile(at("waslink"), []byte("a: 1\n"), 0o640)) // the link target's content
	// The same files, reached through a link: never kept.
	must(os.Rename(at("vialink"), at("other")))
	must(os.Symlink("other", at("vialink")))
	// Another name for a file (an ignored one, so it stays): not read,
	// restored as a file of its own.
	must(os.MkdirAll(at("ignored"), 0o755))
	must(os.Link(at("hard.txt"), at("ignored/twin")))
	must(os.WriteFile(at("extra.txt"), []byte("not in the snapshot"), 0o644))

	before := inodes(t, live)
	costBefore := treeCost(t, live)
	res := enginetest.Unlimited(t)
	out, err := Run(t.Context(), enginetest.OpenRoot(t, live), res, store, snap.ManifestKey, Options{Ignore: ignored})
	if err != nil {
		t.Fatalf("Restore: %v", err)
	}
	got := enginetest.State(t, live)
	delete(got, "ignored")
	delete(got, "ignored/twin")
	if d := enginetest.DiffState(want, got); d != "" {
		t.Errorf("restored tree differs:\n%s", d)
	}
	after := inodes(t, live)
	rewritten := map[string]bool{
		"world/playerdata/0042.dat": true, "world/level.dat": true, "world/region/r.0.1.mca": true,
		"asdir": true, "aslink": true, "wasdir/x": true, "waslink": true, "vialink/inner.txt": true, "hard.txt": true,
	}
	for p, ino := range after {
		if p == "ignored/twin" {
			if ino != before[p] {
				t.Errorf("ignored/twin: inode %d, want %d (untouched)", ino, before[p])
			}
			continue
		}
		switch {
		case rewritten[p] && ino == before[p]:
			t.Errorf("%s kept its inode %d; its content differs and must be written", p, ino)
		case !rewritten[p] && ino != before[p]:
			t.Errorf("%s: inode %d, was %d; its content is the snapshot's and must stay in place", p, ino, before[p])
		}
	}
	if twin, err := os.ReadFile(at("ignored/twin")); err != nil || string(twin) != "a second name in the tree" {
		t.Errorf("ignored/twin = %q, %v", twin, err)
	}
	// Kept: 199 player files, r.0.0, a.yml, modes, times, zero.
	if out.Kept != 204 {
		t.Errorf("Kept = %d, want 204", out.Kept)
	}
	var keptBytes int64
	for p := range after {
		if !rewritten[p] && p != "ignored/twin" {
			info, err := os.Stat(at(p))
			must(err)
			keptBytes += info.Size()
		}
	}
	if out.KeptBytes != keptBytes {
		t.Errorf("KeptBytes = %d, want %d", out.KeptBytes, keptBytes)
	}
	// Replaced: the 3 changed files, the 5 changed kinds, hard.txt; extra.txt and other/ removed.
	if out.Replaced != 11 {
		t.Errorf("Replaced = %d, want 11", out.Replaced)
	}
	if d := res.Change(); d != treeCost(t, live)-costBefore {
		t.Errorf("the reservation's change = %d, want %d (the tree's cost after less before)", d, treeCost(t, live)-costBefore)
	}
	for p := range got {
		if strings.HasPrefix(p, quota.TempPrefix) {
			t.Errorf("%s is left", p)
		}
	}

	// Restored again over itself: everything stays, nothing is written.
	before = inodes(t, live)
	out, err = Run(t.Context(), enginetest.OpenRoot(t, live), enginetest.Unlimited(t), store, snap.ManifestKey, Options{Ignore: ignored})
	if err != nil {
		t.Fatalf("Restore again: %v", err)
	}
	// (Links are not compared: replacing one is a rename.)
	if out.Kept != snap.Files || out.Replaced != snap.Symlinks || out.KeptBytes != snap.SizeBytes {
		t.Errorf("Restore over an equal tree = %+v, want all %d files kept, only the %d link replaced", out, snap.Files, snap.Symlinks)
	}
	for p, ino := range inodes(t, live) {
		if ino != before[p] {
			t.Errorf("%s was rewritten over an equal tree", p)
		}
	}
}

// TestKeptFileChangedBeforeSwap: a file proven equal, then written before
// the swap is planned, makes the restore fail before its commit point,
// leaving the tree as it was.
func TestKeptFileChangedBeforeSwap(t *testing.T) {
	tr := enginetest.NewTree(t)
	tr.File("a.txt", []byte("snapshot a"), 0o644)
	tr.File("b.txt", []byte("snapshot b"), 0o644)
	store := enginetest.NewStore(t)
	snap := enginetest.Create(t, enginetest.OpenRoot(t, tr.Dir), store, engine.CreateOptions{})
	live := t.TempDir()
	run(t, enginetest.OpenRoot(t, live), store, snap.ManifestKey, Options{})
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.WriteFile(filepath.Join(live, "b.txt"), []byte("live b"), 0o644))
	root := enginetest.OpenRoot(t, live)
	dir, err := root.OpenDir(".")
	must(err)
	defer dir.Close()
	rootFD := int(dir.Fd())
	st, err := newStaging(rootFD, enginetest.Unlimited(t))
	must(err)
	must(st.build(t.Context(), rootFD, store, snap.ManifestKey, manifest.Info{Totals: manifest.Totals{Bytes: snap.SizeBytes}}, Options{}))
	// Written between the check and the plan.
	must(os.WriteFile(filepath.Join(live, "a.txt"), []byte("written!!!"), 0o644))
	old := withoutStaging(enginetest.State(t, live))
	if _, err := st.plan(t.Context(), rootFD, nil, enginetest.Names()); err == nil || !strings.Contains(err.Error(), "changed while the restore checked it") {
		t.Errorf("plan after a kept file changed = %v, want a refusal", err)
	}
	st.discard(rootFD)
	if d := enginetest.DiffState(old, enginetest.State(t, live)); d != "" {
		t.Errorf("the tree changed:\n%s", d)
	}
}

// TestRecoverLeavesUnsignedJournal: a journal without a MAC (what an
// earlier Kiln wrote, versions 1 and 2) is not run: Recover reports it
// and leaves the tree and the restore directory as they are.
func TestRecoverLeavesUnsignedJournal(t *testing.T) {
	snap := snapshotSide(t)
	store := enginetest.NewStore(t)
	res := enginetest.Create(t, enginetest.OpenRoot(t, snap.Dir), store, engine.CreateOptions{})
	live := enginetest.NewTree(t)
	live.File("a.txt", []byte("live a"), 0o644)
	live.File("gone/y", []byte("removed"), 0o644)
	root := enginetest.OpenRoot(t, live.Dir)
	dir, err := root.OpenDir(".")
	if err != nil {
		t.Fatal(err)
	}
	st, _, err := prepare(t.Context(), int(dir.Fd()), enginetest.Unlimited(t), store, res.ManifestKey, manifest.Info{Totals: manifest.Totals{Bytes: res.SizeBytes}}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	jpath := filepath.Join(live.Dir, st.name, journalName)
	st.close()
	dir.Close()
	j, err := os.ReadFile(jpath)
	if err != nil {
		t.Fatal(err)
	}
	// Version 2: the same steps, no MAC line.
	body, _, _ := strings.Cut(string(j), "mac ")
	j = []byte("kiln-restore-journal 2" + strings.TrimPrefix(body, journalHeader))
	if err := os.WriteFile(jpath, j, 0o600); err != nil {
		t.Fatal(err)
	}
	before := enginetest.State(t, live.Dir)
	got, err := Recover(t.Context(), root, enginetest.Names())
	if err != nil || !reflect.DeepEqual(got, Recovered{Untrusted: []string{st.name}}) {
		t.Fatalf("Recover of an unsigned journal = %+v, %v; want it reported untrusted", got, err)
	}
	if d := enginetest.DiffState(before, enginetest.State(t, live.Dir)); d != "" {
		t.Errorf("an unsigned journal changed the tree:\n%s", d)
	}
	if _, err := Run(t.Context(), root, enginetest.Unlimited(t), store, res.ManifestKey, Options{}); !errors.Is(err, ErrPending) {
		t.Errorf("Restore over an untrusted journal = %v, want ErrPending (an operator looks first)", err)
	}
}
