package snapshot

import (
	"archive/zip"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kilnhq/kiln/internal/blob"
	"github.com/kilnhq/kiln/internal/files/archive"
	"github.com/kilnhq/kiln/internal/servers"
	"github.com/kilnhq/kiln/internal/snapshot/manifest"
	"github.com/kilnhq/kiln/internal/store/storetest"
)

// putGate holds every chunk upload, once armed, until release is closed
// (or the upload's context ends): a snapshot caught in the middle of its
// walk.
type putGate struct {
	blob.Store
	armed, hit, release chan struct{}
	once                sync.Once
	onManifest          func() // called, once armed, as a manifest's upload begins
}

func (g *putGate) Put(ctx context.Context, key string, r io.Reader, size int64) (bool, error) {
	select {
	case <-g.armed:
		if strings.HasPrefix(key, manifestPrefix) && g.onManifest != nil {
			g.onManifest()
		}
		if strings.HasPrefix(key, chunkPrefix) {
			g.once.Do(func() { close(g.hit) })
			select {
			case <-ctx.Done():
				return false, ctx.Err()
			case <-g.release:
			}
		}
	default:
	}
	return g.Store.Put(ctx, key, r, size)
}

// newPutGateEnv is newSvcEnv (SQLite) on a putGate over a file store.
func newPutGateEnv(t *testing.T) (*svcEnv, *putGate) {
	t.Helper()
	fileStore, err := blob.Open(t.Context(), "file://"+t.TempDir(), blob.Options{})
	if err != nil {
		t.Fatal(err)
	}
	gate := &putGate{Store: fileStore, armed: make(chan struct{}), hit: make(chan struct{}), release: make(chan struct{})}
	return newSvcEnvOn(t, storetest.SQLite(t), gate), gate
}

// createHeld arms gate and creates a snapshot of server id named name,
// returning once its first chunk upload is held.
func (e *svcEnv) createHeld(gate *putGate, id, name string) Snapshot {
	e.t.Helper()
	close(gate.armed)
	snap, err := e.svc.Create(e.t.Context(), e.team, id, name, "")
	if err != nil {
		e.t.Fatal(err)
	}
	select {
	case <-gate.hit:
	case <-time.After(60 * time.Second):
		e.t.Fatal("the snapshot stored no chunk within 60 s")
	}
	return snap
}

// TestServerDeleteWhileTaken: deleting a server a snapshot is being taken
// of is refused (*TakingError, nothing of the server ended or removed) —
// before the fix the delete went ahead and the snapshot became ready with
// part of the files; the snapshot then ends ready with every file, and
// the delete goes through. A snapshot whose record was written while a
// delete had begun fails (ErrSourceDeleted) instead of walking a root
// being removed; once the delete failed and ended, snapshots are taken
// again.
func TestServerDeleteWhileTaken(t *testing.T) {
	e, gate := newPutGateEnv(t)
	e.srv.OnDelete(e.svc.ServerDeleting)
	e.srv.OnDeleteEnded(e.svc.DeleteEnded)
	ctx := t.Context()
	files := map[string]string{}
	for i := range 40 {
		files[fmt.Sprintf("world/f%02d.dat", i)] = randomText(150 << 10)
	}
	sv := e.server("doomed", files)
	root := e.node.Node.Root(sv.ID)
	var total int64 // every file's bytes: what the snapshot must hold
	if err := filepath.WalkDir(root, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			in, err := d.Info()
			if err != nil {
				return err
			}
			total += in.Size()
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	snap := e.createHeld(gate, sv.ID, "last")
	err := e.srv.Delete(ctx, e.team, sv.ID)
	if te, ok := errors.AsType[*TakingError](err); !ok || te.SnapshotID != snap.ID {
		t.Fatalf("delete of a server being snapshotted = %v, want *TakingError naming %s", err, snap.ID)
	}
	if _, err := e.srv.Get(ctx, e.team, sv.ID); err != nil {
		t.Fatalf("the server after a refused delete: %v", err)
	}
	if _, err := os.Stat(root); err != nil {
		t.Fatalf("the server's root after a refused delete: %v", err)
	}
	close(gate.release)
	snap = e.finalOf(snap.ID)
	if snap.Status != StatusReady || snap.SizeBytes == nil || *snap.SizeBytes != total {
		t.Fatalf("the snapshot = %s, size %v, error %q; want ready with all %d bytes", snap.Status, deref64(snap.SizeBytes), deref(snap.Error), total)
	}
	e.checkComplete(snap)

	// A delete that began (its mark set) before the snapshot's walk:
	// the snapshot fails, nothing read.
	if err := e.svc.ServerDeleting(ctx, sv.ID); err != nil {
		t.Fatal(err)
	}
	late, err := e.svc.Create(ctx, e.team, sv.ID, "late", "")
	if err != nil {
		t.Fatal(err)
	}
	if late = e.finalOf(late.ID); late.Status != StatusFailed || !strings.Contains(deref(late.Error), "being deleted") {
		t.Errorf("a snapshot begun during the delete = %s, %q; want failed, the server being deleted", late.Status, deref(late.Error))
	}
	e.svc.DeleteEnded(sv.ID) // the delete failed, the server stays
	again, err := e.svc.Create(ctx, e.team, sv.ID, "again", "")
	if err != nil {
		t.Fatal(err)
	}
	if again = e.finalOf(again.ID); again.Status != StatusReady {
		t.Errorf("a snapshot after the delete ended = %s, %q; want ready", again.Status, deref(again.Error))
	}

	if err := e.srv.Delete(ctx, e.team, sv.ID); err != nil {
		t.Fatalf("delete once no snapshot is being taken: %v", err)
	}
	if _, err := e.srv.Get(ctx, e.team, sv.ID); !errors.Is(err, servers.ErrNotFound) {
		t.Errorf("the server after its delete: %v", err)
	}
}

func deref64(n *int64) int64 {
	if n == nil {
		return -1
	}
	return *n
}

// TestRestoreWhileTaken: a restore into a server a snapshot is being
// taken of is refused (*TakingError) before the server is touched — it
// would swap the tree under the walk, and the snapshot would hold part of
// each tree — and so is a reinstall (servers.ErrSnapshotting); once the
// snapshot is ready the restore runs.
func TestRestoreWhileTaken(t *testing.T) {
	e, gate := newPutGateEnv(t)
	ctx := t.Context()
	sv := e.server("busy", map[string]string{"world/level.dat": "old", "world/big.dat": randomText(400 << 10)})
	first, err := e.svc.Create(ctx, e.team, sv.ID, "first", "")
	if err != nil {
		t.Fatal(err)
	}
	first = e.finalOf(first.ID)
	e.write(sv.ID, map[string]string{"world/level.dat": "new", "world/big.dat": randomText(400 << 10)})
	second := e.createHeld(gate, sv.ID, "second")
	for _, restore := range []func() error{
		func() error { _, err := e.svc.Restore(ctx, e.team, first.ID, sv.ID); return err },
		func() error { return e.svc.RestoreNow(ctx, e.team, first.ID, sv.ID) },
	} {
		err := restore()
		if te, ok := errors.AsType[*TakingError](err); !ok || te.SnapshotID != second.ID {
			t.Fatalf("restore into a server being snapshotted = %v, want *TakingError naming %s", err, second.ID)
		}
	}
	// Nor does a reinstall replace files under the walk.
	if err := e.srv.Reinstall(ctx, e.team, sv.ID, "", ""); !errors.Is(err, servers.ErrSnapshotting) {
		t.Fatalf("reinstall of a server being snapshotted = %v, want servers.ErrSnapshotting", err)
	}
	close(gate.release)
	if second = e.finalOf(second.ID); second.Status != StatusReady {
		t.Fatalf("the snapshot = %s, %q", second.Status, deref(second.Error))
	}
	if err := e.svc.RestoreNow(ctx, e.team, first.ID, sv.ID); err != nil {
		t.Fatalf("restore once the snapshot is ready: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(e.node.Node.Root(sv.ID), "world/level.dat")); string(b) != "old" {
		t.Errorf("world/level.dat after the restore = %q, want old", b)
	}
}

// TestTakeWaitsForRestore: a snapshot of a server a restore is writing
// into waits for the restore, then holds the restored tree whole (not the
// old tree's files beside the new one's).
func TestTakeWaitsForRestore(t *testing.T) {
	e, gate := newGatedEnv(t)
	gate.release = make(chan struct{})
	ctx := t.Context()
	oldFiles := map[string]string{"world/level.dat": "old", "world/a.dat": randomText(300 << 10), "world/b.dat": randomText(300 << 10)}
	sv := e.server("r", oldFiles)
	snap, err := e.svc.Create(ctx, e.team, sv.ID, "old", "")
	if err != nil {
		t.Fatal(err)
	}
	snap = e.finalOf(snap.ID)
	e.write(sv.ID, map[string]string{"world/level.dat": "new", "world/a.dat": "new a", "world/b.dat": "new b"})

	close(gate.armed)
	if _, err := e.svc.Restore(ctx, e.team, snap.ID, ""); err != nil {
		t.Fatal(err)
	}
	select {
	case <-gate.hit:
	case <-time.After(60 * time.Second):
		t.Fatal("the restore read no chunk within 60 s")
	}
	during, err := e.svc.Create(ctx, e.team, sv.ID, "during", "")
	if err != nil {
		t.Fatal(err)
	}
	// Its turn came: it says it waits for the restore (held at its first
	// chunk read), so it reads nothing before the restore ends.
	e.awaitConsole(sv.ID, "[kiln] snapshot "+during.ID+" waits for the restore into this server to end", nil)
	if got, _ := e.svc.Get(ctx, e.team, during.ID); got.Status != StatusCreating {
		t.Fatalf("the snapshot is %s (%q) while it waits for the restore, want creating", got.Status, deref(got.Error))
	}
	close(gate.release)
	e.waitRestored(sv.ID)
	during = e.finalOf(during.ID)
	if during.Status != StatusReady {
		t.Fatalf("the snapshot taken during the restore = %s, %q", during.Status, deref(during.Error))
	}
	// It holds the restored tree: restored into a fresh server, every
	// file is the old one.
	other := e.server("other", nil)
	if err := e.svc.RestoreNow(ctx, e.team, during.ID, other.ID); err != nil {
		t.Fatal(err)
	}
	for name, want := range oldFiles {
		if b, _ := os.ReadFile(filepath.Join(e.node.Node.Root(other.ID), name)); string(b) != want {
			t.Errorf("%s in the snapshot taken during the restore: %d bytes, want the restored %d", name, len(b), len(want))
		}
	}
}

// TestStartedDuringWalk: a server started while a snapshot of it, taken
// stopped (so without save-off), is walked may write its world under the
// walk; the snapshot walks the files again once the server runs, with
// its saves paused this time, says so in the console, and holds the
// world as the running server left it (its level.dat, written at the
// start). Before, it became ready from the first walk, without the
// level.dat and with no save-off.
func TestStartedDuringWalk(t *testing.T) {
	e, gate := newPutGateEnv(t)
	ctx := t.Context()
	files := map[string]string{}
	for i := range 20 {
		files[fmt.Sprintf("world/region/r.%d.0.mca", i)] = randomText(150 << 10)
	}
	sv := e.server("started", files)
	snap := e.createHeld(gate, sv.ID, "walked twice")
	if err := e.srv.Power(ctx, e.team, sv.ID, "start"); err != nil {
		t.Fatal(err)
	}
	e.waitServer(sv.ID, func(s servers.Server) bool { return s.Status == servers.StatusRunning })
	close(gate.release)
	snap = e.wait(snap.ID)
	e.checkComplete(snap)
	var joined string
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		lines, _ := e.srv.Console(ctx, e.team, sv.ID, 200)
		joined = strings.Join(lines, "\n")
		if strings.Contains(joined, "Automatic saving is now enabled") || time.Now().After(deadline) {
			break
		}
	}
	for _, want := range []string{"snapshot " + snap.ID + ": the server was started or stopped while its files were read; reading them again",
		"Automatic saving is now disabled", "Saved the game", "Automatic saving is now enabled"} {
		if !strings.Contains(joined, want) {
			t.Errorf("console lacks %q:\n%s", want, joined)
		}
	}
	// Restored into another server: the running server's level.dat too.
	other := e.server("copy", nil)
	if err := e.svc.RestoreNow(ctx, e.team, snap.ID, other.ID); err != nil {
		t.Fatal(err)
	}
	for p := range files {
		if b, err := os.ReadFile(filepath.Join(e.node.Node.Root(other.ID), p)); err != nil || string(b) != files[p] {
			t.Fatalf("%s restored: %d bytes, %v", p, len(b), err)
		}
	}
	want, err := os.ReadFile(filepath.Join(e.node.Node.Root(sv.ID), "world/level.dat"))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(filepath.Join(e.node.Node.Root(other.ID), "world/level.dat")); err != nil || string(got) != string(want) {
		t.Errorf("world/level.dat restored = %d bytes, %v; want the running server's %d", len(got), err, len(want))
	}
	if n := e.count(`SELECT COUNT(*) FROM snapshot_chunks WHERE snapshot_uuid = $1`, snap.UUID); n == 0 {
		t.Error("the snapshot references no chunk")
	}
}

// TestExtractedDuringWalk: an archive extracted into the server while a
// snapshot walks it (a batch of files moved in one by one, as a modpack's)
// makes the walk read the files again, so the snapshot holds the whole
// extraction — before, the walk had listed the root already and the
// snapshot held none of it, or part of it.
func TestExtractedDuringWalk(t *testing.T) {
	e, gate := newPutGateEnv(t)
	ctx := t.Context()
	tree := map[string]string{}
	for i := range 20 {
		tree[fmt.Sprintf("world/region/r.%d.0.mca", i)] = randomText(150 << 10)
	}
	pack := map[string]string{"mods/a.jar": randomText(40 << 10), "mods/b.jar": randomText(40 << 10), "config/c.toml": "c = 1\n"}
	var zipped bytes.Buffer
	zw := zip.NewWriter(&zipped)
	for name, body := range pack {
		w, err := zw.Create(name)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(w, body); err != nil {
			t.Fatal(err)
		}
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	tree["pack.zip"] = zipped.String()
	sv := e.server("extracted", tree)
	snap := e.createHeld(gate, sv.ID, "walked twice")
	if err := archive.NewService(e.srv).Decompress(ctx, e.team, sv.ID, "/", "pack.zip"); err != nil {
		t.Fatal(err)
	}
	close(gate.release)
	snap = e.wait(snap.ID)
	e.checkComplete(snap)
	lines, _ := e.srv.Console(ctx, e.team, sv.ID, 200)
	if want := "snapshot " + snap.ID + ": files were installed or extracted into the server while its files were read; reading them again"; !strings.Contains(strings.Join(lines, "\n"), want) {
		t.Errorf("console lacks %q:\n%s", want, strings.Join(lines, "\n"))
	}
	other := e.server("copy", nil)
	if err := e.svc.RestoreNow(ctx, e.team, snap.ID, other.ID); err != nil {
		t.Fatal(err)
	}
	maps.Copy(tree, pack)
	for p, want := range tree {
		if b, err := os.ReadFile(filepath.Join(e.node.Node.Root(other.ID), p)); err != nil || string(b) != want {
			t.Errorf("%s restored: %d bytes, %v; want %d bytes", p, len(b), err, len(want))
		}
	}
}

// TestUnsettledServerFailsSnapshot: a server started or stopped under
// every one of a snapshot's walks fails it with a sentence saying so,
// and nothing it stored stays referenced.
func TestUnsettledServerFailsSnapshot(t *testing.T) {
	e, gate := newPutGateEnv(t)
	ctx := t.Context()
	sv := e.server("flapping", map[string]string{"world/a.dat": randomText(300 << 10), "world/b.dat": randomText(300 << 10)})
	// Each walk (its manifest's upload, which the walk streams into as it
	// goes) waits for the server to change state once: a start, a stop,
	// a start.
	actions := []string{"start", "stop", "start"}
	gate.onManifest = func() {
		if len(actions) == 0 {
			return
		}
		action := actions[0]
		actions = actions[1:]
		if err := e.srv.Power(ctx, e.team, sv.ID, action); err != nil {
			t.Error(err)
			return
		}
		want := servers.StatusRunning
		if action == "stop" {
			want = servers.StatusOffline
		}
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			if got, _ := e.srv.Get(ctx, e.team, sv.ID); got.Status == want {
				return
			}
		}
		t.Errorf("the server never became %s", want)
	}
	close(gate.armed)
	close(gate.release)
	snap, err := e.svc.Create(ctx, e.team, sv.ID, "unsettled", "")
	if err != nil {
		t.Fatal(err)
	}
	snap = e.finalOf(snap.ID)
	if snap.Status != StatusFailed || deref(snap.Error) != "The server was started or stopped, or files were installed or extracted into it, while its files were read, 3 times in a row; take the snapshot again once it is running or stopped and no install is under way." {
		t.Fatalf("snapshot = %s, %q; want failed, the server unsettled", snap.Status, deref(snap.Error))
	}
	// The record says failed first; its manifest and references go
	// right after (fail).
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		n := e.count(`SELECT COUNT(*) FROM snapshot_chunks WHERE snapshot_uuid = $1`, snap.UUID)
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a failed snapshot still references %d chunks after 10 s", n)
		}
	}
	if _, err := e.store.Stat(ctx, manifest.Key(snap.UUID)); !errors.Is(err, blob.ErrNotFound) {
		t.Errorf("the failed snapshot's manifest: %v, want none", err)
	}
}

// TestStartJustBeforeRestore: a start asked for just before a restore of
// a stopped server (accepted: the server was not held yet) is not lost
// and does not run under the swap: its process is stopped by the restore
// or never begins, and the restore starts the server once the files are
// the snapshot's. In rounds, as the two interleave either way.
func TestStartJustBeforeRestore(t *testing.T) {
	e := newSvcEnv(t, storetest.SQLite(t))
	ctx := t.Context()
	sv := e.server("raced", map[string]string{"world/custom.dat": "v1"})
	snap := e.take(sv.ID, "v1", "")
	for round := range 4 {
		e.write(sv.ID, map[string]string{"world/custom.dat": fmt.Sprintf("changed %d", round)})
		if err := e.srv.Power(ctx, e.team, sv.ID, "start"); err != nil {
			t.Fatal(err)
		}
		if _, err := e.svc.Restore(ctx, e.team, snap.ID, ""); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		e.waitRestored(sv.ID)
		e.waitServer(sv.ID, func(s servers.Server) bool { return s.Status == servers.StatusRunning })
		if b, _ := os.ReadFile(filepath.Join(e.node.Node.Root(sv.ID), "world/custom.dat")); string(b) != "v1" {
			t.Fatalf("round %d: world/custom.dat = %q after the restore, want v1", round, b)
		}
		if err := e.srv.Power(ctx, e.team, sv.ID, "stop"); err != nil {
			t.Fatal(err)
		}
		e.waitServer(sv.ID, func(s servers.Server) bool { return s.Status == servers.StatusOffline })
	}
}
