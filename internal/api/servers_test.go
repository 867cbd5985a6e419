package api

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/kilnhq/kiln/internal/eventually"
	"github.com/kilnhq/kiln/internal/slp"
	"github.com/kilnhq/kiln/internal/store"
	"github.com/kilnhq/kiln/internal/store/storetest"
)

// waitStatus polls GET /servers/{id} until the server has status want.
func (h *harness) waitStatus(id, want string) map[string]any {
	h.t.Helper()
	return eventually.Value(h.t, eventually.Within, fmt.Sprintf("server %s %q", id, want), func() (map[string]any, bool, string) {
		st, _, body := h.do("GET", Prefix+"/servers/"+id, h.token, nil)
		if st != 200 {
			h.t.Fatalf("GET server: %d %s", st, body)
		}
		sv := mustJSON(body)["server"].(map[string]any)
		return sv, sv["status"] == want, "last answer " + string(body)
	})
}

func (h *harness) postJSON(path string, v any) (int, []byte) {
	h.t.Helper()
	b, _ := json.Marshal(v)
	st, _, body := h.do("POST", Prefix+path, h.token, bytes.NewReader(b), "Content-Type", "application/json")
	return st, body
}

func TestSoftwareCatalog(t *testing.T) {
	h := newHarness(t, sqliteDB(t))
	st, _, body := h.do("GET", Prefix+"/servers/software", h.token, nil)
	if st != 200 {
		t.Fatalf("status %d: %s", st, body)
	}
	var out struct {
		Count    int              `json:"count"`
		Software []map[string]any `json:"software"`
	}
	if err := json.Unmarshal(body, &out); err != nil {
		t.Fatal(err)
	}
	var types []string
	for _, p := range out.Software {
		types = append(types, p["type"].(string))
		keys := slices.Sorted(func(yield func(string) bool) {
			for k := range p {
				if !yield(k) {
					return
				}
			}
		})
		want := []string{"category", "description", "docker_images", "environment_variables", "id", "name", "type"}
		if !slices.Equal(keys, want) {
			t.Errorf("profile %v keys = %v, want %v", p["type"], keys, want)
		}
		if p["type"] != "paper" {
			continue
		}
		vars := map[string]map[string]any{}
		for _, v := range p["environment_variables"].([]any) {
			vars[v.(map[string]any)["key"].(string)] = v.(map[string]any)
		}
		for key, wantVar := range map[string]map[string]any{
			"EULA":          {"key": "EULA", "default": false, "optional": false, "type": "boolean"},
			"DIFFICULTY":    {"key": "DIFFICULTY", "default": nil, "optional": true, "type": "string", "enum": []any{"peaceful", "easy", "normal", "hard"}, "property": "difficulty"},
			"VIEW_DISTANCE": {"key": "VIEW_DISTANCE", "default": nil, "optional": true, "type": "integer", "min": 3.0, "max": 32.0, "property": "view-distance"},
			"OPS":           {"key": "OPS", "default": nil, "optional": true, "type": "players"},
		} {
			got := maps.Clone(vars[key])
			delete(got, "title")
			delete(got, "description")
			if !reflect.DeepEqual(got, wantVar) {
				t.Errorf("paper %s = %v, want %v", key, got, wantVar)
			}
		}
	}
	want := []string{"paper", "purpur", "folia", "vanilla", "fabric", "forge", "neoforge", "velocity", "waterfall", "bungeecord", "quilt", "custom", "kiln-test", "kiln-test-proxy"}
	if !slices.Equal(types, want) || out.Count != len(want) {
		t.Errorf("software types = %v (count %d), want %v (dev mode lists kiln-test and kiln-test-proxy)", types, out.Count, want)
	}
	st, _, body = h.do("GET", Prefix+"/servers/software", "", nil)
	wantError(t, st, body, 401, "INVALID_TOKEN", "token")
}

func TestCreateServerBadInput(t *testing.T) {
	h := newHarness(t, sqliteDB(t))
	cases := []struct {
		name  string
		body  string
		code  string
		paths []string
	}{
		{"unknown field", `{"name":"a","software":"kiln-test","memory_mb":512,"disk_mb":1024,"ram":1}`, "VALIDATION_ERROR", nil},
		{"everything wrong", `{"name":"","software":"nope","version":"../x","memory_mb":1,"disk_mb":1,"cpu_percent":1}`, "VALIDATION_ERROR",
			[]string{"name", "software", "version", "memory_mb", "disk_mb", "cpu_percent"}},
		{"unknown env", `{"name":"a","software":"kiln-test","memory_mb":512,"disk_mb":1024,"env":{"NOPE":"1"}}`, "VALIDATION_ERROR", []string{"env.NOPE"}},
		{"env with newline", `{"name":"a","software":"kiln-test","memory_mb":512,"disk_mb":1024,"env":{"MOTD":"a\nb"}}`, "VALIDATION_ERROR", []string{"env.MOTD"}},
		{"wrong type", `{"name":5}`, "VALIDATION_ERROR", nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st, _, body := h.do("POST", Prefix+"/servers", h.token, strings.NewReader(tc.body), "Content-Type", "application/json")
			if st != 400 || mustJSON(body)["code"] != tc.code {
				t.Fatalf("status %d body %s, want 400 %s", st, body, tc.code)
			}
			if tc.paths == nil {
				return
			}
			var got []string
			for _, is := range mustJSON(body)["issues"].([]any) {
				got = append(got, is.(map[string]any)["path"].(string))
			}
			for _, p := range tc.paths {
				if !slices.Contains(got, p) {
					t.Errorf("issues %v lack path %q", got, p)
				}
			}
		})
	}
	st, _, body := h.do("POST", Prefix+"/servers", h.token, strings.NewReader(`{}`), "Content-Type", "text/plain")
	wantError(t, st, body, 415, "UNSUPPORTED_MEDIA_TYPE", "")
}

// TestServerLifecycle drives one kiln-test server through the whole API on
// the process runtime: create (install) → start → running (it answers the
// status ping) → command → console → stream → stop → reinstall → delete.
func TestServerLifecycle(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		h := newHarness(t, db)
		st, body := h.postJSON("/servers", map[string]any{
			"name": "lobby", "software": "kiln-test", "memory_mb": 512, "disk_mb": 1024,
			"env": map[string]string{"MOTD": "Hello from the API test"},
		})
		if st != 202 {
			t.Fatalf("create: %d %s", st, body)
		}
		sv := mustJSON(body)["server"].(map[string]any)
		id := sv["id"].(string)
		if sv["status"] != "installing" || sv["software"] != "kiln-test" || sv["node"] != "local" ||
			sv["configuration_id"] != nil || sv["install_error"] != nil || sv["memory_mb"] != 512.0 || sv["cpu_percent"] != 100.0 {
			t.Errorf("created server = %s", body)
		}
		if env := sv["env"].(map[string]any); env["MOTD"] != "Hello from the API test" || len(env) != 1 {
			t.Errorf("env = %v, want only what was set", env)
		}
		addr := sv["address"].(string)
		if !strings.HasPrefix(addr, "127.0.0.1:") {
			t.Errorf("address = %q, want 127.0.0.1:PORT", addr)
		}
		off := h.waitStatus(id, "offline")
		if off["version"] != "dev" {
			t.Errorf("installed version = %v, want dev (latest resolved)", off["version"])
		}

		// A command to a stopped server is refused.
		st, body = h.postJSON("/servers/"+id+"/command", map[string]string{"command": "say hi"})
		wantError(t, st, body, 502, "SERVER_OFFLINE", "not running")

		// Follow the console while the server starts, talks and stops; the
		// stream ends when the server is deleted.
		streamDone := make(chan []byte, 1)
		req, _ := http.NewRequestWithContext(t.Context(), "GET", h.url+Prefix+"/servers/"+id+"/console/stream", nil)
		req.Header.Set("Authorization", "Bearer "+h.token)
		resp, err := h.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if ct := resp.Header.Get("Content-Type"); resp.StatusCode != 200 || ct != "text/event-stream" {
			t.Fatalf("stream: %d %q", resp.StatusCode, ct)
		}
		br := bufio.NewReader(resp.Body)
		if first, err := br.ReadString('\n'); err != nil || first != ": streaming the console\n" {
			t.Fatalf("stream opened with %q, %v", first, err)
		}
		go func() {
			defer resp.Body.Close()
			var buf bytes.Buffer
			_, _ = buf.ReadFrom(br)
			streamDone <- buf.Bytes()
		}()

		st, body = h.postJSON("/servers/"+id+"/power", map[string]string{"action": "start"})
		if st != 202 || string(body) != "{\"ok\":true}\n" {
			t.Fatalf("start: %d %s", st, body)
		}
		h.waitStatus(id, "running")
		// running means the status ping answers, with the MOTD from env.
		status, err := slp.Ping(t.Context(), addr)
		if err != nil {
			t.Fatalf("ping %s: %v", addr, err)
		}
		if !strings.Contains(string(status.Raw), "Hello from the API test") {
			t.Errorf("status ping = %s, want the MOTD set through env", status.Raw)
		}

		st, body = h.postJSON("/servers/"+id+"/command", map[string]string{"command": "say hello from the test"})
		if st != 200 {
			t.Fatalf("command: %d %s", st, body)
		}
		waitConsole(t, h, id, "hello from the test")
		st, _, body = h.do("GET", Prefix+"/servers/"+id+"/console?size=501", h.token, nil)
		wantError(t, st, body, 400, "VALIDATION_ERROR", "size")

		// The list shows it running with live figures.
		st, _, body = h.do("GET", Prefix+"/servers", h.token, nil)
		list := mustJSON(body)["servers"].([]any)
		if st != 200 || len(list) != 1 || list[0].(map[string]any)["status"] != "running" {
			t.Fatalf("list = %d %s", st, body)
		}
		up := list[0].(map[string]any)["resources"].(map[string]any)["uptime_ms"].(float64)
		if up <= 0 {
			t.Errorf("uptime_ms = %v of a running server, want > 0", up)
		}
		// A second list at the same list version reuses the encoded rows;
		// the live figures must still be of now.
		time.Sleep(20 * time.Millisecond)
		_, _, body = h.do("GET", Prefix+"/servers", h.token, nil)
		list = mustJSON(body)["servers"].([]any)
		if up2 := list[0].(map[string]any)["resources"].(map[string]any)["uptime_ms"].(float64); up2 < up+20 {
			t.Errorf("uptime_ms %v then %v 20 ms later: the list's live figures are stale", up, up2)
		}

		st, body = h.postJSON("/servers/"+id+"/power", map[string]string{"action": "fly"})
		wantError(t, st, body, 400, "VALIDATION_ERROR", "start, stop, restart, kill")

		st, _ = h.postJSON("/servers/"+id+"/power", map[string]string{"action": "stop"})
		if st != 202 {
			t.Fatalf("stop: %d", st)
		}
		h.waitStatus(id, "offline")
		waitConsole(t, h, id, "Stopping the server")

		// Reinstall keeps world files.
		root := filepath.Join(h.dataDir, "servers", id)
		if _, err := os.Stat(filepath.Join(root, "world")); err != nil {
			t.Fatalf("the test server wrote no world/: %v", err)
		}
		st, body = h.postJSON("/servers/"+id+"/reinstall", map[string]string{"version": "1.21.4"})
		if st != 202 {
			t.Fatalf("reinstall: %d %s", st, body)
		}
		sv = h.waitStatus(id, "offline")
		if sv["version"] != "1.21.4" {
			t.Errorf("version after reinstall = %v, want 1.21.4", sv["version"])
		}
		if _, err := os.Stat(filepath.Join(root, "world")); err != nil {
			t.Errorf("reinstall removed world/: %v", err)
		}

		st, _, body = h.do("DELETE", Prefix+"/servers/"+id, h.token, nil)
		if st != 200 || string(body) != "{\"ok\":true}\n" {
			t.Fatalf("delete: %d %s", st, body)
		}
		select {
		case stream := <-streamDone:
			events := sseEvents(stream)
			for _, want := range []string{"status starting", "status running", "line [kiln] starting kiln-test dev",
				"status stopping", "status offline", "status installing", "status deleted"} {
				if !slices.Contains(events, want) {
					t.Errorf("stream lacks event %q; got %q", want, events)
				}
			}
		case <-time.After(30 * time.Second):
			t.Fatal("the console stream did not end when the server was deleted")
		}
		st, _, body = h.do("GET", Prefix+"/servers/"+id, h.token, nil)
		wantError(t, st, body, 404, "SERVER_NOT_FOUND", "not found")
		if _, err := os.Stat(root); !os.IsNotExist(err) {
			t.Errorf("server root still there after delete: %v", err)
		}
	})
}

func waitConsole(t *testing.T, h *harness, id, want string) {
	t.Helper()
	eventually.True(t, eventually.Within, fmt.Sprintf("the console showing %q", want), func() (bool, string) {
		st, _, body := h.do("GET", Prefix+"/servers/"+id+"/console?size=500", h.token, nil)
		if st != 200 {
			t.Fatalf("console: %d %s", st, body)
		}
		return bytes.Contains(body, []byte(want)), string(body)
	})
}

// sseEvents reads "event data" pairs of a text/event-stream body.
func sseEvents(b []byte) []string {
	var out []string
	var ev string
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			ev = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			out = append(out, ev+" "+strings.TrimPrefix(line, "data: "))
		}
	}
	return out
}

// TestServerEndpointsRefuse covers bad ids, other teams' servers and
// states in which an action is refused, on every server route.
func TestServerEndpointsRefuse(t *testing.T) {
	h := newHarness(t, sqliteDB(t))
	ctx := t.Context()
	other, err := h.auth.CreateTeam(ctx, "other")
	if err != nil {
		t.Fatal(err)
	}
	otherID := "3f1e2d4c-5b6a-4789-8abc-def012345678"
	insertServer(t, h.db, otherID, other.ID, "theirs", 1, nil, 1)
	routes := []struct{ method, suffix, body string }{
		{"GET", "", ""},
		{"DELETE", "", ""},
		{"POST", "/power", `{"action":"start"}`},
		{"POST", "/command", `{"command":"list"}`},
		{"GET", "/console", ""},
		{"GET", "/console/stream", ""},
		{"POST", "/reinstall", `{}`},
	}
	for _, rt := range routes {
		t.Run(rt.method+rt.suffix, func(t *testing.T) {
			send := func(id string) (int, []byte) {
				var body *strings.Reader
				if rt.body != "" {
					body = strings.NewReader(rt.body)
				} else {
					body = strings.NewReader("")
				}
				st, _, b := h.do(rt.method, Prefix+"/servers/"+id+rt.suffix, h.token, body, "Content-Type", "application/json")
				return st, b
			}
			st, b := send("not-a-uuid")
			wantError(t, st, b, 400, "INVALID_SERVER_ID", "not-a-uuid")
			st, b = send(otherID)
			wantError(t, st, b, 404, "SERVER_NOT_FOUND", "not found")
			st, b = send("00000000-0000-4000-8000-000000000000")
			wantError(t, st, b, 404, "SERVER_NOT_FOUND", "not found")
		})
	}
	// The other team still has its server, untouched.
	var n int
	if err := h.db.Read().QueryRowContext(ctx, `SELECT count(*) FROM servers WHERE id = $1`, otherID).Scan(&n); err != nil || n != 1 {
		t.Fatalf("other team's server: n=%d err=%v", n, err)
	}
}

func TestDeleteOwnedServerRefused(t *testing.T) {
	h := newHarness(t, sqliteDB(t))
	me, _ := h.auth.TeamByName(t.Context(), "default")
	cfg := "cfg_owner"
	id := "11111111-2222-4333-8444-555555555555"
	insertServer(t, h.db, id, me.ID, "owned", 2, &cfg, 1)
	st, _, body := h.do("DELETE", Prefix+"/servers/"+id, h.token, nil)
	wantError(t, st, body, 409, "CONFLICT", "deployment")
}

// TestEULAAndPatchEnv: a paper server is created without the EULA; a
// start is refused with 409 EULA_NOT_ACCEPTED and the sentence, whatever
// else is wrong with it (here its install failed: no upstream is
// reachable); PATCH /servers/{id} sets EULA=true (and unsets with null),
// after which the start meets the next refusal, the failed install.
func TestEULAAndPatchEnv(t *testing.T) {
	h := newHarness(t, sqliteDB(t))
	st, body := h.postJSON("/servers", map[string]any{"name": "survival", "software": "paper", "memory_mb": 1024, "disk_mb": 1024})
	if st != 202 {
		t.Fatalf("create without EULA: %d %s", st, body)
	}
	id := mustJSON(body)["server"].(map[string]any)["id"].(string)
	deadline := time.Now().Add(60 * time.Second)
	for {
		_, _, body := h.do("GET", Prefix+"/servers/"+id, h.token, nil)
		if sv := mustJSON(body)["server"].(map[string]any); sv["status"] != "installing" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the install never ended")
		}
		time.Sleep(50 * time.Millisecond)
	}
	st, body = h.postJSON("/servers/"+id+"/power", map[string]string{"action": "start"})
	wantError(t, st, body, 409, "EULA_NOT_ACCEPTED", "read the EULA at https://aka.ms/MinecraftEULA, then set EULA=true in the server's env")

	patch := func(body string) (int, map[string]any) {
		t.Helper()
		st, _, b := h.do("PATCH", Prefix+"/servers/"+id, h.token, strings.NewReader(body), "Content-Type", "application/json")
		return st, mustJSON(b)
	}
	st, got := patch(`{"env":{"EULA":"true","DIFFICULTY":"hard","VIEW_DISTANCE":"12"}}`)
	if env := got["server"].(map[string]any)["env"]; st != 200 || got["ok"] != true ||
		!reflect.DeepEqual(env, map[string]any{"EULA": "true", "DIFFICULTY": "hard", "VIEW_DISTANCE": "12"}) {
		t.Fatalf("PATCH env: %d %v", st, got)
	}
	st, got = patch(`{"env":{"DIFFICULTY":null}}`)
	if env := got["server"].(map[string]any)["env"]; st != 200 || !reflect.DeepEqual(env, map[string]any{"EULA": "true", "VIEW_DISTANCE": "12"}) {
		t.Fatalf("PATCH unset: %d %v", st, got)
	}
	st, got = patch(`{"env":{"VIEW_DISTANCE":"64","MODE":"hardcore"}}`)
	var paths []string
	for _, is := range got["issues"].([]any) {
		paths = append(paths, is.(map[string]any)["path"].(string))
	}
	if st != 400 || got["code"] != "VALIDATION_ERROR" || !slices.Equal(paths, []string{"env.MODE", "env.VIEW_DISTANCE"}) {
		t.Errorf("PATCH bad values: %d %v", st, got)
	}
	if st, got = patch(`{}`); st != 400 || got["code"] != "VALIDATION_ERROR" {
		t.Errorf("PATCH without env: %d %v", st, got)
	}
	st, _, b := h.do("PATCH", Prefix+"/servers/"+uuid.NewString(), h.token, strings.NewReader(`{"env":{}}`), "Content-Type", "application/json")
	wantError(t, st, b, 404, "SERVER_NOT_FOUND", "")

	st, body = h.postJSON("/servers/"+id+"/power", map[string]string{"action": "start"})
	wantError(t, st, body, 409, "CONFLICT", "the last install failed")
}
