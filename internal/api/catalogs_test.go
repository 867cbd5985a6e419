package api

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kilnhq/kiln/internal/store/storetest"
)

// catalogStub serves CurseForge's and Modrinth's published example
// answers from internal/modcatalog's fixtures (the tests' stand-in for
// the internet; testdata/README.md there says where each comes from).
// The Version is made a Bukkit plugin for the kiln-test server, the
// changes written here.
func catalogStub(t *testing.T) http.Handler {
	mux := http.NewServeMux()
	fixture := func(file string) []byte {
		body, err := os.ReadFile(filepath.Join("..", "modcatalog", "testdata", file))
		if err != nil {
			t.Fatalf("fixture %s: %v", file, err)
		}
		return body
	}
	serve := func(pattern string, body []byte) {
		mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.Write(body)
		})
	}
	serve("GET /v1/mods/search", fixture("curseforge/search.json"))
	serve("GET /v1/mods/238222", fixture("curseforge/mod.json"))
	serve("GET /v1/mods/238222/files", fixture("curseforge/files.json"))
	serve("GET /v1/mods/238222/files/4593548", fixture("curseforge/file.json"))
	serve("GET /v2/search", fixture("modrinth/search.json"))
	serve("GET /v2/project/luckperms/version", fixture("modrinth/versions.json"))
	serve("GET /v2/project/luckperms", fixture("modrinth/project.json"))
	var v map[string]any
	if err := json.Unmarshal(fixture("modrinth/version.json"), &v); err != nil {
		t.Fatal(err)
	}
	v["id"], v["loaders"], v["game_versions"] = "OrIs0S6b", []string{"bukkit", "paper"}, []string{"1.21.4"}
	f := v["files"].([]any)[0].(map[string]any)
	f["filename"], f["url"], f["primary"], f["file_type"] = "LuckPerms-Bukkit-5.4.137.jar",
		"https://cdn.modrinth.com/data/Vebnzrzj/versions/OrIs0S6b/LuckPerms-Bukkit-5.4.137.jar", true, nil
	version, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	serve("GET /v2/version/OrIs0S6b", version)
	mux.HandleFunc("GET /v2/project/broken/version", func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "boom", http.StatusInternalServerError)
	})
	return mux
}

// TestCatalogsAPI drives every catalog route through the API (each answer
// validated against openapi.yaml, and /curseforge/search against the
// seed's): normalized answers, validation before any upstream call, an
// upstream failure as 502 UPSTREAM_ERROR, and a mod install's refusals.
func TestCatalogsAPI(t *testing.T) {
	h := newHarness(t, storetest.SQLite(t))
	for _, c := range []struct{ path, field string }{
		{"/curseforge/search?searchFilter=jei&pageSize=5&sortField=2&sortOrder=desc", "results"},
		{"/curseforge/projects/238222", "name"},
		{"/curseforge/projects/238222/versions", "results"},
		{"/modrinth/search?query=luckperms&limit=5&index=downloads", "results"},
		{"/modrinth/projects/luckperms/versions", "results"},
	} {
		st, out := h.sendJSON("GET", c.path, nil)
		if st != 200 || out[c.field] == nil {
			t.Errorf("GET %s = %d %v", c.path, st, out)
		}
	}
	st, _, body := h.do("GET", Prefix+"/curseforge/search?pageSize=51", h.token, nil)
	wantError(t, st, body, 400, "VALIDATION_ERROR", "pageSize")
	st, _, body = h.do("GET", Prefix+"/modrinth/search?limit=0", h.token, nil)
	wantError(t, st, body, 400, "VALIDATION_ERROR", "limit")
	st, _, body = h.do("GET", Prefix+"/modrinth/projects/broken/versions", h.token, nil)
	wantError(t, st, body, 502, "UPSTREAM_ERROR", "Modrinth")

	id, _ := h.fileServer(1024)
	st, body = h.postJSON("/servers/"+id+"/mods", map[string]any{"catalog": "nope", "project_id": "x"})
	wantError(t, st, body, 400, "VALIDATION_ERROR", "catalog")
	st, body = h.postJSON("/servers/6f1c2a8e-7d3b-4c2a-9a51-2d3f4e5a6b7c/mods", map[string]any{"catalog": "modrinth", "project_id": "luckperms", "version_id": "OrIs0S6b"})
	wantError(t, st, body, 404, "SERVER_NOT_FOUND", "server")
	// Modpacks: the request checked, a pack file that is not there, an
	// install id that is not known (the happy paths are internal/modcatalog's).
	st, body = h.postJSON("/servers/"+id+"/modpack", map[string]any{})
	wantError(t, st, body, 400, "VALIDATION_ERROR", "")
	st, body = h.postJSON("/servers/"+id+"/modpack", map[string]any{"file": "/packs/missing.mrpack"})
	wantError(t, st, body, 404, "FILE_NOT_FOUND", "")
	st, _, body = h.do("GET", Prefix+"/servers/"+id+"/modpack/0123456789abcdef0123456789abcdef", h.token, nil)
	wantError(t, st, body, 404, "NOT_FOUND", "modpack")

	// A Bukkit plugin for the kiln-test server (a plugin platform): queued
	// into plugins/, its dependency listed. (cdn.modrinth.com does not
	// resolve in tests: the download then fails, nothing leaves loopback.)
	st, body = h.postJSON("/servers/"+id+"/mods", map[string]any{"catalog": "modrinth", "project_id": "luckperms", "version_id": "OrIs0S6b"})
	out := mustJSON(body)
	dl, _ := out["download"].(map[string]any)
	if st != 202 || dl["file"] != "/plugins/LuckPerms-Bukkit-5.4.137.jar" || len(out["dependencies"].([]any)) != 1 {
		t.Errorf("install = %d %s", st, body)
	}
	if dl != nil {
		if got := h.waitDownload(id, dl["identifier"].(string)); !strings.Contains(got["error"].(string), "cdn.modrinth.com") {
			t.Errorf("the download = %v; want it failed resolving cdn.modrinth.com", got)
		}
	}
}
