package snapshot

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/kilnhq/kiln/internal/blob"
	"github.com/kilnhq/kiln/internal/eventually"
	"github.com/kilnhq/kiln/internal/ids"
	"github.com/kilnhq/kiln/internal/store/storetest"
)

// waitRestore polls a restore's record until it is done or failed.
func (e *svcEnv) waitRestore(id string) RestoreRecord {
	e.t.Helper()
	return eventually.Value(e.t, eventually.Within, "restore "+id+" done or failed", func() (RestoreRecord, bool, string) {
		r, err := e.svc.GetRestore(e.t.Context(), e.team, id)
		if err != nil {
			e.t.Fatalf("GetRestore(%s) = %v", id, err)
		}
		return r, r.Status == RestoreDone || r.Status == RestoreFailed, "still " + r.Status
	})
}

// TestRestoreRecords: a restore has a record from its acceptance on
// (pending, in the database before Restore returns), that ends done with
// its figures and times, or failed with a sentence saying the files are
// as they were; the team's list finds them by server and by snapshot, and
// another team sees none of them.
func TestRestoreRecords(t *testing.T) {
	e := newSvcEnv(t, storetest.SQLite(t))
	ctx := t.Context()
	files := map[string]string{"world/level.dat": "level", "world/region/r.0.0.mca": strings.Repeat("r", 5000), "plugins/a.jar": "jar"}
	sv := e.server("world", files)
	snap := e.take(sv.ID, "base", "")
	e.write(sv.ID, map[string]string{"world/level.dat": "changed"})

	rec, err := e.svc.Restore(ctx, e.team, snap.ID, "")
	if err != nil {
		t.Fatal(err)
	}
	if !ids.HasPrefix(rec.ID, "rst") || rec.Status != RestorePending || rec.ServerID != sv.ID || rec.SnapshotID != snap.ID ||
		rec.Path != nil || rec.TeamID != e.team || rec.CreatedAt == 0 || rec.StartedAt != nil || rec.CompletedAt != nil {
		t.Errorf("Restore's record = %+v, want a pending rst_ record of %s into %s", rec, snap.ID, sv.ID)
	}
	if n := e.count(`SELECT count(*) FROM restores WHERE id = $1`, rec.ID); n != 1 {
		t.Errorf("rows of the restore as Restore returned: %d, want 1", n)
	}
	got := e.waitRestore(rec.ID)
	total := *snap.SizeBytes
	if got.Status != RestoreDone || got.Error != nil || got.BytesTotal != total || got.BytesDone > total ||
		got.StartedAt == nil || got.CompletedAt == nil || *got.CompletedAt < *got.StartedAt || *got.StartedAt < got.CreatedAt {
		t.Errorf("finished restore = %+v, want done with bytes_total %d, started and completed", got, total)
	}

	// One path only, and a failed one: every chunk gone from the store.
	part, err := e.svc.RestorePath(ctx, e.team, snap.ID, "", "world")
	if err != nil {
		t.Fatal(err)
	}
	if part.Path == nil || *part.Path != "world" {
		t.Errorf("path restore's record path = %v, want world", part.Path)
	}
	e.waitRestore(part.ID)
	var chunks []string
	if err := e.store.List(ctx, "chunks/", func(i blob.Info) error { chunks = append(chunks, i.Key); return nil }); err != nil {
		t.Fatal(err)
	}
	for _, k := range chunks {
		if err := e.store.Delete(ctx, k); err != nil {
			t.Fatal(err)
		}
	}
	e.write(sv.ID, map[string]string{"world/level.dat": "changed again"})
	bad, err := e.svc.Restore(ctx, e.team, snap.ID, "")
	if err != nil {
		t.Fatal(err)
	}
	failed := e.waitRestore(bad.ID)
	if failed.Status != RestoreFailed || failed.Error == nil || !strings.HasSuffix(*failed.Error, "; the server's files are as they were.") ||
		failed.CompletedAt == nil {
		t.Errorf("restore of a snapshot whose chunks are gone = %+v (error %v), want failed with a sentence", failed, orNil(failed.Error))
	}

	list, err := e.svc.ListRestores(ctx, e.team, sv.ID, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 3 || list[0].ID != bad.ID || list[1].ID != part.ID || list[2].ID != rec.ID {
		t.Errorf("ListRestores(server) = %d records %v, want the three, newest first", len(list), idsOf(list))
	}
	if l, _ := e.svc.ListRestores(ctx, e.team, "", "snap_00000000000000000000"); len(l) != 0 {
		t.Errorf("ListRestores(another snapshot) = %v, want none", idsOf(l))
	}
	if _, err := e.svc.GetRestore(ctx, "team_b", rec.ID); !errors.Is(err, ErrRestoreNotFound) {
		t.Errorf("GetRestore by another team = %v, want ErrRestoreNotFound", err)
	}
	if l, _ := e.svc.ListRestores(ctx, "team_b", sv.ID, ""); len(l) != 0 {
		t.Errorf("ListRestores by another team = %v, want none", idsOf(l))
	}
}

// TestAbandonedRestores: records a stopped process left pending or
// restoring end at the next collector pass: done when this start finished
// the server's interrupted swap (RootsRecovered), failed otherwise; a
// record of a live process is left alone.
func TestAbandonedRestores(t *testing.T) {
	e := newSvcEnv(t, storetest.SQLite(t))
	ctx := t.Context()
	insert := func(id, server, status, owner string) {
		t.Helper()
		if _, err := e.db.Write().ExecContext(ctx, `INSERT INTO restores (id, team_id, snapshot_id, server_id, status, owner, created_at, started_at)
			VALUES ($1, $2, 'snap_00000000000000000000', $3, $4, $5, 1, 2)`, id, e.team, server, status, owner); err != nil {
			t.Fatal(err)
		}
	}
	const finished, undone, pending, alive = "rst_0000000000000000000a", "rst_0000000000000000000b", "rst_0000000000000000000c", "rst_0000000000000000000d"
	insert(finished, "11111111-1111-1111-1111-111111111111", RestoreRestoring, "inst_gone")
	insert(undone, "22222222-2222-2222-2222-222222222222", RestoreRestoring, "inst_gone")
	insert(pending, "33333333-3333-3333-3333-333333333333", RestorePending, "inst_gone")
	insert(alive, "44444444-4444-4444-4444-444444444444", RestoreRestoring, "inst_alive")
	if _, err := e.db.Write().ExecContext(ctx, `INSERT INTO instances (id, node_id, hostname, pid, started_at, seen_at) VALUES ('inst_alive', 'other-node', 'h', 1, $1, $1)`,
		time.Now().UnixMilli()); err != nil {
		t.Fatal(err)
	}
	e.svc.RootsRecovered(map[string]bool{"11111111-1111-1111-1111-111111111111": true})
	if err := e.svc.endAbandonedRestores(ctx); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{finished: RestoreDone, undone: RestoreFailed, pending: RestoreFailed, alive: RestoreRestoring}
	for id, status := range want {
		r, err := e.svc.GetRestore(ctx, e.team, id)
		if err != nil {
			t.Fatal(err)
		}
		if r.Status != status {
			t.Errorf("%s: status %s, want %s", id, r.Status, status)
		}
		if status == RestoreFailed && (r.Error == nil || *r.Error != restoreAbandoned || r.CompletedAt == nil) {
			t.Errorf("%s: error %q, completed %v; want %q", id, orNil(r.Error), r.CompletedAt, restoreAbandoned)
		}
	}
}

// TestRestoreRecordsKept: a server keeps its last MaxRestoresKept records.
func TestRestoreRecordsKept(t *testing.T) {
	e := newSvcEnv(t, storetest.SQLite(t))
	const server = "55555555-5555-5555-5555-555555555555"
	var first string
	for i := range MaxRestoresKept + 5 {
		r, err := e.svc.recordRestore(t.Context(), e.team, "snap_00000000000000000000", server, "")
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			first = r.ID
		}
	}
	if n := e.count(`SELECT count(*) FROM restores WHERE server_id = $1`, server); n != MaxRestoresKept {
		t.Errorf("records kept = %d, want %d", n, MaxRestoresKept)
	}
	if _, err := e.svc.GetRestore(context.Background(), e.team, first); !errors.Is(err, ErrRestoreNotFound) {
		t.Errorf("the oldest record = %v, want gone", err)
	}
}

func idsOf(rs []RestoreRecord) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.ID
	}
	return out
}

func orNil(s *string) string {
	if s == nil {
		return "<nil>"
	}
	return *s
}
