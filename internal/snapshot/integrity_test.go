package snapshot

import (
	"bytes"
	"errors"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kilnhq/kiln/internal/blob"
	"github.com/kilnhq/kiln/internal/blob/blobtest"
	"github.com/kilnhq/kiln/internal/snapshot/engine"
	"github.com/kilnhq/kiln/internal/snapshot/manifest"
	"github.com/kilnhq/kiln/internal/store"
	"github.com/kilnhq/kiln/internal/store/storetest"
)

// corruptBlob flips one bit in the middle of the blob under key, in the
// store itself: in place in its file for the file backend (what a disk's
// decay does), as a new object of the same name for S3 (what a faulty
// gateway wrote).
func corruptBlob(t *testing.T, st blob.Store, key string) {
	t.Helper()
	if u, err := url.Parse(st.String()); err == nil && u.Scheme == "file" {
		f, err := os.OpenFile(filepath.Join(u.Path, filepath.FromSlash(key)), os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		fi, err := f.Stat()
		if err != nil {
			t.Fatal(err)
		}
		b := make([]byte, 1)
		if _, err := f.ReadAt(b, fi.Size()/2); err != nil {
			t.Fatal(err)
		}
		b[0] ^= 0x10
		if _, err := f.WriteAt(b, fi.Size()/2); err != nil {
			t.Fatal(err)
		}
		return
	}
	rc, err := st.Get(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(rc)
	rc.Close()
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0x10
	if err := st.Delete(t.Context(), key); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Put(t.Context(), key, bytes.NewReader(b), int64(len(b))); err != nil {
		t.Fatal(err)
	}
}

// chunkOf returns the key of the first chunk of the file rel in the
// snapshot's manifest.
func (e *svcEnv) chunkOf(snap Snapshot, rel string) string {
	e.t.Helper()
	var sum *[32]byte
	info, err := engine.Scan(e.t.Context(), e.store, manifest.Key(snap.UUID), func(en *manifest.Entry) error {
		if en.Path == rel {
			sum = &en.Extents[0].Chunk.Sum
		}
		return nil
	})
	if err != nil || sum == nil {
		e.t.Fatalf("the chunk of %s in %s: %v", rel, snap.ID, err)
	}
	return manifest.ChunkKey(info.Space, *sum)
}

// TestCorruptChunkQuarantined, on the file store (both databases) and on
// S3: a chunk corrupted in the store fails the restore of its snapshot
// with a sentence saying so, marks the snapshot damaged and moves the
// chunk aside; so the next snapshot of the same files stores it again
// (before, it found the corrupt chunk and referenced it: ready, and
// unrestorable), and restores byte for byte. The damaged snapshot is
// whole again then: its restore checks, drops the mark and succeeds.
func TestCorruptChunkQuarantined(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) { testCorruptChunk(t, newSvcEnv(t, db)) })
}

func TestCorruptChunkQuarantinedS3(t *testing.T) {
	testCorruptChunk(t, newSvcEnvOn(t, storetest.SQLite(t), blobtest.S3(t)))
}

func testCorruptChunk(t *testing.T, e *svcEnv) {
	ctx := t.Context()
	region := randomText(3 << 20) // 6 MiB: several chunks
	files := map[string]string{"world/region/r.0.0.mca": region, "server.properties": "motd=hi\n"}
	sv := e.server("world", files)
	first := e.take(sv.ID, "first", "")
	bad := e.chunkOf(first, "world/region/r.0.0.mca")
	corruptBlob(t, e.store, bad)

	e.write(sv.ID, map[string]string{"world/region/r.0.0.mca": "griefed", "server.properties": "motd=griefed\n"})
	err := e.svc.RestoreNow(ctx, e.team, first.ID, sv.ID)
	const sentence = "the snapshot is damaged: data it holds is missing from the snapshot store or was found corrupt (and set aside): it cannot be restored or downloaded whole until a newer snapshot stores the same data again."
	if de, ok := errors.AsType[*DamagedError](err); !ok || de.SnapshotID != first.ID || !strings.HasSuffix(err.Error(), sentence) || strings.Contains(err.Error(), "chunks/") {
		t.Fatalf("restore of the snapshot with a corrupt chunk = %v; want a DamagedError ending in %q, naming no chunk", err, sentence)
	}
	if b, _ := os.ReadFile(filepath.Join(e.node.Node.Root(sv.ID), "server.properties")); string(b) != "motd=griefed\n" {
		t.Errorf("server.properties after the failed restore = %q, want it as it was", b)
	}
	got, err := e.svc.Get(ctx, e.team, first.ID)
	if err != nil || got.Damage == nil || *got.Damage != damageChunks || got.DamagedAt == nil || got.Status != StatusReady {
		t.Errorf("the snapshot after the failed restore = %+v, %v; want ready and damaged", got, err)
	}
	if _, err := e.store.Stat(ctx, bad); !errors.Is(err, blob.ErrNotFound) {
		t.Errorf("the corrupt chunk is still under its name: %v", err)
	}
	var moved []string
	if err := e.store.List(ctx, engine.QuarantinePrefix, func(in blob.Info) error { moved = append(moved, in.Key); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(moved) != 1 || !strings.HasPrefix(moved[0], engine.QuarantinePrefix+bad+".") {
		t.Errorf("quarantined = %q, want the corrupt chunk", moved)
	}
	if n := e.count(`SELECT count(*) FROM chunks WHERE state <> $1`, chunkLive); n != 0 {
		t.Errorf("%d chunk rows not live after the quarantine", n)
	}
	// A restore or a download of it now is refused at once.
	if _, err := e.svc.Restore(ctx, e.team, first.ID, ""); !errors.As(err, new(*DamagedError)) {
		t.Errorf("Restore of the damaged snapshot = %v, want a DamagedError", err)
	}
	if _, err := e.svc.Export(ctx, e.team, first.ID, ""); !errors.As(err, new(*DamagedError)) {
		t.Errorf("Export of the damaged snapshot = %v, want a DamagedError", err)
	}
	// One path of it whose data is whole still comes back.
	dl, err := e.svc.Export(ctx, e.team, first.ID, "server.properties")
	if err != nil {
		t.Fatalf("Export of a whole path of the damaged snapshot: %v", err)
	}
	var archive bytes.Buffer
	if err := dl.WriteTo(ctx, &archive, ExportTar); err != nil {
		t.Fatalf("download of a whole path of the damaged snapshot: %v", err)
	}
	if got := untar(t, &archive); len(got) != 1 || got["server.properties"] != "motd=hi\n" {
		t.Errorf("the download of server.properties holds %q", got)
	}
	if got, _ := e.svc.Get(ctx, e.team, first.ID); got.Damage == nil {
		t.Errorf("a download of one path unmarked the damaged snapshot")
	}

	// The same files again: the new snapshot stores the chunk anew.
	e.write(sv.ID, files)
	second := e.take(sv.ID, "second", "")
	if second.Damage != nil {
		t.Errorf("the new snapshot is marked damaged: %s", *second.Damage)
	}
	e.write(sv.ID, map[string]string{"world/region/r.0.0.mca": "griefed", "server.properties": "motd=griefed\n"})
	if err := e.svc.RestoreNow(ctx, e.team, second.ID, sv.ID); err != nil {
		t.Fatalf("restore of the snapshot taken after the quarantine: %v", err)
	}
	for rel, want := range files {
		if b, _ := os.ReadFile(filepath.Join(e.node.Node.Root(sv.ID), rel)); string(b) != want {
			t.Errorf("%s after the restore: %d bytes, not the snapshot's %d", rel, len(b), len(want))
		}
	}
	// The first is whole again: its restore checks, drops the mark, and
	// succeeds.
	e.write(sv.ID, map[string]string{"server.properties": "motd=griefed\n"})
	if err := e.svc.RestoreNow(ctx, e.team, first.ID, sv.ID); err != nil {
		t.Fatalf("restore of the first snapshot once its chunk was stored again: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(e.node.Node.Root(sv.ID), "world/region/r.0.0.mca")); string(b) != region {
		t.Errorf("the region file after the restore of the first: %d bytes, not the snapshot's", len(b))
	}
	if got, _ := e.svc.Get(ctx, e.team, first.ID); got.Damage != nil || got.DamagedAt != nil {
		t.Errorf("the first snapshot, whole again, is still marked: %v", *got.Damage)
	}
}

// TestCorruptChunkInDownload: a chunk found corrupt while a download is
// being sent cuts it off, moves the chunk aside and marks every snapshot
// that references it (both here, sharing it), not only the one
// downloaded.
func TestCorruptChunkInDownload(t *testing.T) {
	e := newSvcEnv(t, storetest.SQLite(t))
	ctx := t.Context()
	sv := e.server("world", map[string]string{"world/region/r.0.0.mca": randomText(2 << 20)})
	a := e.take(sv.ID, "a", "")
	b := e.take(sv.ID, "b", "") // the same chunks
	corruptBlob(t, e.store, e.chunkOf(a, "world/region/r.0.0.mca"))
	dl, err := e.svc.Export(ctx, e.team, b.ID, "")
	if err != nil {
		t.Fatal(err)
	}
	err = dl.WriteTo(ctx, io.Discard, ExportTar)
	if !errors.As(err, new(*DamagedError)) {
		t.Fatalf("download with a corrupt chunk = %v, want a DamagedError", err)
	}
	for _, id := range []string{a.ID, b.ID} {
		if got, _ := e.svc.Get(ctx, e.team, id); got.Damage == nil {
			t.Errorf("snapshot %s, referencing the corrupt chunk, is not marked damaged", id)
		}
	}
	if n := e.blobs(engine.QuarantinePrefix); n != 1 {
		t.Errorf("%d chunks quarantined, want 1", n)
	}
}

// TestManifestMissing: a snapshot whose manifest is gone from the store
// is refused at once with a sentence (*DamagedError; the API's 409
// SNAPSHOT_DAMAGED), by a restore (before: accepted, then failed in the
// background), a restore of one path, RestoreNow and a download (before:
// the store's not-found error, an answer 500), and marked damaged.
func TestManifestMissing(t *testing.T) {
	e := newSvcEnv(t, storetest.SQLite(t))
	ctx := t.Context()
	sv := e.server("world", map[string]string{"world/level.dat": "level", "server.properties": "motd=hi\n"})
	snap := e.take(sv.ID, "lost", "")
	if err := e.store.Delete(ctx, manifest.Key(snap.UUID)); err != nil {
		t.Fatal(err)
	}
	const sentence = "the snapshot is damaged: its manifest is missing from the snapshot store: it cannot be restored or downloaded."
	check := func(what string, err error) {
		t.Helper()
		de, ok := errors.AsType[*DamagedError](err)
		if !ok || de.Error() != sentence || de.SnapshotID != snap.ID {
			t.Errorf("%s = %v; want a DamagedError saying %q", what, err, sentence)
		}
	}
	_, err := e.svc.Restore(ctx, e.team, snap.ID, "")
	check("Restore", err)
	got, err := e.svc.Get(ctx, e.team, snap.ID)
	if err != nil || got.Damage == nil || *got.Damage != damageManifestMissing || got.DamagedAt == nil {
		t.Fatalf("the snapshot after the refused restore = %+v, %v; want marked damaged", got, err)
	}
	_, err = e.svc.RestorePath(ctx, e.team, snap.ID, "", "world")
	check("RestorePath", err)
	check("RestoreNow", e.svc.RestoreNow(ctx, e.team, snap.ID, sv.ID))
	_, err = e.svc.Export(ctx, e.team, snap.ID, "")
	check("Export", err)
	if n := e.count(`SELECT count(*) FROM snapshot_reads`); n != 0 {
		t.Errorf("%d readers left registered by the refusals", n)
	}
	if b, _ := os.ReadFile(filepath.Join(e.node.Node.Root(sv.ID), "server.properties")); string(b) != "motd=hi\n" {
		t.Errorf("server.properties = %q", b)
	}
}

// TestCheck: Check finds, for every ready snapshot of every team, a
// manifest missing or corrupt and a chunk missing; with ReadData a chunk
// corrupt too, which it moves aside. It marks the snapshots damaged
// (naming each with its team, server and name), and unmarks those found
// whole again once a new snapshot stored the chunks they missed.
func TestCheck(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) { testCheck(t, newSvcEnv(t, db)) })
}

func TestCheckS3(t *testing.T) {
	testCheck(t, newSvcEnvOn(t, storetest.SQLite(t), blobtest.S3(t)))
}

func testCheck(t *testing.T, e *svcEnv) {
	ctx := t.Context()
	shared := randomText(1 << 20)
	files := map[string]string{"world/region/r.0.0.mca": shared, "plugins/a.yml": "a: 1\n"}
	one := e.server("one", files)
	a := e.take(one.ID, "a", "") // a and b share the region file's chunks
	b := e.take(one.ID, "b", "")
	two := e.server("two", map[string]string{"world/region/r.0.0.mca": randomText(1 << 20)})
	c := e.take(two.ID, "c", "")
	three := e.server("three", map[string]string{"level.dat": "x"})
	d := e.take(three.ID, "d", "")
	f := e.take(three.ID, "f", "")
	e.team = "team_b"
	other := e.server("other", map[string]string{"level.dat": "other team"})
	g := e.take(other.ID, "g", "")
	e.team = "team_a"

	corruptBlob(t, e.store, e.chunkOf(a, "world/region/r.0.0.mca"))
	if err := e.store.Delete(ctx, e.chunkOf(c, "world/region/r.0.0.mca")); err != nil {
		t.Fatal(err)
	}
	if err := e.store.Delete(ctx, manifest.Key(d.UUID)); err != nil {
		t.Fatal(err)
	}
	corruptBlob(t, e.store, manifest.Key(f.UUID))

	damaged := func(rep CheckReport) []string {
		var out []string
		for _, dm := range rep.Damaged {
			out = append(out, dm.Name)
		}
		return out
	}
	rep, err := e.svc.Check(ctx, CheckOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := damaged(rep); !slices.Equal(got, []string{"c", "d", "f"}) || rep.Snapshots != 6 || len(rep.Quarantined) != 0 {
		t.Fatalf("Check = %+v; want c, d and f damaged of 6", rep)
	}
	want := DamagedSnapshot{ID: c.ID, UUID: c.UUID, TeamID: "team_a", TeamName: "team_a", ServerID: two.ID, Name: "c",
		Reason: damageChunks, MissingChunks: 1}
	if rep.Damaged[0] != want {
		t.Errorf("c = %+v, want %+v", rep.Damaged[0], want)
	}
	if rep.Damaged[1].Reason != damageManifestMissing || !rep.Damaged[1].ManifestMissing || rep.Damaged[2].Reason != damageManifestCorrupt || !rep.Damaged[2].ManifestCorrupt {
		t.Errorf("d, f = %q, %q", rep.Damaged[1].Reason, rep.Damaged[2].Reason)
	}

	rep, err = e.svc.Check(ctx, CheckOptions{ReadData: true})
	if err != nil {
		t.Fatal(err)
	}
	if got := damaged(rep); !slices.Equal(got, []string{"a", "b", "c", "d", "f"}) || rep.ReadBytes == 0 {
		t.Fatalf("Check --read-data = %+v; want a, b, c, d and f damaged", rep)
	}
	if rep.Damaged[0].CorruptChunks != 1 || rep.Damaged[1].CorruptChunks != 1 || len(rep.Quarantined) != 1 ||
		rep.Quarantined[0].Key != e.chunkOf(a, "world/region/r.0.0.mca") {
		t.Errorf("Check --read-data: %+v; want the shared chunk corrupt in a and b, and quarantined", rep)
	}
	for _, id := range []string{a.ID, b.ID, c.ID, d.ID, f.ID} {
		if got, _ := e.svc.Get(ctx, e.team, id); got.Damage == nil {
			t.Errorf("snapshot %s is not marked damaged", id)
		}
	}
	if got, _ := e.svc.Get(ctx, "team_b", g.ID); got.Damage != nil {
		t.Errorf("g is marked damaged: %s", *got.Damage)
	}

	// A new snapshot of one stores the chunk again: a and b are whole.
	e.take(one.ID, "h", "")
	rep, err = e.svc.Check(ctx, CheckOptions{ReadData: true})
	if err != nil {
		t.Fatal(err)
	}
	if got := damaged(rep); !slices.Equal(got, []string{"c", "d", "f"}) || rep.Healed != 2 || len(rep.Quarantined) != 0 {
		t.Errorf("Check after the new snapshot = %+v; want c, d and f damaged, a and b healed", rep)
	}
	for _, id := range []string{a.ID, b.ID} {
		if got, _ := e.svc.Get(ctx, e.team, id); got.Damage != nil {
			t.Errorf("snapshot %s, whole again, is still marked", id)
		}
	}
}

// TestQuarantineClaim: a chunk being moved aside is held by its mover's
// claim in the ledger. A pin meanwhile adds its reference and leaves the
// claim; a reaper and a second quarantine leave a chunk a live process
// holds (the second would otherwise move the good copy a snapshot stored
// after the first move); a claim whose process died is released by the
// collector, and taken over by the next quarantine.
func TestQuarantineClaim(t *testing.T) {
	e := newSvcEnv(t, storetest.SQLite(t))
	ctx := t.Context()
	ref := manifest.ChunkRef{Sum: [32]byte{0xcd}, Len: 5}
	key := manifest.ChunkKey("", ref.Sum)
	if _, err := e.store.Put(ctx, key, strings.NewReader("not a chunk"), 11); err != nil {
		t.Fatal(err)
	}
	held := e.svc.newClaim() // this process: alive
	if _, err := e.db.Write().ExecContext(ctx, `INSERT INTO chunks (key, state, stored_size, claim, updated_at) VALUES ($1, $2, 11, $3, $4)`,
		key, chunkQuarantine, held, store.Now()); err != nil {
		t.Fatal(err)
	}
	const snap = "6f1c2a8e-7d3b-4c2a-9a51-2d3f4e5a6b7d"
	if err := e.svc.pin(ctx, snap, key); err != nil {
		t.Fatal(err)
	}
	if n := e.count(`SELECT count(*) FROM chunks WHERE key = $1 AND state = $2 AND claim = $3`, key, chunkQuarantine, held); n != 1 {
		t.Errorf("the pin took the chunk from its mover")
	}
	if n := e.count(`SELECT count(*) FROM snapshot_chunks WHERE snapshot_uuid = $1 AND chunk = $2`, snap, key); n != 1 {
		t.Errorf("the pin added no reference")
	}
	if to, err := e.svc.quarantine(ctx, key, ref); err != nil || to != "" {
		t.Errorf("a second quarantine of a held chunk = %q, %v; want it left to its mover", to, err)
	}
	if _, err := e.db.Write().ExecContext(ctx, `DELETE FROM snapshot_chunks WHERE chunk = $1`, key); err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.svc.reap(ctx, key); err != nil {
		t.Fatal(err)
	}
	if _, err := e.store.Stat(ctx, key); err != nil {
		t.Errorf("a reaper deleted a chunk a live mover holds: %v", err)
	}

	// Its mover died: the collector makes it live again (and, nothing
	// referencing it, reaps it); a quarantine takes a dead claim over.
	if _, err := e.db.Write().ExecContext(ctx, `UPDATE chunks SET claim = 'inst_dead/x' WHERE key = $1`, key); err != nil {
		t.Fatal(err)
	}
	if err := e.svc.releaseQuarantines(ctx); err != nil {
		t.Fatal(err)
	}
	if n := e.count(`SELECT count(*) FROM chunks WHERE key = $1 AND state = $2 AND claim IS NULL`, key, chunkLive); n != 1 {
		t.Errorf("the chunk of a dead mover was not released")
	}
	if _, err := e.db.Write().ExecContext(ctx, `UPDATE chunks SET state = $1, claim = 'inst_dead/x' WHERE key = $2`, chunkQuarantine, key); err != nil {
		t.Fatal(err)
	}
	to, err := e.svc.quarantine(ctx, key, ref)
	if err != nil || !strings.HasPrefix(to, engine.QuarantinePrefix+key+".") {
		t.Errorf("quarantine of a chunk a dead mover held = %q, %v; want it moved", to, err)
	}
	if n := e.count(`SELECT count(*) FROM chunks WHERE key = $1 AND state = $2 AND claim IS NULL`, key, chunkLive); n != 1 {
		t.Errorf("the chunk is not live again after its quarantine")
	}
}
