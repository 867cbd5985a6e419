package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/kilnhq/kiln/internal/auth"
)

const specLobby = "version: 1\nservers:\n  lobby:\n    software: paper\n    memory: 2G\n"

func (h *harness) sendJSON(method, path string, v any, token ...string) (int, map[string]any) {
	h.t.Helper()
	tok := h.token
	if len(token) > 0 {
		tok = token[0]
	}
	var body *bytes.Reader
	if v != nil {
		b, _ := json.Marshal(v)
		body = bytes.NewReader(b)
	}
	var st int
	var data []byte
	if body == nil {
		st, _, data = h.do(method, Prefix+path, tok, nil)
	} else {
		st, _, data = h.do(method, Prefix+path, tok, body, "Content-Type", "application/json")
	}
	var out map[string]any
	if err := json.Unmarshal(data, &out); err != nil {
		h.t.Fatalf("%s %s: answer %q is not JSON", method, path, data)
	}
	return st, out
}

// TestConfigurationsAPI walks a configuration through create, update,
// push, versions and delete, checking the exact seed shapes (every
// answer is also validated against openapi.yaml by the harness).
func TestConfigurationsAPI(t *testing.T) {
	h := newHarness(t, sqliteDB(t))

	st, out := h.sendJSON("POST", "/deployments/configurations", map[string]any{"name": "network", "yaml": specLobby})
	if st != 200 || out["ok"] != true {
		t.Fatalf("create: %d %v", st, out)
	}
	cfg := out["configuration"].(map[string]any)
	id := cfg["id"].(string)
	if !strings.HasPrefix(id, "cfg_") || cfg["name"] != "network" || cfg["description"] != "" || cfg["yaml"] != specLobby ||
		cfg["resource_count"] != 1.0 || !strings.HasPrefix(cfg["spec_hash"].(string), "sha256:") {
		t.Fatalf("configuration = %v", cfg)
	}
	for _, k := range []string{"latest_pushed_version_id", "latest_pushed_version_number", "latest_pushed_spec_hash", "latest_pushed_at"} {
		if v, ok := cfg[k]; !ok || v != nil {
			t.Errorf("%s = %v (present %v), want null before the first push", k, v, ok)
		}
	}

	// A broken spec: 400 with the spec's own paths.
	st, out = h.sendJSON("POST", "/deployments/configurations", map[string]any{"name": "bad",
		"yaml": "version: 1\nservers:\n  lobby:\n    software: paper\n    memory: 100G\n    memroy: 1G\n"})
	issues, _ := out["issues"].([]any)
	paths := map[string]string{}
	for _, is := range issues {
		paths[is.(map[string]any)["path"].(string)] = is.(map[string]any)["message"].(string)
	}
	if st != 400 || out["code"] != "VALIDATION_ERROR" || len(issues) != 2 ||
		paths["servers.lobby.memory"] != "must be between 256M and 64G" || paths["servers.lobby.memroy"] != "unknown field (line 6)" {
		t.Fatalf("create with a broken spec: %d %v", st, out)
	}
	st, out = h.sendJSON("POST", "/deployments/configurations", map[string]any{"name": "bad", "yaml": "version: 1\nservers: [\n"})
	if issues, _ := out["issues"].([]any); st != 400 || len(issues) != 1 || issues[0].(map[string]any)["path"] != "yaml" ||
		!strings.Contains(issues[0].(map[string]any)["message"].(string), "line 3, column 1") {
		t.Fatalf("create with a syntax error: %d %v", st, out)
	}
	st, out = h.sendJSON("POST", "/deployments/configurations", map[string]any{"name": "network", "yaml": specLobby})
	if st != 409 || out["code"] != "CONFLICT" {
		t.Fatalf("create with a taken name: %d %v", st, out)
	}

	// Push without a body: version 1; again: created false.
	st, _, data := h.do("POST", Prefix+"/deployments/configurations/"+id+"/push", h.token, nil)
	if st != 200 {
		t.Fatalf("push: %d %s", st, data)
	}
	out = mustJSON(data)
	v1 := out["version"].(map[string]any)
	if out["created"] != true || v1["version_number"] != 1.0 || v1["base_version_id"] != nil || v1["push_message"] != "" ||
		!strings.HasPrefix(v1["pushed_by"].(string), "user:") || v1["yaml"] != specLobby || v1["configuration_id"] != id {
		t.Fatalf("push = %v", out)
	}
	st, out = h.sendJSON("POST", "/deployments/configurations/"+id+"/push", map[string]any{"push_message": "again"})
	if st != 200 || out["created"] != false || out["version"].(map[string]any)["id"] != v1["id"] {
		t.Fatalf("push of an unchanged spec: %d %v", st, out)
	}
	st, out = h.sendJSON("POST", "/deployments/configurations/"+id+"/push", map[string]any{"push_message": strings.Repeat("x", 1001)})
	if st != 400 || out["code"] != "VALIDATION_ERROR" {
		t.Fatalf("push with a long message: %d %v", st, out)
	}

	// Update: only the given fields change; then push version 2.
	st, out = h.sendJSON("PATCH", "/deployments/configurations/"+id, map[string]any{"yaml": strings.Replace(specLobby, "2G", "3G", 1)})
	upd, _ := out["configuration"].(map[string]any)
	if st != 200 || upd["name"] != "network" || upd["spec_hash"] == cfg["spec_hash"] || upd["latest_pushed_version_number"] != 1.0 {
		t.Fatalf("update: %d %v", st, out)
	}
	st, out = h.sendJSON("POST", "/deployments/configurations/"+id+"/push", map[string]any{"push_message": "more memory"})
	v2 := out["version"].(map[string]any)
	if st != 200 || out["created"] != true || v2["version_number"] != 2.0 || v2["base_version_id"] != v1["id"] {
		t.Fatalf("second push: %d %v", st, out)
	}
	st, out = h.sendJSON("GET", "/deployments/configurations/"+id, nil)
	if got := out["configuration"].(map[string]any); st != 200 || got["latest_pushed_version_id"] != v2["id"] ||
		got["latest_pushed_spec_hash"] != v2["spec_hash"] || got["latest_pushed_at"] != v2["pushed_at"] {
		t.Fatalf("get after two pushes: %d %v", st, out)
	}

	// Versions: newest first, one per page, then the end.
	st, out = h.sendJSON("GET", "/deployments/configurations/"+id+"/versions?limit=1", nil)
	if vs := out["versions"].([]any); st != 200 || out["count"] != 1.0 || len(vs) != 1 || vs[0].(map[string]any)["version_number"] != 2.0 || out["next_cursor"] == "" {
		t.Fatalf("versions page 1: %d %v", st, out)
	}
	st, out = h.sendJSON("GET", "/deployments/configurations/"+id+"/versions?limit=1&cursor="+out["next_cursor"].(string), nil)
	if vs := out["versions"].([]any); st != 200 || len(vs) != 1 || vs[0].(map[string]any)["version_number"] != 1.0 || out["next_cursor"] != "" {
		t.Fatalf("versions page 2: %d %v", st, out)
	}
	for _, q := range []string{"limit=0", "limit=201", "limit=x", "cursor=zz"} {
		if st, out := h.sendJSON("GET", "/deployments/configurations/"+id+"/versions?"+q, nil); st != 400 || out["code"] != "VALIDATION_ERROR" {
			t.Errorf("versions?%s: %d %v", q, st, out)
		}
	}
	st, out = h.sendJSON("GET", "/deployments/configurations/"+id+"/versions/1", nil)
	if st != 200 || out["version"].(map[string]any)["yaml"] != specLobby {
		t.Fatalf("version 1: %d %v", st, out)
	}
	if st, out := h.sendJSON("GET", "/deployments/configurations/"+id+"/versions/9", nil); st != 404 || out["code"] != "NOT_FOUND" {
		t.Fatalf("version 9: %d %v", st, out)
	}
	if st, out := h.sendJSON("GET", "/deployments/configurations/"+id+"/versions/x", nil); st != 400 {
		t.Fatalf("version x: %d %v", st, out)
	}

	// Diff: latest against the one before, by default.
	st, out = h.sendJSON("GET", "/deployments/configurations/"+id+"/diff", nil)
	if d, _ := out["diff"].(map[string]any); st != 200 || out["from"] != 1.0 || out["to"] != 2.0 || out["has_changes"] != true ||
		d["unified"] != "--- v1.yaml\n+++ v2.yaml\n@@ -2,4 +2,4 @@\n servers:\n   lobby:\n     software: paper\n-    memory: 2G\n+    memory: 3G\n" ||
		d["truncated"] != false || d["stats"].(map[string]any)["added"] != 1.0 || d["stats"].(map[string]any)["removed"] != 1.0 {
		t.Fatalf("diff: %d %v", st, out)
	}
	st, out = h.sendJSON("GET", "/deployments/configurations/"+id+"/diff?to=1", nil)
	if st != 200 || out["from"] != nil || out["to"] != 1.0 || out["has_changes"] != true {
		t.Fatalf("diff of the first version: %d %v", st, out)
	}
	if st, out := h.sendJSON("GET", "/deployments/configurations/"+id+"/diff?from=0", nil); st != 400 || out["code"] != "VALIDATION_ERROR" {
		t.Fatalf("diff?from=0: %d %v", st, out)
	}

	// Another team sees none of it.
	other, _ := h.auth.CreateTeam(t.Context(), "other")
	tok, _, err := h.auth.CreateToken(t.Context(), other.Name, auth.KindAgent, "bot")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ method, path string }{
		{"GET", "/deployments/configurations/" + id},
		{"DELETE", "/deployments/configurations/" + id},
		{"POST", "/deployments/configurations/" + id + "/push"},
		{"GET", "/deployments/configurations/" + id + "/versions"},
		{"GET", "/deployments/configurations/" + id + "/versions/1"},
		{"GET", "/deployments/configurations/" + id + "/diff"},
	} {
		st, _, data := h.do(c.method, Prefix+c.path, string(tok), nil)
		wantError(t, st, data, 404, "CONFIGURATION_NOT_FOUND", "not found")
	}
	if st, out := h.sendJSON("GET", "/deployments/configurations", nil, string(tok)); st != 200 || out["count"] != 0.0 {
		t.Fatalf("the other team's list: %d %v", st, out)
	}
	if st, out := h.sendJSON("GET", "/deployments/configurations", nil); st != 200 || out["count"] != 1.0 {
		t.Fatalf("list: %d %v", st, out)
	}

	// Delete: refused while a server belongs to it, then done.
	if _, err := h.db.Write().ExecContext(t.Context(), `INSERT INTO servers (id, team_id, name, software, version, status, node, port,
		memory_mb, disk_mb, cpu_percent, configuration_id, created_at, updated_at)
		SELECT '00000000-0000-4000-8000-0000000000aa', id, 'lobby', 'paper', 'latest', 'offline', 'elsewhere', 39999, 1024, 1024, 100, $1, 1, 1
		FROM teams WHERE name = 'default'`, id); err != nil {
		t.Fatal(err)
	}
	st, _, data = h.do("DELETE", Prefix+"/deployments/configurations/"+id, h.token, nil)
	wantError(t, st, data, 409, "CONFIGURATION_IN_USE", "owns deployed resources")
	if _, err := h.db.Write().ExecContext(t.Context(), `DELETE FROM servers WHERE id = '00000000-0000-4000-8000-0000000000aa'`); err != nil {
		t.Fatal(err)
	}
	// A configuration never pushed has nothing to diff.
	_, out = h.sendJSON("POST", "/deployments/configurations", map[string]any{"name": "fresh", "yaml": specLobby})
	st, _, data = h.do("GET", Prefix+"/deployments/configurations/"+out["configuration"].(map[string]any)["id"].(string)+"/diff", h.token, nil)
	wantError(t, st, data, 409, "NOT_PUSHED", "push it first")

	st, out = h.sendJSON("DELETE", "/deployments/configurations/"+id, nil)
	if st != 200 || out["ok"] != true || out["deleted"] != true {
		t.Fatalf("delete: %d %v", st, out)
	}
	st, _, data = h.do("GET", Prefix+"/deployments/configurations/"+id, h.token, nil)
	wantError(t, st, data, 404, "CONFIGURATION_NOT_FOUND", "not found")
}

// TestProxyPortOutsideRange: a proxy's requested port outside the node's
// game ports is refused where the YAML is checked (create, PATCH), at its
// path, as the error model shows; one inside is accepted and pushed.
// Before, both passed and only the run failed, at apply.
func TestProxyPortOutsideRange(t *testing.T) {
	h := newHarness(t, sqliteDB(t))
	withPort := func(port int) string {
		return fmt.Sprintf("version: 1\nservers:\n  lobby: {software: paper, memory: 1G}\nproxies:\n  edge:\n    software: velocity\n    memory: 1G\n    port: %d\n    servers: [lobby]\n", port)
	}
	wantPortRefused := func(st int, out map[string]any) {
		t.Helper()
		msg := fmt.Sprintf("must be within the node's port range %d-%d", h.ports.First, h.ports.Last)
		want := map[string]any{
			"error": "proxies.edge.port: " + msg, "code": "VALIDATION_ERROR",
			"issues": []any{map[string]any{"path": "proxies.edge.port", "message": msg}},
		}
		if st != 400 || !reflect.DeepEqual(out, want) {
			t.Errorf("answer = %d %v, want 400 %v", st, out, want)
		}
	}
	for _, port := range []int{h.ports.First - 1, h.ports.Last + 1} {
		st, out := h.sendJSON("POST", "/deployments/configurations", map[string]any{"name": "network", "yaml": withPort(port)})
		wantPortRefused(st, out)
	}
	id := h.createConfiguration("network", withPort(h.ports.Last))
	st, out := h.sendJSON("PATCH", "/deployments/configurations/"+id, map[string]any{"yaml": withPort(h.ports.Last + 1)})
	wantPortRefused(st, out)
	if st, out := h.sendJSON("POST", "/deployments/configurations/"+id+"/push", nil); st != 200 || out["created"] != true {
		t.Fatalf("push of a port in the range: %d %v", st, out)
	}
	// Two proxies asking for one port: the second by name is refused.
	two := fmt.Sprintf("version: 1\nservers:\n  lobby: {software: paper, memory: 1G}\nproxies:\n"+
		"  edge: {software: velocity, memory: 1G, port: %d, servers: [lobby]}\n"+
		"  west: {software: velocity, memory: 1G, port: %d, servers: [lobby]}\n", h.ports.First, h.ports.First)
	st, out = h.sendJSON("POST", "/deployments/configurations", map[string]any{"name": "two", "yaml": two})
	msg := fmt.Sprintf("%d is already asked for by proxy edge; each proxy needs a port of its own", h.ports.First)
	want := map[string]any{"error": "proxies.west.port: " + msg, "code": "VALIDATION_ERROR",
		"issues": []any{map[string]any{"path": "proxies.west.port", "message": msg}}}
	if st != 400 || !reflect.DeepEqual(out, want) {
		t.Errorf("two proxies on one port = %d %v, want 400 %v", st, out, want)
	}
}
