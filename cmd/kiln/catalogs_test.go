package main

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// TestServeModCatalogs runs `kiln serve` as an operator would, its catalog
// flags pointed at a local stand-in for CurseForge and Modrinth serving
// their published example answers: searches answer Kiln's shapes, the
// stand-in sees the key and a User-Agent naming the contact, a second
// identical search is served from the cache, a bad parameter never leaves
// Kiln, /metrics counts it all; without a key CurseForge is 503.
func TestServeModCatalogs(t *testing.T) {
	var (
		mu   sync.Mutex
		reqs []*http.Request
	)
	mux := http.NewServeMux()
	serve := func(pattern, file string) {
		body, err := os.ReadFile(filepath.Join("..", "..", "internal", "modcatalog", "testdata", file))
		if err != nil {
			t.Fatal(err)
		}
		mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			reqs = append(reqs, r)
			mu.Unlock()
			w.Header().Set("Content-Type", "application/json")
			w.Write(body)
		})
	}
	serve("GET /v1/mods/search", "curseforge/search.json")
	serve("GET /v2/search", "modrinth/search.json")
	up := httptest.NewServer(mux)
	t.Cleanup(up.Close)

	dir := t.TempDir()
	p := startServe(t, "--data-dir", dir, "--curseforge-api-url", up.URL, "--modrinth-api-url", up.URL,
		"--curseforge-api-key", "cf-test-key", "--catalog-contact", "ops@example.test", "--pull-allow-cidr", "127.0.0.1/32")
	tok := token(t, dir)
	for _, c := range []struct{ path, want string }{
		{"/api/client/v1/modrinth/search?query=perms&limit=5", `"total_hits":10`},
		{"/api/client/v1/modrinth/search?query=perms&limit=5", `"total_hits":10`}, // cached
		{"/api/client/v1/curseforge/search?searchFilter=jei&sortField=totalDownloads", `"total_count":0`},
	} {
		if st, body, _ := get(t, p.addr, c.path, tok); st != 200 || !strings.Contains(body, c.want) || !strings.Contains(body, `"results":[{`) {
			t.Errorf("GET %s = %d %s, want 200 with %s", c.path, st, body, c.want)
		}
	}
	st, body, _ := get(t, p.addr, "/api/client/v1/curseforge/search?pageSize=51", tok)
	if want := `{"error":"pageSize: must be between 1 and 50","code":"VALIDATION_ERROR","issues":[{"path":"pageSize","message":"must be between 1 and 50"}]}` + "\n"; st != 400 || body != want {
		t.Errorf("pageSize=51: %d %q, want 400 %q", st, body, want)
	}
	mu.Lock()
	if len(reqs) != 2 {
		t.Errorf("the stand-in received %d requests, want 2 (one per distinct search)", len(reqs))
	}
	for _, r := range reqs {
		ua := r.Header.Get("User-Agent")
		if !strings.HasPrefix(ua, "kilnhq/kiln/") || !strings.HasSuffix(ua, " (ops@example.test)") {
			t.Errorf("User-Agent %q, want kilnhq/kiln/<version> (ops@example.test)", ua)
		}
		key := r.Header.Get("X-Api-Key")
		if cf := strings.HasPrefix(r.URL.Path, "/v1/"); (cf && key != "cf-test-key") || (!cf && key != "") {
			t.Errorf("%s got x-api-key %q", r.URL.Path, key)
		}
	}
	mu.Unlock()
	_, metrics, _ := get(t, p.addr, "/metrics", "")
	for _, want := range []string{
		`kiln_catalog_upstream_requests_total{catalog="modrinth",outcome="ok"} 1`,
		`kiln_catalog_upstream_requests_total{catalog="curseforge",outcome="ok"} 1`,
		`kiln_catalog_cache_lookups_total{catalog="modrinth",result="hit"} 1`,
		`kiln_catalog_upstream_request_duration_seconds_count{catalog="modrinth"} 1`,
	} {
		if !strings.Contains(metrics, want+"\n") {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if strings.Contains(p.Stderr(), "cf-test-key") {
		t.Error("the CurseForge key appears in the log")
	}

	// Without a key.
	dir2 := t.TempDir()
	p2 := startServe(t, "--data-dir", dir2, "--curseforge-api-url", up.URL, "--pull-allow-cidr", "127.0.0.1/32")
	st, body, _ = get(t, p2.addr, "/api/client/v1/curseforge/search", token(t, dir2))
	if st != 503 || !strings.Contains(body, `"code":"CATALOG_NOT_CONFIGURED"`) || !strings.Contains(body, "--curseforge-api-key") {
		t.Errorf("CurseForge without a key = %d %s, want 503 CATALOG_NOT_CONFIGURED naming the flag", st, body)
	}
}

// token is the bootstrap token of a data dir.
func token(t *testing.T, dir string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "bootstrap-token"))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}
