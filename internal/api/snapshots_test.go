package api

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/kilnhq/kiln/internal/eventually"
	"github.com/kilnhq/kiln/internal/store"
	"github.com/kilnhq/kiln/internal/store/storetest"
)

// readySnapshot takes a snapshot of server id, waits until it is ready
// and returns its id.
func (h *harness) readySnapshot(id, name string) string {
	h.t.Helper()
	st, out := h.sendJSON("POST", "/snapshots", map[string]any{"source_server_id": id, "name": name})
	if st != 202 {
		h.t.Fatalf("create snapshot %q: %d %v", name, st, out)
	}
	snap := out["snapshot_id"].(string)
	if s := h.waitSnapshot(snap); s["status"] != "ready" {
		h.t.Fatalf("snapshot %q = %v", name, s)
	}
	return snap
}

// waitSnapshot polls a snapshot until its status is final.
func (h *harness) waitSnapshot(id string) map[string]any {
	h.t.Helper()
	return eventually.Value(h.t, eventually.Within, "snapshot "+id+" ready or failed", func() (map[string]any, bool, string) {
		st, out := h.sendJSON("GET", "/snapshots/"+id, nil)
		if st != 200 {
			h.t.Fatalf("GET snapshot: %d %v", st, out)
		}
		snap := out["snapshot"].(map[string]any)
		s := snap["status"]
		return snap, s == "ready" || s == "failed", fmt.Sprintf("still %v", s)
	})
}

// TestSnapshotsAPI, on both stores, through the API as a client drives
// it: create (the seed's shape, 202 pending), progress to ready, list
// (all and by server), restore into the source, delete (the exact
// deletion fields), and every refusal with its code; another team sees
// none of it.
func TestSnapshotsAPI(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		h := newHarness(t, db)
		id, root := h.fileServer(1024)
		if err := os.MkdirAll(filepath.Join(root, "world"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, "world", "data.dat"), []byte(strings.Repeat("block ", 50000)), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, "debug.log"), []byte("noise"), 0o644); err != nil {
			t.Fatal(err)
		}

		st, out := h.sendJSON("POST", "/snapshots", map[string]any{"source_server_id": id, "name": "nightly", "ignore": "*.log\n"})
		if st != 202 {
			t.Fatalf("create: %d %v", st, out)
		}
		if out["status"] != "pending" || out["source_server_id"] != id || out["name"] != "nightly" || !strings.HasPrefix(out["snapshot_id"].(string), "snap_") {
			t.Errorf("create answer = %v", out)
		}
		snapID := out["snapshot_id"].(string)
		snap := h.waitSnapshot(snapID)
		if snap["status"] != "ready" || snap["size_bytes"] == nil || snap["stored_bytes"] == nil || snap["error"] != nil || snap["completed_at"] == nil {
			t.Fatalf("ready snapshot = %v", snap)
		}

		// Refusals.
		st, body := h.postJSON("/snapshots", map[string]any{"source_server_id": "nope", "name": "x"})
		wantError(t, st, body, 400, "VALIDATION_ERROR", "source_server_id")
		st, body = h.postJSON("/snapshots", map[string]any{"source_server_id": id})
		wantError(t, st, body, 400, "VALIDATION_ERROR", "name")
		st, body = h.postJSON("/snapshots", map[string]any{"source_server_id": "6f1c2a8e-7d3b-4c2a-9a51-2d3f4e5a6b7c", "name": "x"})
		wantError(t, st, body, 404, "SERVER_NOT_FOUND", "server")
		st, _, body = h.do("GET", Prefix+"/snapshots/snap_notarealid", h.token, nil)
		wantError(t, st, body, 404, "SNAPSHOT_NOT_FOUND", "snapshot")
		st, _, body = h.do("GET", Prefix+"/snapshots?server_id=12", h.token, nil)
		wantError(t, st, body, 400, "VALIDATION_ERROR", "server_id")

		// Another team: 404 for everything, an empty list.
		other := h.otherTeamToken()
		st, _, body = h.do("GET", Prefix+"/snapshots/"+snapID, other, nil)
		wantError(t, st, body, 404, "SNAPSHOT_NOT_FOUND", "snapshot")
		st, _, body = h.do("DELETE", Prefix+"/snapshots/"+snapID, other, nil)
		wantError(t, st, body, 404, "SNAPSHOT_NOT_FOUND", "snapshot")
		st, _, body = h.do("POST", Prefix+"/snapshots/"+snapID+"/restore", other, nil)
		wantError(t, st, body, 404, "SNAPSHOT_NOT_FOUND", "snapshot")
		if st, out := h.sendJSON("GET", "/snapshots", nil, other); st != 200 || out["count"].(float64) != 0 {
			t.Errorf("another team's list = %d %v", st, out)
		}

		// Lists.
		if st, out := h.sendJSON("GET", "/snapshots?server_id="+id, nil); st != 200 || out["count"].(float64) != 1 {
			t.Errorf("list by server = %d %v", st, out)
		}
		if st, out := h.sendJSON("GET", "/snapshots?server_id=6f1c2a8e-7d3b-4c2a-9a51-2d3f4e5a6b7c", nil); st != 200 || out["count"].(float64) != 0 {
			t.Errorf("list of another server = %d %v", st, out)
		}
		// Pages: a second snapshot, then pages of one, newest first.
		second := h.readySnapshot(id, "second")
		var paged []any
		cursor := ""
		for range 3 {
			st, out := h.sendJSON("GET", "/snapshots?limit=1&cursor="+cursor, nil)
			if st != 200 || out["count"].(float64) != float64(len(out["snapshots"].([]any))) {
				t.Fatalf("a page = %d %v", st, out)
			}
			for _, sn := range out["snapshots"].([]any) {
				paged = append(paged, sn.(map[string]any)["snapshot_id"])
			}
			if cursor = out["next_cursor"].(string); cursor == "" {
				break
			}
		}
		if !reflect.DeepEqual(paged, []any{second, snapID}) {
			t.Errorf("pages of one = %v, want %v", paged, []any{second, snapID})
		}
		st, _, body = h.do("GET", Prefix+"/snapshots?limit=0", h.token, nil)
		wantError(t, st, body, 400, "VALIDATION_ERROR", "limit")
		st, _, body = h.do("GET", Prefix+"/snapshots?limit=1001", h.token, nil)
		wantError(t, st, body, 400, "VALIDATION_ERROR", "limit")
		st, _, body = h.do("GET", Prefix+"/snapshots?cursor=v12", h.token, nil)
		wantError(t, st, body, 400, "VALIDATION_ERROR", "cursor")
		if st, _, body := h.do("DELETE", Prefix+"/snapshots/"+second, h.token, nil); st != 200 {
			t.Fatalf("delete the second snapshot: %d %s", st, body)
		}

		// Restore: the changed file comes back, the new one goes, the
		// ignored log stays.
		if err := os.WriteFile(filepath.Join(root, "world", "data.dat"), []byte("griefed"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, "world", "new.dat"), []byte("new"), 0o644); err != nil {
			t.Fatal(err)
		}
		st, _, body = h.do("POST", Prefix+"/snapshots/"+snapID+"/restore", h.token, nil)
		var accepted struct {
			OK      bool           `json:"ok"`
			Restore map[string]any `json:"restore"`
		}
		_ = json.Unmarshal(body, &accepted)
		rst, _ := accepted.Restore["restore_id"].(string)
		if st != 202 || !accepted.OK || !strings.HasPrefix(rst, "rst_") || accepted.Restore["status"] != "pending" ||
			accepted.Restore["snapshot_id"] != snapID || accepted.Restore["server_id"] != id || accepted.Restore["path"] != nil ||
			accepted.Restore["error"] != nil || accepted.Restore["completed_at"] != nil {
			t.Fatalf("restore = %d %s, want 202 with its pending record", st, body)
		}
		// The restore runs in the background and swaps the tree one
		// rename at a time (data.dat before new.dat goes): its end is its
		// record's status (and the console's line), not the first file
		// seen restored.
		var done map[string]any
		for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			st, out := h.sendJSON("GET", "/restores/"+rst, nil)
			if st != 200 {
				t.Fatalf("GET /restores/%s = %d %v", rst, st, out)
			}
			done, _ = out["restore"].(map[string]any)
			if done["status"] == "done" || done["status"] == "failed" || time.Now().After(deadline) {
				break
			}
		}
		if done["status"] != "done" || done["error"] != nil || done["bytes_total"].(float64) < 50000*6 || done["completed_at"] == nil || done["started_at"] == nil {
			t.Errorf("the restore's record at its end = %v, want done", done)
		}
		waitConsole(t, h, id, "[kiln] snapshot "+snapID+" restored")
		st, _, body = h.do("GET", Prefix+"/restores/"+rst, other, nil)
		wantError(t, st, body, 404, "NOT_FOUND", "restore not found")
		st, _, body = h.do("GET", Prefix+"/restores/rst_nope", h.token, nil)
		wantError(t, st, body, 404, "NOT_FOUND", "restore not found")
		if st, out := h.sendJSON("GET", "/restores?server_id="+id+"&snapshot_id="+snapID, nil); st != 200 || out["count"].(float64) != 1 {
			t.Errorf("restores of the server and snapshot = %d %v", st, out)
		}
		if st, out := h.sendJSON("GET", "/restores", nil, other); st != 200 || out["count"].(float64) != 0 {
			t.Errorf("another team's restores = %d %v", st, out)
		}
		st, _, body = h.do("GET", Prefix+"/restores?server_id=nope", h.token, nil)
		wantError(t, st, body, 400, "VALIDATION_ERROR", "server_id")
		if b, _ := os.ReadFile(filepath.Join(root, "world", "data.dat")); len(b) != 50000*6 {
			t.Errorf("world/data.dat not restored: %d bytes", len(b))
		}
		if _, err := os.Stat(filepath.Join(root, "world", "new.dat")); !os.IsNotExist(err) {
			t.Errorf("world/new.dat survived the restore: %v", err)
		}
		if b, _ := os.ReadFile(filepath.Join(root, "debug.log")); string(b) != "noise" {
			t.Errorf("ignored debug.log = %q", b)
		}
		st, body = h.postJSON("/snapshots/"+snapID+"/restore", map[string]any{"server_id": "6f1c2a8e-7d3b-4c2a-9a51-2d3f4e5a6b7c"})
		wantError(t, st, body, 404, "SERVER_NOT_FOUND", "server")

		// One path: world/ comes back, the file beside it stays changed.
		if err := os.WriteFile(filepath.Join(root, "world", "data.dat"), []byte("griefed again"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, "server.properties"), []byte("motd=mine\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		st, body = h.postJSON("/snapshots/"+snapID+"/restore", map[string]any{"path": "/world"})
		if st != 202 {
			t.Fatalf("restore of /world = %d %s", st, body)
		}
		waitConsole(t, h, id, "[kiln] /world of snapshot "+snapID+" restored")
		if b, _ := os.ReadFile(filepath.Join(root, "world", "data.dat")); len(b) != 50000*6 {
			t.Errorf("world/data.dat not restored: %d bytes", len(b))
		}
		if b, _ := os.ReadFile(filepath.Join(root, "server.properties")); string(b) != "motd=mine\n" {
			t.Errorf("server.properties, outside the path, = %q", b)
		}
		st, body = h.postJSON("/snapshots/"+snapID+"/restore", map[string]any{"path": "/world/nether"})
		wantError(t, st, body, 404, "FILE_NOT_FOUND", "the snapshot holds nothing at /world/nether")
		st, body = h.postJSON("/snapshots/"+snapID+"/restore", map[string]any{"path": "/../etc"})
		wantError(t, st, body, 400, "VALIDATION_ERROR", "path")

		// Delete: the exact fields.
		st, _, body = h.do("DELETE", Prefix+"/snapshots/"+snapID, h.token, nil)
		var del map[string]any
		_ = json.Unmarshal(body, &del)
		if st != 200 || del["ok"] != true || del["deleted"] != true || del["storage_deleted"] != true ||
			del["storage_cleanup_skipped"] != false || del["storage_cleanup_reason"] != nil || del["freed_bytes"].(float64) <= 0 || del["shared_bytes"].(float64) != 0 {
			t.Errorf("delete = %d %s", st, body)
		}
		st, _, body = h.do("DELETE", Prefix+"/snapshots/"+snapID, h.token, nil)
		wantError(t, st, body, 404, "SNAPSHOT_NOT_FOUND", "snapshot")
	})
}

// TestRestoreHoldAPI: while a restore holds a server (servers.Hold, taken
// by POST /snapshots/{id}/restore before it answers), writes to its files
// and its start answer 409 CONFLICT with a sentence saying why; reads go
// on; once the hold ends, the same write goes through.
func TestRestoreHoldAPI(t *testing.T) {
	h := newHarness(t, storetest.SQLite(t))
	id, _ := h.fileServer(1024)
	me, err := h.auth.TeamByName(t.Context(), "default")
	if err != nil {
		t.Fatal(err)
	}
	held, err := h.srv.deps.Servers.Hold(t.Context(), me.ID, id)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"error": "a snapshot is being restored into the server; try again when the restore is done (its console says when)", "code": "CONFLICT"}
	st, body := h.files("POST", id, "write?file=/a.txt", "x", "Content-Type", "text/plain")
	if got := mustJSON(body); st != 409 || !reflect.DeepEqual(got, want) {
		t.Errorf("write during a restore = %d %s, want 409 %v", st, body, want)
	}
	st, body = h.postJSON("/servers/"+id+"/power", map[string]string{"action": "start"})
	if got := mustJSON(body); st != 409 || !reflect.DeepEqual(got, want) {
		t.Errorf("start during a restore = %d %s, want 409 %v", st, body, want)
	}
	if st, body = h.files("GET", id, "list?directory=/", nil); st != 200 {
		t.Errorf("list during a restore = %d %s, want 200", st, body)
	}
	held.Release()
	if st, body = h.files("POST", id, "write?file=/a.txt", "x", "Content-Type", "text/plain"); st != 204 && st != 200 {
		t.Errorf("write after the restore = %d %s", st, body)
	}
}

// TestDeleteServerWhileSnapshotted: a server a snapshot is being taken of
// (its record pending or creating) is not deleted: 409 CONFLICT naming
// the snapshot, the server and its files kept; once the snapshot is final
// the delete goes through.
func TestDeleteServerWhileSnapshotted(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		h := newHarness(t, db)
		id, root := h.fileServer(1024)
		me, err := h.auth.TeamByName(t.Context(), "default")
		if err != nil {
			t.Fatal(err)
		}
		// A snapshot queued behind others (pending), as its record is.
		if _, err := db.Write().ExecContext(t.Context(), `INSERT INTO snapshots (id, uuid, team_id, source_server_id, name, ignore, status, created_at, updated_at)
			VALUES ('snap_queued00000000000', 'c0ffee00-0000-4000-8000-000000000000', $1, $2, 'queued', '', 'pending', 1, 1)`, me.ID, id); err != nil {
			t.Fatal(err)
		}
		st, _, body := h.do("DELETE", Prefix+"/servers/"+id, h.token, nil)
		wantError(t, st, body, 409, "CONFLICT", "snapshot snap_queued00000000000 of this server is being taken; try again once it is ready or failed")
		if st, _ := h.sendJSON("GET", "/servers/"+id, nil); st != 200 {
			t.Fatalf("the server after a refused delete: %d", st)
		}
		if _, err := os.Stat(root); err != nil {
			t.Fatalf("the server's files after a refused delete: %v", err)
		}
		if _, err := db.Write().ExecContext(t.Context(), `UPDATE snapshots SET status = 'failed' WHERE id = 'snap_queued00000000000'`); err != nil {
			t.Fatal(err)
		}
		if st, _, body := h.do("DELETE", Prefix+"/servers/"+id, h.token, nil); st != 200 {
			t.Fatalf("delete once the snapshot is final: %d %s", st, body)
		}
	})
}

// TestReinstallWhileSnapshotted: a reinstall of a server a snapshot is
// reading whole (servers.Reading, as a snapshot's walk does) answers 409
// CONFLICT with its sentence; once the reading ends, it is accepted.
func TestReinstallWhileSnapshotted(t *testing.T) {
	h := newHarness(t, storetest.SQLite(t))
	id, _ := h.fileServer(1024)
	me, err := h.auth.TeamByName(t.Context(), "default")
	if err != nil {
		t.Fatal(err)
	}
	reading, err := h.srv.deps.Servers.Reading(t.Context(), me.ID, id)
	if err != nil {
		t.Fatal(err)
	}
	st, body := h.postJSON("/servers/"+id+"/reinstall", map[string]string{})
	wantError(t, st, body, 409, "CONFLICT", "a snapshot of the server is being taken; reinstall it once the snapshot is ready or failed")
	reading.Release()
	if st, body := h.postJSON("/servers/"+id+"/reinstall", map[string]string{}); st != 202 {
		t.Fatalf("reinstall once the reading ended: %d %s", st, body)
	}
}

// TestSnapshotManifestMissing: a snapshot whose manifest is gone from the
// store answers 409 SNAPSHOT_DAMAGED with a sentence to a restore (of the
// whole or of a path) and a download — before, a restore was accepted and
// failed in the background, and a download answered 500 — and shows its
// damage.
func TestSnapshotManifestMissing(t *testing.T) {
	h := newHarness(t, storetest.SQLite(t))
	id, root := h.fileServer(1024)
	if err := os.WriteFile(filepath.Join(root, "level.dat"), []byte("level"), 0o644); err != nil {
		t.Fatal(err)
	}
	snap := h.readySnapshot(id, "lost")
	_, out := h.sendJSON("GET", "/snapshots/"+snap, nil)
	uuid := out["snapshot"].(map[string]any)["snapshot_uuid"].(string)
	if err := os.Remove(filepath.Join(h.blobDir, "manifests", uuid)); err != nil {
		t.Fatal(err)
	}
	const msg = "the snapshot is damaged: its manifest is missing from the snapshot store: it cannot be restored or downloaded."
	st, _, body := h.do("POST", Prefix+"/snapshots/"+snap+"/restore", h.token, nil)
	wantError(t, st, body, 409, "SNAPSHOT_DAMAGED", msg)
	st, body = h.postJSON("/snapshots/"+snap+"/restore", map[string]any{"path": "/level.dat"})
	wantError(t, st, body, 409, "SNAPSHOT_DAMAGED", msg)
	st, _, body = h.do("GET", Prefix+"/snapshots/"+snap+"/download?format=tar", h.token, nil)
	wantError(t, st, body, 409, "SNAPSHOT_DAMAGED", msg)
	_, out = h.sendJSON("GET", "/snapshots/"+snap, nil)
	got := out["snapshot"].(map[string]any)
	if got["status"] != "ready" || got["damage"] != "Its manifest is missing from the snapshot store: it cannot be restored or downloaded." || got["damaged_at"] == nil {
		t.Errorf("the snapshot = %v; want ready, its damage said", got)
	}
}
