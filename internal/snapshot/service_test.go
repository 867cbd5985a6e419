package snapshot

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/kilnhq/kiln/internal/blob"
	"github.com/kilnhq/kiln/internal/blob/blobtest"
	"github.com/kilnhq/kiln/internal/eventually"
	"github.com/kilnhq/kiln/internal/quota"
	"github.com/kilnhq/kiln/internal/servers"
	"github.com/kilnhq/kiln/internal/servers/serverstest"
	"github.com/kilnhq/kiln/internal/snapshot/engine"
	"github.com/kilnhq/kiln/internal/snapshot/manifest"
	"github.com/kilnhq/kiln/internal/store"
	"github.com/kilnhq/kiln/internal/store/storetest"
)

// svcEnv is a snapshot service on real servers (kiln-test, process
// runtime), a real database and a file blob store.
type svcEnv struct {
	t     *testing.T
	db    *store.DB
	srv   *servers.Service
	node  *serverstest.Env
	store blob.Store
	svc   *Service
	team  string
}

func newSvcEnv(t *testing.T, db *store.DB) *svcEnv {
	t.Helper()
	st, err := blob.Open(t.Context(), "file://"+t.TempDir(), blob.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return newSvcEnvOn(t, db, st)
}

// newSvcEnvOn is newSvcEnv on the blob store st.
func newSvcEnvOn(t *testing.T, db *store.DB, st blob.Store) *svcEnv {
	t.Helper()
	return newSvcEnvClock(t, db, st, nil)
}

// newSvcEnvClock is newSvcEnvOn with the service's clock now.
func newSvcEnvClock(t *testing.T, db *store.DB, st blob.Store, now func() time.Time) *svcEnv {
	t.Helper()
	for _, team := range []string{"team_a", "team_b"} {
		if _, err := db.Write().ExecContext(t.Context(), `INSERT INTO teams (id, name, created_at) VALUES ($1, $2, 1)`, team, team); err != nil {
			t.Fatal(err)
		}
	}
	se := serverstest.New(t, db, serverstest.Options{})
	svc := New(db, st, se.Service, se.Catalog, Options{Owner: "inst_test", Grace: time.Nanosecond, SaveTimeout: 10 * time.Second, Now: now}, nil)
	t.Cleanup(svc.Close)
	return &svcEnv{t: t, db: db, srv: se.Service, node: se, store: st, svc: svc, team: "team_a"}
}

// server makes a kiln-test server of team_a and writes files into it.
func (e *svcEnv) server(name string, files map[string]string) servers.Server {
	e.t.Helper()
	sv, err := e.srv.Create(e.t.Context(), e.team, servers.NewServer{Name: name, Software: "kiln-test", MemoryMB: 256, DiskMB: 1024})
	if err != nil {
		e.t.Fatal(err)
	}
	e.waitServer(sv.ID, func(s servers.Server) bool { return s.Status != servers.StatusInstalling })
	e.write(sv.ID, files)
	return sv
}

func (e *svcEnv) write(id string, files map[string]string) {
	e.t.Helper()
	root := e.node.Node.Root(id)
	for p, c := range files {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			e.t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(c), 0o644); err != nil {
			e.t.Fatal(err)
		}
	}
}

func (e *svcEnv) waitServer(id string, cond func(servers.Server) bool) servers.Server {
	e.t.Helper()
	return eventually.Value(e.t, eventually.Within, "server "+id+" as awaited", func() (servers.Server, bool, string) {
		sv, err := e.srv.Get(e.t.Context(), e.team, id)
		if err != nil {
			e.t.Fatal(err)
		}
		return sv, cond(sv), "still " + sv.Status
	})
}

// take creates a snapshot of server id and waits for it to be ready (or
// fails the test).
func (e *svcEnv) take(id, name, ignore string) Snapshot {
	e.t.Helper()
	snap, err := e.svc.Create(e.t.Context(), e.team, id, name, ignore)
	if err != nil {
		e.t.Fatal(err)
	}
	return e.wait(snap.ID)
}

// wait waits for a snapshot to be ready (or fails the test).
func (e *svcEnv) wait(id string) Snapshot {
	e.t.Helper()
	s := e.finalOf(id)
	if s.Status == StatusFailed {
		e.t.Fatalf("snapshot %s failed: %s", id, deref(s.Error))
	}
	return s
}

// finalOf waits until snapshot id is ready or failed.
func (e *svcEnv) finalOf(id string) Snapshot {
	e.t.Helper()
	return eventually.Value(e.t, eventually.Within, "snapshot "+id+" ready or failed", func() (Snapshot, bool, string) {
		s, err := e.svc.Get(e.t.Context(), e.team, id)
		if err != nil {
			e.t.Fatal(err)
		}
		return s, s.Status == StatusReady || s.Status == StatusFailed, "still " + s.Status
	})
}

func (e *svcEnv) count(q string, args ...any) int {
	e.t.Helper()
	var n int
	if err := e.db.Read().QueryRowContext(e.t.Context(), q, args...).Scan(&n); err != nil {
		e.t.Fatal(err)
	}
	return n
}

// blobs counts the blobs under prefix.
func (e *svcEnv) blobs(prefix string) int {
	e.t.Helper()
	n := 0
	if err := e.store.List(e.t.Context(), prefix, func(blob.Info) error { n++; return nil }); err != nil {
		e.t.Fatal(err)
	}
	return n
}

func randomText(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return fmt.Sprintf("%x", b)
}

// TestSnapshotLifecycle, on both stores: a snapshot is pending, then
// ready with its figures; a second one after a small change stores
// little; listing and getting are scoped to the team; deleting the first
// frees only what the second does not share, deleting the second frees
// the rest, and no chunk, manifest or ledger row is left.
func TestSnapshotLifecycle(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) { testLifecycle(t, newSvcEnv(t, db)) })
}

// TestSnapshotLifecycleS3 is the lifecycle on the S3 backend (versitygw,
// started by scripts/test), and a restore from it.
func TestSnapshotLifecycleS3(t *testing.T) {
	st := blobtest.S3(t)
	testLifecycle(t, newSvcEnvOn(t, storetest.SQLite(t), st))
}

// TestSnapshotS3ErrorsTold: a store the S3 server refuses (a bucket it
// does not have, a wrong secret) or that nothing answers fails the
// snapshot with a sentence that names neither the endpoint, the bucket nor
// the prefix: the snapshot's error field is the team's to read.
func TestSnapshotS3ErrorsTold(t *testing.T) {
	u, access, secret := blobtest.Server(t)
	ep, err := url.Parse(u.Query().Get("endpoint"))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String() // nothing listens there once closed
	ln.Close()
	for _, tc := range []struct {
		name, host, secret, want string
	}{
		{"missing bucket", ep.Host, secret, "The object store refused the request (no such bucket)."},
		{"wrong secret", ep.Host, "wrong-secret-0123456789", "The object store refused the request (access denied)."},
		{"unreachable", dead, secret, "The object store is unreachable."},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bucket := fmt.Sprintf("kiln-missing-%s", randomText(6))
			prefix := "tenant-prefix-" + randomText(4)
			su := *u
			su.Host, su.Path = bucket, "/"+prefix
			q := su.Query()
			q.Set("endpoint", "http://"+tc.host)
			su.RawQuery = q.Encode()
			st, err := blob.Open(t.Context(), su.String(), blob.Options{AccessKeyID: access, SecretAccessKey: tc.secret})
			if err != nil {
				t.Fatalf("open %s: %v", su.String(), err)
			}
			e := newSvcEnvOn(t, storetest.SQLite(t), st)
			sv := e.server("world", map[string]string{"world/level.dat": "level"})
			snap, err := e.svc.Create(t.Context(), e.team, sv.ID, "first", "")
			if err != nil {
				t.Fatal(err)
			}
			e.finalOf(snap.ID)
			got, err := e.svc.Get(t.Context(), e.team, snap.ID)
			if err != nil {
				t.Fatal(err)
			}
			if got.Status != StatusFailed || deref(got.Error) != tc.want {
				t.Fatalf("snapshot = %s, error %q; want failed, %q", got.Status, deref(got.Error), tc.want)
			}
			for _, secret := range []string{tc.host, bucket, prefix} {
				if strings.Contains(*got.Error, secret) {
					t.Errorf("the snapshot's error %q names %s", *got.Error, secret)
				}
			}
		})
	}
}

func testLifecycle(t *testing.T, e *svcEnv) {
	{
		ctx := t.Context()
		big := randomText(3 << 20) // 6 MiB of text: several chunks
		sv := e.server("world", map[string]string{"world/region/r.0.0.mca": big, "server.properties": "motd=hi\n", "logs/latest.log": "noise"})

		if _, err := e.svc.Create(ctx, e.team, sv.ID, "", ""); err == nil {
			t.Error("Create with an empty name succeeded")
		}
		if _, err := e.svc.Create(ctx, e.team, sv.ID, "x", "a\x00b"); err == nil {
			t.Error("Create with a broken ignore pattern succeeded")
		}
		if _, err := e.svc.Create(ctx, "team_b", sv.ID, "x", ""); !errors.Is(err, servers.ErrNotFound) {
			t.Errorf("Create of another team's server = %v, want servers.ErrNotFound", err)
		}
		first, err := e.svc.Create(ctx, e.team, sv.ID, "first", "logs/\n")
		if err != nil {
			t.Fatal(err)
		}
		if first.Status != StatusPending || !strings.HasPrefix(first.ID, "snap_") || len(first.UUID) != 36 {
			t.Errorf("created = %+v", first)
		}
		first = e.wait(first.ID)
		// The world and server.properties, and the few bytes the install
		// wrote; not logs/ (ignored).
		if first.SizeBytes == nil || *first.SizeBytes < int64(len(big)+len("motd=hi\n")) || *first.SizeBytes > int64(len(big)+200) {
			t.Errorf("size_bytes = %v, want about %d", first.SizeBytes, len(big)+len("motd=hi\n"))
		}
		if first.StoredBytes == nil || *first.StoredBytes <= 0 || first.CompletedAt == nil || first.BytesDone != first.BytesTotal {
			t.Errorf("ready = %+v", first)
		}

		// 1 % changed: the second snapshot stores a few chunks at most.
		e.write(sv.ID, map[string]string{"server.properties": "motd=changed\n"})
		second := e.take(sv.ID, "second", "logs/\n")
		if *second.StoredBytes*20 > *first.StoredBytes {
			t.Errorf("second snapshot stored %d bytes, first %d: want under 5 %%", *second.StoredBytes, *first.StoredBytes)
		}
		// Restored from the store (byte for byte).
		e.write(sv.ID, map[string]string{"server.properties": "motd=later\n"})
		if err := e.svc.RestoreNow(ctx, e.team, second.ID, sv.ID); err != nil {
			t.Fatal(err)
		}
		if b, _ := os.ReadFile(filepath.Join(e.node.Node.Root(sv.ID), "server.properties")); string(b) != "motd=changed\n" {
			t.Errorf("server.properties after the restore = %q", b)
		}
		if b, _ := os.ReadFile(filepath.Join(e.node.Node.Root(sv.ID), "world/region/r.0.0.mca")); string(b) != big {
			t.Errorf("the region file after the restore differs (%d bytes)", len(b))
		}
		// Downloaded from the store: the region file alone, as tar.zst.
		dl, err := e.svc.Export(ctx, e.team, second.ID, "world/region")
		if err != nil {
			t.Fatal(err)
		}
		var archive bytes.Buffer
		if err := dl.WriteTo(ctx, &archive, ExportTarZst); err != nil {
			t.Fatal(err)
		}
		if got := untarZst(t, archive.Bytes()); len(got) != 2 || got["world/region/"] != "" || got["world/region/r.0.0.mca"] != big {
			t.Errorf("the download of world/region holds %d entries", len(got))
		}
		list, err := e.svc.List(ctx, e.team, sv.ID)
		if err != nil || len(list) != 2 || list[0].ID != second.ID {
			t.Fatalf("List = %v, %v; want second then first", list, err)
		}
		if l, _ := e.svc.List(ctx, "team_b", ""); len(l) != 0 {
			t.Errorf("team_b lists %d snapshots", len(l))
		}
		if _, err := e.svc.Get(ctx, "team_b", first.ID); !errors.Is(err, ErrNotFound) {
			t.Errorf("Get by another team = %v, want ErrNotFound", err)
		}
		if _, err := e.svc.Delete(ctx, "team_b", first.ID); !errors.Is(err, ErrNotFound) {
			t.Errorf("Delete by another team = %v, want ErrNotFound", err)
		}

		d, err := e.svc.Delete(ctx, e.team, first.ID)
		if err != nil {
			t.Fatal(err)
		}
		if !d.Deleted || !d.StorageDeleted || d.CleanupSkipped || d.CleanupReason != nil || d.SharedBytes == 0 || d.FreedBytes == 0 {
			t.Errorf("delete of the first = %+v; want deleted, storage deleted, some shared and some freed", d)
		}
		if d.SharedBytes < *first.StoredBytes*9/10 {
			t.Errorf("shared %d bytes of the first's %d: the world's chunks are shared", d.SharedBytes, *first.StoredBytes)
		}
		d, err = e.svc.Delete(ctx, e.team, second.ID)
		if err != nil || !d.StorageDeleted || d.SharedBytes != 0 {
			t.Fatalf("delete of the second = %+v, %v", d, err)
		}
		if n := e.blobs(chunkPrefix) + e.blobs(manifestPrefix); n != 0 {
			t.Errorf("%d blobs left after deleting every snapshot", n)
		}
		if n := e.count(`SELECT count(*) FROM chunks`) + e.count(`SELECT count(*) FROM snapshot_chunks`); n != 0 {
			t.Errorf("%d ledger rows left", n)
		}
		if _, err := e.svc.Delete(ctx, e.team, second.ID); !errors.Is(err, ErrNotFound) {
			t.Errorf("Delete again = %v, want ErrNotFound", err)
		}
	}
}

// TestRestoreRunningServer: a running server is stopped, made equal to
// the snapshot (changed files back, new files removed, ignored ones
// kept), and started again.
func TestRestoreRunningServer(t *testing.T) {
	e := newSvcEnv(t, storetest.SQLite(t))
	ctx := t.Context()
	sv := e.server("world", map[string]string{"world/custom.dat": "v1", "plugins/a.jar": "jar", "cache/tmp": "keep-me"})
	if err := e.srv.Power(ctx, e.team, sv.ID, "start"); err != nil {
		t.Fatal(err)
	}
	e.waitServer(sv.ID, func(s servers.Server) bool { return s.Status == servers.StatusRunning })
	snap := e.take(sv.ID, "before", "cache/\n")
	// The running game server's saves were paused and flushed around it.
	// save-on is sent once the snapshot is ready and not awaited, so the
	// game's answer may reach the console a moment after the snapshot.
	var joined string
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		lines, _ := e.srv.Console(ctx, e.team, sv.ID, 50)
		joined = strings.Join(lines, "\n")
		if strings.Contains(joined, "Automatic saving is now enabled") || time.Now().After(deadline) {
			break
		}
	}
	for _, want := range []string{"Automatic saving is now disabled", "Saved the game", "Automatic saving is now enabled"} {
		if !strings.Contains(joined, want) {
			t.Errorf("console lacks %q:\n%s", want, joined)
		}
	}

	e.write(sv.ID, map[string]string{"world/custom.dat": "v2", "world/new.dat": "new", "cache/tmp": "changed-cache"})
	if _, err := e.svc.Restore(ctx, e.team, snap.ID, ""); err != nil {
		t.Fatal(err)
	}
	// Held from the call on (the stop alone takes longer than these
	// checks): no write but the restore's, no start, no second restore.
	if _, err := e.srv.Access(ctx, e.team, sv.ID, true); !errors.Is(err, servers.ErrRestoring) {
		t.Errorf("a write during the restore = %v, want servers.ErrRestoring", err)
	}
	if err := e.srv.Power(ctx, e.team, sv.ID, "start"); !errors.Is(err, servers.ErrRestoring) {
		t.Errorf("a start during the restore = %v, want servers.ErrRestoring", err)
	}
	if _, err := e.svc.Restore(ctx, e.team, snap.ID, ""); !errors.Is(err, ErrBusy) {
		t.Errorf("a second restore during the restore = %v, want ErrBusy", err)
	}
	// Stopped, restored, running again. The restore runs in the
	// background and says it is done in the console once it has started
	// the server again (the start itself is not awaited: the server may
	// answer its ping a moment later). Its stop shows as the game's own
	// stop in the console: a poll of the status could miss it.
	restored := "[kiln] snapshot " + snap.ID + " restored"
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		lines, _ := e.srv.Console(ctx, e.team, sv.ID, 200)
		joined = strings.Join(lines, "\n")
		if strings.Contains(joined, restored) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the console never said the snapshot was restored:\n%s", joined)
		}
	}
	if i, j := strings.Index(joined, "Stopping the server"), strings.Index(joined, restored); i < 0 || i > j {
		t.Errorf("the console does not show the server stopped before the restore:\n%s", joined)
	}
	e.waitServer(sv.ID, func(s servers.Server) bool { return s.Status == servers.StatusRunning })
	if _, err := e.srv.Access(ctx, e.team, sv.ID, true); err != nil {
		t.Errorf("a write after the restore = %v, want it let through", err)
	}
	root := e.node.Node.Root(sv.ID)
	if b, _ := os.ReadFile(filepath.Join(root, "world/custom.dat")); string(b) != "v1" {
		t.Errorf("world/custom.dat = %q after the restore, want v1", b)
	}
	if _, err := os.Stat(filepath.Join(root, "world/new.dat")); !os.IsNotExist(err) {
		t.Errorf("world/new.dat, not in the snapshot, is still there: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(root, "cache/tmp")); string(b) != "changed-cache" {
		t.Errorf("ignored cache/tmp = %q, want left as it was", b)
	}
	if b, _ := os.ReadFile(filepath.Join(root, "plugins/a.jar")); string(b) != "jar" {
		t.Errorf("plugins/a.jar = %q", b)
	}
	// Another team cannot restore it, nor into its server.
	if _, err := e.svc.Restore(ctx, "team_b", snap.ID, ""); !errors.Is(err, ErrNotFound) {
		t.Errorf("Restore by another team = %v, want ErrNotFound", err)
	}
}

// TestConcurrentCreateDelete: rounds of snapshots of one tree taken while
// others sharing their chunks are deleted, the collector running
// throughout. After every round each ready snapshot's chunks are all in
// the store; at the end, with every snapshot deleted and a collection,
// nothing is left.
func TestConcurrentCreateDelete(t *testing.T) {
	rounds := 50
	if testing.Short() {
		rounds = 10
	}
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		e := newSvcEnv(t, db)
		ctx := t.Context()
		sv := e.server("world", map[string]string{"a": randomText(600 << 10), "b": randomText(600 << 10), "c": randomText(40 << 10)})
		stopCollecting := e.collectLoop()
		var prev string
		for round := range rounds {
			e.write(sv.ID, map[string]string{"c": randomText(40 << 10)})
			snap, err := e.svc.Create(ctx, e.team, sv.ID, fmt.Sprintf("r%d", round), "")
			if err != nil {
				t.Fatal(err)
			}
			if prev != "" {
				if _, err := e.svc.Delete(ctx, e.team, prev); err != nil {
					t.Fatal(err)
				}
			}
			snap = e.wait(snap.ID)
			e.checkComplete(snap)
			prev = snap.ID
		}
		stopCollecting()
		if _, err := e.svc.Delete(ctx, e.team, prev); err != nil {
			t.Fatal(err)
		}
		if err := e.svc.collect(ctx, time.Nanosecond); err != nil {
			t.Fatal(err)
		}
		if n := e.blobs(chunkPrefix) + e.blobs(manifestPrefix); n != 0 {
			t.Errorf("%d blobs left", n)
		}
	})
}

// collectLoop runs the collector (grace 1 ns) over and over until the
// returned stop is called, which waits for the pass in progress.
func (e *svcEnv) collectLoop() (stop func()) {
	ctx, t := e.t.Context(), e.t
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-done:
				return
			default:
			}
			if err := e.svc.collect(ctx, time.Nanosecond); err != nil && ctx.Err() == nil {
				t.Errorf("collect: %v", err)
				return
			}
		}
	})
	return func() {
		close(done)
		wg.Wait()
	}
}

// checkComplete fails the test if a chunk the snapshot's manifest names
// is not in the store.
func (e *svcEnv) checkComplete(snap Snapshot) {
	e.t.Helper()
	keys, err := engine.ChunkKeys(e.t.Context(), e.store, manifest.Key(snap.UUID))
	if err != nil {
		e.t.Fatalf("read the manifest of %s: %v", snap.ID, err)
	}
	for _, k := range keys {
		if _, err := e.store.Stat(e.t.Context(), k); err != nil {
			e.t.Fatalf("snapshot %s references %s: %v", snap.ID, k, err)
		}
	}
}

// TestAbandonedSnapshotCollected: a snapshot whose taker died (its
// instance gone) is failed by the collector, and the chunks it pinned
// and the manifest its walk stored (a crash after the walk, before it
// was recorded ready) are removed; so is, past the grace, the manifest
// of a snapshot that failed before (by an older Kiln, or whose delete
// failed).
func TestAbandonedSnapshotCollected(t *testing.T) {
	e := newSvcEnv(t, storetest.SQLite(t))
	ctx := t.Context()
	sv := e.server("world", map[string]string{"a": "x"})
	uuid := "6f1c2a8e-7d3b-4c2a-9a51-2d3f4e5a6b7c"
	if _, err := e.db.Write().ExecContext(ctx, `INSERT INTO snapshots (id, uuid, team_id, source_server_id, name, ignore, status,
		owner, created_at, updated_at) VALUES ('snap_AAAAAAAAAAAAAAAAAAAA', $1, 'team_a', $2, 'lost', '', 'creating', 'inst_gone', 1, 1)`,
		uuid, sv.ID); err != nil {
		t.Fatal(err)
	}
	key := "chunks/ab/" + strings.Repeat("ab", 32)
	if err := e.svc.pin(ctx, uuid, key); err != nil {
		t.Fatal(err)
	}
	if _, err := e.store.Put(ctx, key, bytes.NewReader([]byte("zzz")), 3); err != nil {
		t.Fatal(err)
	}
	if _, err := e.store.Put(ctx, manifest.Key(uuid), bytes.NewReader([]byte("m")), 1); err != nil {
		t.Fatal(err)
	}
	oldFailed := "7a2d3b9f-8e4c-4d3b-8b62-3e4f5a6b7c8d"
	if _, err := e.db.Write().ExecContext(ctx, `INSERT INTO snapshots (id, uuid, team_id, source_server_id, name, ignore, status,
		error, created_at, updated_at) VALUES ('snap_BBBBBBBBBBBBBBBBBBBB', $1, 'team_a', $2, 'old', '', 'failed', 'It failed.', 1, 1)`,
		oldFailed, sv.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := e.store.Put(ctx, manifest.Key(oldFailed), bytes.NewReader([]byte("m")), 1); err != nil {
		t.Fatal(err)
	}
	if err := e.svc.collect(ctx, time.Hour); err != nil {
		t.Fatal(err)
	}
	if _, err := e.store.Stat(ctx, manifest.Key(uuid)); !errors.Is(err, blob.ErrNotFound) {
		t.Errorf("the abandoned snapshot's manifest is still stored: %v", err)
	}
	if _, err := e.store.Stat(ctx, manifest.Key(oldFailed)); err != nil {
		t.Errorf("a failed snapshot's manifest younger than the grace: %v, want it kept for now", err)
	}
	if err := e.svc.collect(ctx, time.Nanosecond); err != nil {
		t.Fatal(err)
	}
	if _, err := e.store.Stat(ctx, manifest.Key(oldFailed)); !errors.Is(err, blob.ErrNotFound) {
		t.Errorf("a failed snapshot's manifest past the grace is still stored: %v", err)
	}
	got, err := e.svc.Get(ctx, e.team, "snap_AAAAAAAAAAAAAAAAAAAA")
	if err != nil || got.Status != StatusFailed || got.Error == nil || !strings.Contains(*got.Error, "Kiln stopped") {
		t.Fatalf("abandoned snapshot = %+v, %v; want failed", got, err)
	}
	if _, err := e.store.Stat(ctx, key); !errors.Is(err, blob.ErrNotFound) {
		t.Errorf("its chunk is still stored: %v", err)
	}
	// A delete of a failed snapshot skips the storage cleanup (not_stored).
	d, err := e.svc.Delete(ctx, e.team, got.ID)
	if err != nil || !d.Deleted || !d.CleanupSkipped || d.CleanupReason == nil || *d.CleanupReason != "not_stored" {
		t.Errorf("delete of a failed snapshot = %+v, %v", d, err)
	}
}

// TestPinWaitsForReap: a chunk marked deleting makes a pin wait until its
// row is gone, then the pin makes it live again — never a live reference
// to a chunk being deleted.
func TestPinWaitsForReap(t *testing.T) {
	e := newSvcEnv(t, storetest.SQLite(t))
	waits := make(chan string, 1)
	e.svc.log = slog.New(logWatch{"pin waits for a chunk being deleted", waits}) // before any snapshot
	ctx := t.Context()
	key := "chunks/cd/" + strings.Repeat("cd", 32)
	if _, err := e.db.Write().ExecContext(ctx, `INSERT INTO chunks (key, state, stored_size, updated_at) VALUES ($1, 'deleting', 3, 1)`, key); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- e.svc.pin(ctx, "6f1c2a8e-7d3b-4c2a-9a51-2d3f4e5a6b7d", key) }()
	select {
	case err := <-done:
		t.Fatalf("pin returned %v while the chunk was being deleted", err)
	case <-waits: // it found the row deleting and waits
	case <-time.After(60 * time.Second):
		t.Fatal("pin neither returned nor waited within 60 s")
	}
	if n := e.count(`SELECT count(*) FROM chunks WHERE key = $1 AND state = 'deleting'`, key) +
		e.count(`SELECT count(*) FROM snapshot_chunks WHERE chunk = $1`, key); n != 1 {
		t.Fatalf("while the pin waits: deleting rows + references = %d, want the deleting row alone", n)
	}
	if _, err := e.db.Write().ExecContext(context.Background(), `DELETE FROM chunks WHERE key = $1`, key); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := e.count(`SELECT count(*) FROM chunks WHERE key = $1 AND state = 'live'`, key); n != 1 {
		t.Errorf("after the pin, live rows = %d, want 1", n)
	}
}

// TestSecondSnapshotParent, on both stores: a second snapshot of a server
// takes its last ready one as parent. Its unchanged files keep the
// parent's chunks, one of which was lost from the store meanwhile and is
// stored again; its ledger references are exactly its manifest's chunks
// (the parent's chunks it no longer uses are not held); it restores byte
// for byte; deleting both leaves nothing.
func TestSecondSnapshotParent(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		st, err := blob.Open(t.Context(), "file://"+t.TempDir(), blob.Options{})
		if err != nil {
			t.Fatal(err)
		}
		// Files made now look a minute old to the snapshots: outside
		// the window in which a parent's files are read again.
		e := newSvcEnvClock(t, db, st, func() time.Time { return time.Now().Add(time.Minute) })
		ctx := t.Context()
		keep, change := randomText(1<<20), randomText(1<<20)
		sv := e.server("world", map[string]string{"world/region/r.0.0.mca": keep, "world/region/r.0.1.mca": change, "server.properties": "motd=hi\n"})
		first := e.take(sv.ID, "first", "")
		firstKeys, err := engine.ChunkKeys(ctx, st, manifest.Key(first.UUID))
		if err != nil {
			t.Fatal(err)
		}
		// Lost meanwhile (a collector of another replica, a disk): the
		// first chunk of the manifest, of a file that does not change.
		if err := st.Delete(ctx, firstKeys[0]); err != nil {
			t.Fatal(err)
		}
		changed := randomText(1 << 20)
		e.write(sv.ID, map[string]string{"world/region/r.0.1.mca": changed})

		second := e.take(sv.ID, "second", "")
		keys, err := engine.ChunkKeys(ctx, st, manifest.Key(second.UUID))
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range keys {
			if _, err := st.Stat(ctx, k); err != nil {
				t.Errorf("chunk %s of the second snapshot: %v", k, err)
			}
		}
		if n := e.count(`SELECT count(*) FROM snapshot_chunks WHERE snapshot_uuid = $1`, second.UUID); n != len(keys) {
			t.Errorf("the second snapshot holds %d chunk references, its manifest %d chunks", n, len(keys))
		}
		for _, k := range keys {
			if n := e.count(`SELECT count(*) FROM snapshot_chunks WHERE snapshot_uuid = $1 AND chunk = $2`, second.UUID, k); n != 1 {
				t.Errorf("chunk %s of the second snapshot: %d references, want 1", k, n)
			}
		}
		e.write(sv.ID, map[string]string{"world/region/r.0.0.mca": "gone", "world/region/r.0.1.mca": "gone"})
		if err := e.svc.RestoreNow(ctx, e.team, second.ID, sv.ID); err != nil {
			t.Fatal(err)
		}
		root := e.node.Node.Root(sv.ID)
		for p, want := range map[string]string{"world/region/r.0.0.mca": keep, "world/region/r.0.1.mca": changed, "server.properties": "motd=hi\n"} {
			if b, _ := os.ReadFile(filepath.Join(root, p)); string(b) != want {
				t.Errorf("%s after the restore: %d bytes, not the snapshot's %d", p, len(b), len(want))
			}
		}
		for _, id := range []string{first.ID, second.ID} {
			if _, err := e.svc.Delete(ctx, e.team, id); err != nil {
				t.Fatal(err)
			}
		}
		if n := e.blobs(chunkPrefix) + e.blobs(manifestPrefix); n != 0 {
			t.Errorf("%d blobs left after deleting every snapshot", n)
		}
		if n := e.count(`SELECT count(*) FROM chunks`) + e.count(`SELECT count(*) FROM snapshot_chunks`); n != 0 {
			t.Errorf("%d ledger rows left", n)
		}
	})
}

// TestOrphanChunksCollected: chunks in the store that no ledger row names
// (what a crash between a chunk's put and its pin leaves) are removed by
// the collector, more of them than one lookup batch holds, while every
// chunk of a ready snapshot stays.
func TestOrphanChunksCollected(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		e := newSvcEnv(t, db)
		ctx := t.Context()
		sv := e.server("world", map[string]string{"level.dat": "data", "region/r.0.0.mca": strings.Repeat("r", 5000)})
		snap := e.take(sv.ID, "keep", "")
		kept := e.blobs(chunkPrefix)
		const orphans = orphanBatch + 37
		for i := range orphans {
			key := fmt.Sprintf("chunks/%02x/%064x", i%256, i+1)
			if _, err := e.store.Put(ctx, key, strings.NewReader("orphan"), 6); err != nil {
				t.Fatal(err)
			}
		}
		if n := e.blobs(chunkPrefix); n != kept+orphans {
			t.Fatalf("%d chunks stored, want %d", n, kept+orphans)
		}
		if err := e.svc.collect(ctx, time.Nanosecond); err != nil {
			t.Fatal(err)
		}
		if n := e.blobs(chunkPrefix); n != kept {
			t.Errorf("%d chunks left after collecting, want the snapshot's %d", n, kept)
		}
		e.checkComplete(snap)
	})
}

// newGatedEnv is newSvcEnv (SQLite) on a gatedStore over a file store.
func newGatedEnv(t *testing.T) (*svcEnv, *gatedStore) {
	t.Helper()
	fs, err := blob.Open(t.Context(), "file://"+t.TempDir(), blob.Options{})
	if err != nil {
		t.Fatal(err)
	}
	gate := &gatedStore{Store: fs, armed: make(chan struct{}), hit: make(chan struct{})}
	return newSvcEnvOn(t, storetest.SQLite(t), gate), gate
}

// gatedStore holds every chunk read, once armed, until its context ends
// (or release is closed, when the test made one): a store slow enough for
// a test to act in the middle of a restore.
type gatedStore struct {
	blob.Store
	armed   chan struct{} // closed: chunk reads wait
	hit     chan struct{} // closed at the first chunk read held
	release chan struct{} // closed: the reads held go on (nil: never)
	once    sync.Once
}

func (g *gatedStore) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	select {
	case <-g.armed:
		if strings.HasPrefix(key, chunkPrefix) {
			g.once.Do(func() { close(g.hit) })
			select {
			case <-ctx.Done():
				return nil, fmt.Errorf("read %s: %w", key, context.Cause(ctx))
			case <-g.release:
			}
		}
	default:
	}
	return g.Store.Get(ctx, key)
}

// TestRestoreIntoDeletedServer deletes a real server (kiln-test, running)
// while a restore into it is fetching chunks: the restore stops with
// ErrServerDeleted before the root goes, its staging directory removed and
// the files as they were when the root is removed; the server is not
// started again; the snapshot stays ready with all its chunks; a new
// restore into the deleted server is refused.
func TestRestoreIntoDeletedServer(t *testing.T) {
	e, gate := newGatedEnv(t)
	ctx := t.Context()
	e.srv.OnDelete(e.svc.ServerDeleting)
	// What the root holds when the server's files are about to be removed
	// (the hooks run in order: this one after ServerDeleting returned).
	type seen struct {
		staging []string
		custom  string
	}
	var at seen
	var root string
	e.srv.OnDelete(func(ctx context.Context, id string) error {
		at.staging, _ = filepath.Glob(filepath.Join(root, ".kiln-tmp-*"))
		b, _ := os.ReadFile(filepath.Join(root, "world/custom.dat"))
		at.custom = string(b)
		return nil
	})
	sv := e.server("doomed", map[string]string{"world/custom.dat": "snapshot", "plugins/a.jar": "jar"})
	root = e.node.Node.Root(sv.ID)
	snap := e.take(sv.ID, "before", "")
	e.write(sv.ID, map[string]string{"world/custom.dat": "changed since"})
	if err := e.srv.Power(ctx, e.team, sv.ID, "start"); err != nil {
		t.Fatal(err)
	}
	e.waitServer(sv.ID, func(s servers.Server) bool { return s.Status == servers.StatusRunning })

	close(gate.armed)
	restored := make(chan error, 1)
	go func() { restored <- e.svc.RestoreNow(ctx, e.team, snap.ID, sv.ID) }()
	select {
	case <-gate.hit:
	case err := <-restored:
		t.Fatalf("RestoreNow ended before reading a chunk: %v", err)
	case <-time.After(60 * time.Second):
		t.Fatal("the restore read no chunk within 60 s")
	}
	// Mid-restore: staged, nothing swapped.
	if st, _ := filepath.Glob(filepath.Join(root, ".kiln-tmp-restore-*")); len(st) != 1 {
		t.Fatalf("staging directories mid-restore: %v, want one", st)
	}
	if err := e.srv.Delete(ctx, e.team, sv.ID); err != nil {
		t.Fatalf("Delete during the restore: %v", err)
	}
	var rerr error
	select {
	case rerr = <-restored:
	case <-time.After(60 * time.Second):
		t.Fatal("RestoreNow did not return after the delete")
	}
	if !errors.Is(rerr, ErrServerDeleted) {
		t.Errorf("RestoreNow = %v, want ErrServerDeleted", rerr)
	}
	if len(at.staging) != 0 || at.custom != "changed since" {
		t.Errorf("when the root was about to be removed: staging %v, world/custom.dat %q; want no staging, the files as they were", at.staging, at.custom)
	}
	if _, err := os.Stat(root); !os.IsNotExist(err) {
		t.Errorf("the deleted server's root: %v, want it gone", err)
	}
	e.svc.mu.Lock()
	left := len(e.svc.restoring)
	e.svc.mu.Unlock()
	if left != 0 {
		t.Errorf("%d restores still registered", left)
	}
	if _, err := e.srv.Get(ctx, e.team, sv.ID); !errors.Is(err, servers.ErrNotFound) {
		t.Errorf("the server after the delete: %v, want servers.ErrNotFound (not started again)", err)
	}
	if _, err := e.svc.Restore(ctx, e.team, snap.ID, sv.ID); !errors.Is(err, servers.ErrNotFound) {
		t.Errorf("Restore into the deleted server = %v, want servers.ErrNotFound", err)
	}
	if err := e.svc.RestoreNow(ctx, e.team, snap.ID, sv.ID); !errors.Is(err, servers.ErrNotFound) {
		t.Errorf("RestoreNow into the deleted server = %v, want servers.ErrNotFound", err)
	}
	got, err := e.svc.Get(ctx, e.team, snap.ID)
	if err != nil || got.Status != StatusReady {
		t.Fatalf("the snapshot after the delete: %+v, %v; want ready", got, err)
	}
	e.checkComplete(got)
}

// TestDeleteAbortedRestoresAgain: a server delete that fails after the
// hooks ran (here a hook after ServerDeleting fails it) leaves the server,
// and restores into it are accepted again (DeleteEnded, through
// servers.OnDeleteEnded), where they were refused until a restart; one
// that goes through refuses them for good, without a mark kept in memory.
func TestDeleteAbortedRestoresAgain(t *testing.T) {
	e := newSvcEnv(t, storetest.SQLite(t))
	ctx := t.Context()
	e.srv.OnDelete(e.svc.ServerDeleting)
	failing := true
	e.srv.OnDelete(func(ctx context.Context, id string) error {
		if failing {
			return errors.New("the disk is read-only")
		}
		return nil
	})
	e.srv.OnDeleteEnded(e.svc.DeleteEnded)
	sv := e.server("kept", map[string]string{"world/custom.dat": "v1"})
	snap := e.take(sv.ID, "before", "")
	if err := e.srv.Delete(ctx, e.team, sv.ID); err == nil {
		t.Fatal("Delete succeeded with a failing hook")
	}
	if _, err := e.srv.Get(ctx, e.team, sv.ID); err != nil {
		t.Fatalf("the server after the failed delete: %v, want it kept", err)
	}
	e.write(sv.ID, map[string]string{"world/custom.dat": "v2"})
	if err := e.svc.RestoreNow(ctx, e.team, snap.ID, sv.ID); err != nil {
		t.Fatalf("RestoreNow after the failed delete = %v, want it accepted", err)
	}
	if b, _ := os.ReadFile(filepath.Join(e.node.Node.Root(sv.ID), "world/custom.dat")); string(b) != "v1" {
		t.Errorf("world/custom.dat = %q after the restore, want v1", b)
	}
	// A delete that goes through still refuses restores for good.
	failing = false
	if err := e.srv.Delete(ctx, e.team, sv.ID); err != nil {
		t.Fatal(err)
	}
	if err := e.svc.RestoreNow(ctx, e.team, snap.ID, sv.ID); !errors.Is(err, servers.ErrNotFound) {
		t.Errorf("RestoreNow after the delete = %v, want servers.ErrNotFound", err)
	}
	// ... with no mark kept for it (servers.OnDeleteEnded): the row's absence
	// refuses them.
	e.svc.mu.Lock()
	marks := len(e.svc.deleted)
	e.svc.mu.Unlock()
	if marks != 0 {
		t.Errorf("%d servers still marked deleted after the delete, want none kept", marks)
	}
}

// TestCompressionOption: the service passes its level to the engine (an
// unknown one fails the snapshot with the engine's words; kiln serve
// refuses it at start already).
func TestCompressionOption(t *testing.T) {
	e := newSvcEnv(t, storetest.SQLite(t))
	e.svc.opts.Compression = "zip" // before any snapshot starts
	sv := e.server("level", map[string]string{"server.properties": "motd=x\n"})
	snap, err := e.svc.Create(t.Context(), e.team, sv.ID, "zip", "")
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		got, err := e.svc.Get(t.Context(), e.team, snap.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.Status == StatusFailed {
			if got.Error == nil || !strings.Contains(*got.Error, `compression "zip": want one of fastest, default, better`) {
				t.Errorf("error = %q, want the levels named", deref(got.Error))
			}
			return
		}
		if got.Status == StatusReady || time.Now().After(deadline) {
			t.Fatalf("snapshot at level zip: %s, want failed", got.Status)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func deref(s *string) string {
	if s == nil {
		return "<nil>"
	}
	return *s
}

// TestSnapshotLimit: a team keeps at most its limit of snapshots (pending,
// creating and ready ones; failed ones do not count), on both stores; the
// one past it is refused with *servers.TeamLimitError before anything is
// recorded, and deleting one makes room.
func TestSnapshotLimit(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		e := newSvcEnv(t, db)
		ctx := t.Context()
		if err := servers.SetTeamLimits(ctx, db, e.team, servers.TeamLimits{Snapshots: 2}); err != nil {
			t.Fatal(err)
		}
		sv := e.server("limited", map[string]string{"server.properties": "motd=x\n"})
		first := e.take(sv.ID, "one", "")
		if _, err := e.svc.Create(ctx, e.team, sv.ID, "two", ""); err != nil {
			t.Fatal(err)
		}
		// A failed snapshot holds no storage and does not count.
		if _, err := db.Write().ExecContext(ctx, `INSERT INTO snapshots (id, uuid, team_id, source_server_id, name, ignore,
			status, owner, created_at, updated_at) VALUES ('snap_failed', $1, $2, $3, 'failed', '', $4, 'inst_test', 1, 1)`,
			uuid.NewString(), e.team, sv.ID, StatusFailed); err != nil {
			t.Fatal(err)
		}
		before := e.count(`SELECT count(*) FROM snapshots`)
		_, err := e.svc.Create(ctx, e.team, sv.ID, "three", "")
		var le *servers.TeamLimitError
		if !errors.As(err, &le) || le.Limit != "snapshots" || le.Max != 2 || le.Used != 2 {
			t.Fatalf("the third snapshot = %v, want a TeamLimitError of snapshots 2 used 2", err)
		}
		if n := e.count(`SELECT count(*) FROM snapshots`); n != before {
			t.Errorf("%d snapshot records after the refusal, want %d", n, before)
		}
		if _, err := e.svc.Delete(ctx, e.team, first.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := e.svc.Create(ctx, e.team, sv.ID, "three", ""); err != nil {
			t.Errorf("a snapshot after a delete made room = %v", err)
		}
	})
}

// TestRestoreWaitsForWriters: a restore waits for the writes into its
// server that began before it (a reservation on the server's disk ledger
// in flight) to end before it replaces the files, and when they do not
// end within WriterWait it fails with ErrWritersBusy, the files as they
// were and the server no longer held.
func TestRestoreWaitsForWriters(t *testing.T) {
	e := newSvcEnv(t, storetest.SQLite(t))
	ctx := t.Context()
	sv := e.server("busy", map[string]string{"world/level.dat": "v1"})
	snap := e.take(sv.ID, "v1", "")
	e.write(sv.ID, map[string]string{"world/level.dat": "v2"})
	level := filepath.Join(e.node.Node.Root(sv.ID), "world/level.dat")
	writer := func() *quota.Reservation {
		a, err := e.srv.Access(ctx, e.team, sv.ID, true)
		if err != nil {
			t.Fatal(err)
		}
		r, err := a.Disk.Reserve(0) // a writer that grows as it writes
		if err != nil {
			t.Fatal(err)
		}
		return r
	}

	r := writer()
	done := make(chan error, 1)
	go func() { done <- e.svc.RestoreNow(ctx, e.team, snap.ID, sv.ID) }()
	// The restore says it waits for the write: from then on it cannot end
	// before the write does (or WriterWait, a minute, passes).
	e.awaitConsole(sv.ID, "[kiln] the restore waits for 1 write(s) in progress to end", done)
	select {
	case err := <-done:
		t.Fatalf("RestoreNow ended (%v) with a write in flight", err)
	default:
	}
	if b, _ := os.ReadFile(level); string(b) != "v2" {
		t.Fatalf("level.dat = %q while the restore waits, want v2", b)
	}
	r.Commit()
	if err := <-done; err != nil {
		t.Fatalf("RestoreNow after the write ended = %v", err)
	}
	if b, _ := os.ReadFile(level); string(b) != "v1" {
		t.Errorf("level.dat = %q after the restore, want v1", b)
	}

	e.write(sv.ID, map[string]string{"world/level.dat": "v3"})
	e.svc.opts.WriterWait = 200 * time.Millisecond // no restore runs now
	r = writer()
	defer r.Release()
	err := e.svc.RestoreNow(ctx, e.team, snap.ID, sv.ID)
	if !errors.Is(err, ErrWritersBusy) || !strings.Contains(err.Error(), "1 still in progress after 200ms") {
		t.Fatalf("RestoreNow with a write that does not end = %v, want ErrWritersBusy", err)
	}
	if b, _ := os.ReadFile(level); string(b) != "v3" {
		t.Errorf("level.dat = %q after the refused restore, want v3 (untouched)", b)
	}
	if _, err := e.srv.Access(ctx, e.team, sv.ID, true); err != nil {
		t.Errorf("Access for writing after the refused restore = %v, want the hold released", err)
	}
}

// TestFailedRestoreStartsServerAgain: a restore of a running server that
// fails after stopping it (here: a write that outlasts WriterWait) starts
// it again, as one that succeeds does. Before, it was left stopped.
func TestFailedRestoreStartsServerAgain(t *testing.T) {
	e := newSvcEnv(t, storetest.SQLite(t))
	ctx := t.Context()
	sv := e.server("busy", map[string]string{"world/level.dat": "v1"})
	snap := e.take(sv.ID, "v1", "")
	if err := e.srv.Power(ctx, e.team, sv.ID, "start"); err != nil {
		t.Fatal(err)
	}
	e.waitServer(sv.ID, func(s servers.Server) bool { return s.Status == servers.StatusRunning })
	a, err := e.srv.Access(ctx, e.team, sv.ID, true)
	if err != nil {
		t.Fatal(err)
	}
	r, err := a.Disk.Reserve(0) // a write that does not end
	if err != nil {
		t.Fatal(err)
	}
	defer r.Release()
	e.svc.opts.WriterWait = 200 * time.Millisecond // no restore runs now
	if err := e.svc.RestoreNow(ctx, e.team, snap.ID, sv.ID); !errors.Is(err, ErrWritersBusy) {
		t.Fatalf("RestoreNow = %v, want ErrWritersBusy", err)
	}
	got := e.waitServer(sv.ID, func(s servers.Server) bool { return s.Status == servers.StatusRunning })
	if got.DesiredState != "running" {
		t.Errorf("server after the failed restore: %s, desired %s; want running", got.Status, got.DesiredState)
	}
}

// TestDedupAcrossTeams: under DedupTeam (the default) two teams holding
// the same files each store them, in their own chunk space, and what one
// stores or frees says nothing of the other; under DedupGlobal the second
// team's snapshot stores only its manifest and a delete reports the
// chunks the other team keeps. Both stores.
func TestDedupAcrossTeams(t *testing.T) {
	big := make([]byte, 3<<20) // cut into chunks of its own, not packed
	if _, err := rand.Read(big); err != nil {
		t.Fatal(err)
	}
	content := map[string]string{"server.properties": "motd=same\n", "plugins/premium.jar": string(big)}
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		e := newSvcEnv(t, db)
		snapOf := func(team, name string) (Snapshot, servers.Server) {
			t.Helper()
			e.team = team
			defer func() { e.team = "team_a" }()
			sv := e.server(name, content)
			snap, err := e.svc.Create(t.Context(), team, sv.ID, name, "")
			if err != nil {
				t.Fatal(err)
			}
			return e.wait(snap.ID), sv
		}
		for _, mode := range []Dedup{DedupTeam, DedupGlobal} {
			e.svc.opts.Dedup = mode // no snapshot runs between the rounds
			a, _ := snapOf("team_a", "a-"+string(mode))
			b, svB := snapOf("team_b", "b-"+string(mode))
			sa, sb := *a.StoredBytes, *b.StoredBytes
			switch mode {
			case DedupTeam:
				if sa < int64(len(big)) || sb < sa-4096 {
					t.Errorf("team: stored bytes %d (team_a), %d (team_b); want each ≥ %d, the same but for the manifest", sa, sb, len(big))
				}
				for _, team := range []string{"team_a", "team_b"} {
					if n := e.blobs("chunks/" + e.svc.opts.chunkSpace(team) + "/"); n < 3 {
						t.Errorf("team: %d chunks in %s's space, want its own (≥ 3)", n, team)
					}
				}
			case DedupGlobal:
				if sb > 4096 {
					t.Errorf("global: team_b's snapshot of team_a's files stored %d bytes, want its manifest only", sb)
				}
			}
			del, err := e.svc.Delete(t.Context(), "team_a", a.ID)
			if err != nil {
				t.Fatal(err)
			}
			shares := del.SharedBytes > int64(len(big))/2
			if shares != (mode == DedupGlobal) || !del.StorageDeleted {
				t.Errorf("%s: deleting team_a's snapshot: shared %d bytes, freed %d (storage deleted %v); want team_b's copy shared only under global",
					mode, del.SharedBytes, del.FreedBytes, del.StorageDeleted)
			}
			// team_b's snapshot restores, whichever space holds its chunks.
			e.team = "team_b"
			e.write(svB.ID, map[string]string{"server.properties": "motd=changed\n"})
			if err := e.svc.RestoreNow(t.Context(), "team_b", b.ID, svB.ID); err != nil {
				t.Fatal(err)
			}
			e.team = "team_a"
			got, err := os.ReadFile(filepath.Join(e.node.Node.Root(svB.ID), "plugins/premium.jar"))
			if err != nil || !bytes.Equal(got, big) {
				t.Errorf("%s: team_b's restore: premium.jar %d bytes (%v), want the snapshot's", mode, len(got), err)
			}
			if _, err := e.svc.Delete(t.Context(), "team_b", b.ID); err != nil {
				t.Fatal(err)
			}
		}
		if n := e.blobs(chunkPrefix); n != 0 {
			t.Errorf("%d chunks left once every snapshot is deleted, want none", n)
		}
	})
	if _, err := ParseDedup("node"); err == nil || err.Error() != `snapshot dedup "node": want team or global` {
		t.Errorf("ParseDedup(node) = %v", err)
	}
	if d, err := ParseDedup("GLOBAL"); err != nil || d != DedupGlobal {
		t.Errorf("ParseDedup(GLOBAL) = %q, %v", d, err)
	}
	o := Options{}
	if s := o.chunkSpace("team_0123456789ABCDEFGHIJ"); s != "7465616d5f30313233343536373839414243444546474849"+"4a" || manifest.ValidSpace(s) != nil {
		t.Errorf("chunkSpace(team_…) = %q", s)
	}
	if s := o.chunkSpace(strings.Repeat("t", 40)); len(s) != 33 || s[0] != 'h' || manifest.ValidSpace(s) != nil {
		t.Errorf("chunkSpace of a 40-byte id = %q, want h and 32 hex digits", s)
	}
}

// running starts server id and waits until it runs.
func (e *svcEnv) running(id string) {
	e.t.Helper()
	if err := e.srv.Power(e.t.Context(), e.team, id, "start"); err != nil {
		e.t.Fatal(err)
	}
	e.waitServer(id, func(s servers.Server) bool { return s.Status == servers.StatusRunning })
}

// console returns server id's last 200 console lines, joined.
func (e *svcEnv) console(id string) string {
	e.t.Helper()
	lines, err := e.srv.Console(e.t.Context(), e.team, id, 200)
	if err != nil {
		e.t.Fatal(err)
	}
	return strings.Join(lines, "\n")
}

// TestSavesNotPausedFails: a running game server whose console cannot be
// followed (it has servers.MaxStreams streams open) cannot have its
// saves paused and its flush awaited: the snapshot fails with a sentence
// saying so, before anything is sent to the server or read. Before, it
// was walked with saving on, silently, and became ready. With a stream
// closed, the next snapshot pauses the saves and is ready.
func TestSavesNotPausedFails(t *testing.T) {
	e := newSvcEnv(t, storetest.SQLite(t))
	ctx := t.Context()
	sv := e.server("streams", map[string]string{"world/region/r.0.0.mca": randomText(64 << 10)})
	e.running(sv.ID)
	var stops []func()
	for range servers.MaxStreams {
		_, stop, err := e.srv.Stream(ctx, e.team, sv.ID)
		if err != nil {
			t.Fatal(err)
		}
		stops = append(stops, stop)
	}
	defer func() {
		for _, stop := range stops {
			stop()
		}
	}()
	snap, err := e.svc.Create(ctx, e.team, sv.ID, "no stream", "")
	if err != nil {
		t.Fatal(err)
	}
	got := e.finalOf(snap.ID)
	want := "The server's saves could not be paused for the snapshot, so nothing was read: " +
		"the server's console already has the most streams it allows (close one of them and take the snapshot again)."
	if got.Status != StatusFailed || deref(got.Error) != want {
		t.Errorf("snapshot with the console's streams all taken: %s, %q; want failed, %q", got.Status, deref(got.Error), want)
	}
	if c := e.console(sv.ID); strings.Contains(c, "Automatic saving is now disabled") {
		t.Errorf("save-off was sent for the failed snapshot:\n%s", c)
	}
	if n := e.blobs(manifestPrefix); n != 0 {
		t.Errorf("%d manifests stored by the failed snapshot, want none", n)
	}

	stops[0]()
	snap = e.take(sv.ID, "a stream free", "")
	if c := e.console(sv.ID); !strings.Contains(c, "Automatic saving is now disabled") || !strings.Contains(c, "Saved the game") {
		t.Errorf("snapshot %s (%s) did not pause the saves:\n%s", snap.ID, snap.Status, c)
	}
}

// TestFlushUnconfirmedSaid: a running game server that does not confirm
// save-all flush (its save fails: level.dat_new is a directory) within
// SaveTimeout is snapshotted with saving off, and its console says so.
// Before, only the log did.
func TestFlushUnconfirmedSaid(t *testing.T) {
	e := newSvcEnv(t, storetest.SQLite(t))
	e.svc.opts.SaveTimeout = 300 * time.Millisecond // before any snapshot starts
	sv := e.server("unsaved", map[string]string{"world/region/r.0.0.mca": randomText(64 << 10)})
	e.running(sv.ID)
	e.write(sv.ID, map[string]string{"world/level.dat_new/x": "in the way"})
	snap := e.take(sv.ID, "unconfirmed", "")
	c := e.console(sv.ID)
	for _, want := range []string{"Automatic saving is now disabled", "Failed to save the game",
		"[kiln] snapshot " + snap.ID + ": the server did not confirm save-all flush within 300ms; its files are read with saving off"} {
		if !strings.Contains(c, want) {
			t.Errorf("console lacks %q:\n%s", want, c)
		}
	}
}

// awaitConsole waits until server id's console holds line, failing the
// test if done (the call expected to wait) sends first or after 60 s.
func (e *svcEnv) awaitConsole(id, line string, done <-chan error) {
	e.t.Helper()
	for deadline := time.Now().Add(60 * time.Second); !strings.Contains(e.console(id), line); {
		select {
		case err := <-done:
			e.t.Fatalf("ended (%v) before the console said %q:\n%s", err, line, e.console(id))
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("the console never said %q:\n%s", line, e.console(id))
		}
	}
}

// logWatch is a slog handler that sends the message msg to ch (once,
// if ch has room) and drops every record.
type logWatch struct {
	msg string
	ch  chan string
}

func (w logWatch) Enabled(context.Context, slog.Level) bool { return true }
func (w logWatch) WithAttrs([]slog.Attr) slog.Handler       { return w }
func (w logWatch) WithGroup(string) slog.Handler            { return w }
func (w logWatch) Handle(_ context.Context, r slog.Record) error {
	if r.Message == w.msg {
		select {
		case w.ch <- r.Message:
		default:
		}
	}
	return nil
}
