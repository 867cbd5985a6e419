package modcatalog

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/kilnhq/kiln/internal/validate"
)

func TestCurseForgeSearch(t *testing.T) {
	u := newUpstream(t)
	s, _ := newService(t, u, nil)
	got, err := s.SearchCurseForge(t.Context(), url.Values{
		"searchFilter": {"jei"}, "classId": {"6"}, "gameVersion": {"1.20.1"},
		"sortField": {"totalDownloads"}, "sortOrder": {"desc"}, "pageSize": {"20"}, "index": {"40"},
	})
	if err != nil {
		t.Fatal(err)
	}
	r := u.last(t)
	if r.URL.Path != "/v1/mods/search" {
		t.Errorf("upstream path = %q, want /v1/mods/search", r.URL.Path)
	}
	want := url.Values{
		"gameId": {"432"}, "searchFilter": {"jei"}, "classId": {"6"}, "gameVersion": {"1.20.1"},
		"sortField": {"6"}, "sortOrder": {"desc"}, "pageSize": {"20"}, "index": {"40"},
	}
	if r.URL.Query().Encode() != want.Encode() {
		t.Errorf("upstream query = %s, want %s", r.URL.Query().Encode(), want.Encode())
	}
	if k := r.Header.Get("X-Api-Key"); k != testKey {
		t.Errorf("x-api-key = %q, want the configured key", k)
	}
	if ua := r.Header.Get("User-Agent"); ua != testUA {
		t.Errorf("User-Agent = %q, want %q", ua, testUA)
	}
	// The published example: one mod of placeholders, totalCount 0.
	if got.Count != 1 || got.TotalCount != 0 || len(got.Results) != 1 || got.Index != 40 || got.PageSize != 20 {
		t.Errorf("count %d, total_count %d, %d results, index %d, page_size %d; want 1, 0, 1, 40, 20",
			got.Count, got.TotalCount, len(got.Results), got.Index, got.PageSize)
	}
	golden(t, "curseforge_search", got)
}

func TestCurseForgeSearchDefaults(t *testing.T) {
	u := newUpstream(t)
	s, _ := newService(t, u, nil)
	if _, err := s.SearchCurseForge(t.Context(), url.Values{"sortField": {"3"}, "searchFilter": {""}}); err != nil {
		t.Fatal(err)
	}
	want := url.Values{"gameId": {"432"}, "classId": {"4471"}, "pageSize": {"10"}, "index": {"0"}, "sortField": {"3"}}
	if q := u.last(t).URL.Query().Encode(); q != want.Encode() {
		t.Errorf("upstream query = %s, want %s", q, want.Encode())
	}
}

func TestCurseForgeProjectAndVersions(t *testing.T) {
	u := newUpstream(t)
	s, _ := newService(t, u, nil)
	p, err := s.CurseForgeProject(t.Context(), "238222")
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "curseforge_project", p)
	files, err := s.CurseForgeVersions(t.Context(), "238222", url.Values{"gameVersion": {"1.20.1"}})
	if err != nil {
		t.Fatal(err)
	}
	if q := u.last(t).URL.Query().Encode(); q != "gameVersion=1.20.1&index=0&pageSize=50" {
		t.Errorf("upstream query = %s", q)
	}
	golden(t, "curseforge_versions", files)
	if _, err := s.CurseForgeProject(t.Context(), "999"); !errors.Is(err, ErrNotFound) {
		t.Errorf("CurseForgeProject(999) = %v, want ErrNotFound", err)
	}
}

// TestCurseForgeFileValues: the published File with the values of a real
// Forge mod and of a file whose author forbids third-party downloads.
func TestCurseForgeFileValues(t *testing.T) {
	u := newUpstream(t)
	sha1 := "5C1C4F2AE5BA8A2B4D2BD1A4C9E2B0FD1E1E7D9A" // CurseForge's case kept, ours lower
	u.serveBody("GET /v1/mods/238222/files", fixture(t, "curseforge/files.json", func(v any) {
		f := at(v, "data", 0)
		f["id"], f["modId"], f["fileName"], f["fileLength"] = 4593548, 238222, "jei-1.20.1-forge-15.2.0.27.jar", 1145126
		f["hashes"] = []any{map[string]any{"value": sha1, "algo": 1}, map[string]any{"value": "0f3c5b5b9c1bb8f8d3b3e3a6c0b1d2e4", "algo": 2}}
		f["gameVersions"] = []any{"Forge", "NeoForge", "1.20.1", "Server", "Client", "Java 17"}
		f["dependencies"] = []any{map[string]any{"modId": 306612, "relationType": 3}, map[string]any{"modId": 32274, "relationType": 2}}
		f["downloadUrl"] = nil // the author forbids third-party downloads
		f["serverPackFileId"] = 4712346
		f["isServerPack"] = false
	}))
	s, _ := newService(t, u, nil)
	got, err := s.CurseForgeVersions(t.Context(), "238222", nil)
	if err != nil {
		t.Fatal(err)
	}
	f := got.Results[0]
	if f.ID != 4593548 || f.ProjectID != 238222 || f.Filename != "jei-1.20.1-forge-15.2.0.27.jar" || f.Size != 1145126 {
		t.Errorf("file = %+v", f)
	}
	if f.Hashes.SHA1 == nil || *f.Hashes.SHA1 != strings.ToLower(sha1) || f.Hashes.MD5 == nil || *f.Hashes.MD5 != "0f3c5b5b9c1bb8f8d3b3e3a6c0b1d2e4" {
		t.Errorf("hashes = %v %v, want the sha1 in lower case and the md5", f.Hashes.SHA1, f.Hashes.MD5)
	}
	if !slices.Equal(f.Loaders, []string{"forge", "neoforge"}) || !slices.Equal(f.GameVersions, []string{"1.20.1"}) {
		t.Errorf("loaders %q, game versions %q; want [forge neoforge], [1.20.1]", f.Loaders, f.GameVersions)
	}
	want := []CurseForgeDependency{{ProjectID: 306612, Type: "required"}, {ProjectID: 32274, Type: "optional"}}
	if !slices.Equal(f.Dependencies, want) {
		t.Errorf("dependencies = %+v, want %+v", f.Dependencies, want)
	}
	if f.DownloadURL != nil || f.DownloadNote == nil || !strings.Contains(*f.DownloadNote, "does not allow third-party downloads") {
		t.Errorf("file without downloadUrl: download_url %v, download_note %v; want null and a sentence", f.DownloadURL, f.DownloadNote)
	}
	if f.ServerPackFileID == nil || *f.ServerPackFileID != 4712346 || f.IsServerPack {
		t.Errorf("server_pack_file_id = %v, is_server_pack %v; want 4712346, false", f.ServerPackFileID, f.IsServerPack)
	}
}

func TestModrinthSearch(t *testing.T) {
	u := newUpstream(t)
	s, _ := newService(t, u, nil)
	got, err := s.SearchModrinth(t.Context(), url.Values{
		"query": {"perms"}, "limit": {"5"}, "offset": {"10"}, "index": {"downloads"},
		"project_type": {"plugin"}, "versions": {"1.21.1, 1.21"}, "loaders": {"paper,purpur"},
	})
	if err != nil {
		t.Fatal(err)
	}
	r := u.last(t)
	if r.URL.Path != "/v2/search" {
		t.Errorf("upstream path = %q", r.URL.Path)
	}
	q := r.URL.Query()
	wantFacets := `[["project_type:plugin"],["versions:1.21.1","versions:1.21"],["categories:paper","categories:purpur"]]`
	if q.Get("facets") != wantFacets || q.Get("query") != "perms" || q.Get("limit") != "5" || q.Get("offset") != "10" || q.Get("index") != "downloads" {
		t.Errorf("upstream query = %v, want facets %s, query perms, limit 5, offset 10, index downloads", q, wantFacets)
	}
	if ua := r.Header.Get("User-Agent"); ua != testUA {
		t.Errorf("User-Agent = %q, want %q", ua, testUA)
	}
	if r.Header.Get("X-Api-Key") != "" {
		t.Error("the CurseForge key was sent to Modrinth")
	}
	// The published example: one hit, total_hits 10.
	if got.Count != 1 || got.TotalHits != 10 || got.Offset != 10 || got.Limit != 5 {
		t.Errorf("count %d total_hits %d offset %d limit %d", got.Count, got.TotalHits, got.Offset, got.Limit)
	}
	golden(t, "modrinth_search", got)
}

func TestModrinthVersions(t *testing.T) {
	u := newUpstream(t)
	s, _ := newService(t, u, nil)
	got, err := s.ModrinthProjectVersions(t.Context(), "luckperms", url.Values{
		"loaders": {"paper"}, "game_versions": {"1.21.1,1.21"}, "featured": {"true"},
	})
	if err != nil {
		t.Fatal(err)
	}
	q := u.last(t).URL.Query()
	if q.Get("loaders") != `["paper"]` || q.Get("game_versions") != `["1.21.1","1.21"]` || q.Get("featured") != "true" || q.Get("include_changelog") != "false" {
		t.Errorf("upstream query = %v", q)
	}
	golden(t, "modrinth_versions", got)
	if _, err := s.ModrinthProjectVersions(t.Context(), "nope", nil); !errors.Is(err, ErrNotFound) {
		t.Errorf("versions of an unknown project = %v, want ErrNotFound", err)
	}
}

func TestValidation(t *testing.T) {
	u := newUpstream(t)
	s, _ := newService(t, u, nil)
	ctx := t.Context()
	cf := func(v url.Values) error { _, err := s.SearchCurseForge(ctx, v); return err }
	mr := func(v url.Values) error { _, err := s.SearchModrinth(ctx, v); return err }
	tests := []struct {
		name string
		call func() error
		path string
	}{
		{"cf pageSize 0", func() error { return cf(url.Values{"pageSize": {"0"}}) }, "pageSize"},
		{"cf pageSize 51", func() error { return cf(url.Values{"pageSize": {"51"}}) }, "pageSize"},
		{"cf pageSize text", func() error { return cf(url.Values{"pageSize": {"ten"}}) }, "pageSize"},
		{"cf index negative", func() error { return cf(url.Values{"index": {"-1"}}) }, "index"},
		{"cf index window", func() error { return cf(url.Values{"index": {"9990"}, "pageSize": {"20"}}) }, "index"},
		{"cf index overflow", func() error { return cf(url.Values{"index": {"9223372036854775807"}, "pageSize": {"1"}}) }, "index"},
		{"cf versions overflow", func() error {
			_, err := s.CurseForgeVersions(ctx, "1", url.Values{"index": {"9223372036854775807"}})
			return err
		}, "index"},
		{"cf sortOrder", func() error { return cf(url.Values{"sortOrder": {"up"}}) }, "sortOrder"},
		{"cf sortField 0", func() error { return cf(url.Values{"sortField": {"0"}}) }, "sortField"},
		{"cf sortField 13", func() error { return cf(url.Values{"sortField": {"13"}}) }, "sortField"},
		{"cf sortField name", func() error { return cf(url.Values{"sortField": {"coolness"}}) }, "sortField"},
		{"cf classId", func() error { return cf(url.Values{"classId": {"12"}}) }, "classId"},
		{"cf classId text", func() error { return cf(url.Values{"classId": {"mods"}}) }, "classId"},
		{"cf gameVersion", func() error { return cf(url.Values{"gameVersion": {"1.20/../x"}}) }, "gameVersion"},
		{"cf searchFilter long", func() error { return cf(url.Values{"searchFilter": {strings.Repeat("a", 257)}}) }, "searchFilter"},
		{"cf searchFilter control", func() error { return cf(url.Values{"searchFilter": {"a\x00b"}}) }, "searchFilter"},
		{"cf unknown", func() error { return cf(url.Values{"pagesize": {"5"}}) }, "pagesize"},
		{"cf twice", func() error { return cf(url.Values{"index": {"1", "2"}}) }, "index"},
		{"cf project id", func() error { _, err := s.CurseForgeProject(ctx, "abc"); return err }, "projectId"},
		{"cf project id 0", func() error { _, err := s.CurseForgeProject(ctx, "0"); return err }, "projectId"},
		{"cf versions id", func() error { _, err := s.CurseForgeVersions(ctx, "-5", nil); return err }, "projectId"},
		{"cf versions pageSize", func() error { _, err := s.CurseForgeVersions(ctx, "1", url.Values{"pageSize": {"99"}}); return err }, "pageSize"},
		{"mr limit 0", func() error { return mr(url.Values{"limit": {"0"}}) }, "limit"},
		{"mr limit 101", func() error { return mr(url.Values{"limit": {"101"}}) }, "limit"},
		{"mr offset", func() error { return mr(url.Values{"offset": {"-3"}}) }, "offset"},
		{"mr index", func() error { return mr(url.Values{"index": {"random"}}) }, "index"},
		{"mr project_type", func() error { return mr(url.Values{"project_type": {"world"}}) }, "project_type"},
		{"mr versions", func() error { return mr(url.Values{"versions": {`1.21"]`}}) }, "versions"},
		{"mr loaders", func() error { return mr(url.Values{"loaders": {"Paper!"}}) }, "loaders"},
		{"mr query long", func() error { return mr(url.Values{"query": {strings.Repeat("é", 257)}}) }, "query"},
		{"mr unknown", func() error { return mr(url.Values{"facets": {"[]"}}) }, "facets"},
		{"mr slug", func() error { _, err := s.ModrinthProjectVersions(ctx, "a/b", nil); return err }, "slug"},
		{"mr slug dotdot", func() error { _, err := s.ModrinthProjectVersions(ctx, "..", nil); return err }, "slug"},
		{"mr version dotdot", func() error { _, err := s.ModrinthVersion(ctx, ".."); return err }, "version_id"},
		{"mr featured", func() error {
			_, err := s.ModrinthProjectVersions(ctx, "luckperms", url.Values{"featured": {"yes"}})
			return err
		}, "featured"},
		{"mr game_versions", func() error {
			_, err := s.ModrinthProjectVersions(ctx, "luckperms", url.Values{"game_versions": {"x;y"}})
			return err
		}, "game_versions"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call()
			ve, ok := errors.AsType[*validate.Error](err)
			if !ok {
				t.Fatalf("got %v, want a *validate.Error at %q", err, tt.path)
			}
			if ve.Issues[0].Path != tt.path {
				t.Errorf("issue at %q (%s), want %q", ve.Issues[0].Path, ve.Issues[0].Message, tt.path)
			}
		})
	}
	if n := u.calls.Load(); n != 0 {
		t.Errorf("the upstream was called %d times for invalid requests, want 0", n)
	}
}

func TestCurseForgeNotConfigured(t *testing.T) {
	u := newUpstream(t)
	s, _ := newService(t, u, func(o *Options) { o.CurseForgeKey = "" })
	if s.CurseForgeConfigured() {
		t.Error("CurseForgeConfigured() = true without a key")
	}
	if _, err := s.SearchCurseForge(t.Context(), nil); !errors.Is(err, ErrNotConfigured) {
		t.Errorf("SearchCurseForge = %v, want ErrNotConfigured", err)
	}
	if _, err := s.CurseForgeProject(t.Context(), "1"); !errors.Is(err, ErrNotConfigured) {
		t.Errorf("CurseForgeProject = %v, want ErrNotConfigured", err)
	}
	if _, err := s.CurseForgeVersions(t.Context(), "1", nil); !errors.Is(err, ErrNotConfigured) {
		t.Errorf("CurseForgeVersions = %v, want ErrNotConfigured", err)
	}
	// A bad query is still a validation error.
	if _, err := s.SearchCurseForge(t.Context(), url.Values{"pageSize": {"0"}}); !isValidation(err) {
		t.Errorf("SearchCurseForge(pageSize 0) = %v, want a validation error", err)
	}
	if u.calls.Load() != 0 {
		t.Error("the upstream was called")
	}
}

func isValidation(err error) bool {
	_, ok := errors.AsType[*validate.Error](err)
	return ok
}

func TestUpstreamFailures(t *testing.T) {
	tests := []struct {
		name       string
		handler    http.HandlerFunc
		wantCalls  int64
		wantSleeps []time.Duration
		want       string // in the error's sentence
	}{
		{
			name:       "500 three times",
			handler:    func(w http.ResponseWriter, r *http.Request) { http.Error(w, "secret upstream detail", 500) },
			wantCalls:  3,
			wantSleeps: []time.Duration{250 * time.Millisecond, 500 * time.Millisecond},
			want:       "Modrinth answered HTTP 500 Internal Server Error (3 attempts)",
		},
		{
			name: "429 with a long Retry-After",
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Retry-After", "60")
				w.WriteHeader(http.StatusTooManyRequests)
			},
			wantCalls: 1,
			want:      "Modrinth answered HTTP 429 Too Many Requests and asked to wait 1m0s, longer than Kiln waits",
		},
		{
			name:      "malformed JSON",
			handler:   func(w http.ResponseWriter, r *http.Request) { w.Write([]byte(`{"hits": [`)) },
			wantCalls: 1,
			want:      "Modrinth sent an answer that is not the JSON Kiln expects",
		},
		{
			name:      "wrong JSON type",
			handler:   func(w http.ResponseWriter, r *http.Request) { w.Write([]byte(`{"hits": "none"}`)) },
			wantCalls: 1,
			want:      "not the JSON Kiln expects",
		},
		{
			name:      "400",
			handler:   func(w http.ResponseWriter, r *http.Request) { http.Error(w, "bad", 400) },
			wantCalls: 1,
			want:      "Modrinth answered HTTP 400 Bad Request",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u := newUpstream(t)
			u.handle("GET /v2/search", tt.handler)
			s, clock := newService(t, u, nil)
			_, err := s.SearchModrinth(t.Context(), nil)
			if !errors.Is(err, ErrUpstream) {
				t.Fatalf("SearchModrinth = %v, want ErrUpstream", err)
			}
			if !strings.Contains(err.Error(), tt.want) || strings.Contains(err.Error(), "secret") {
				t.Errorf("error = %q, want it to contain %q and nothing of the upstream's body", err, tt.want)
			}
			if n := u.calls.Load(); n != tt.wantCalls {
				t.Errorf("upstream calls = %d, want %d", n, tt.wantCalls)
			}
			if got := clock.Sleeps(); len(tt.wantSleeps) > 0 && !equalDurations(got, tt.wantSleeps) {
				t.Errorf("waits = %v, want %v", got, tt.wantSleeps)
			}
			// Failures are not cached.
			_, _ = s.SearchModrinth(t.Context(), nil)
			if n := u.calls.Load(); n <= tt.wantCalls {
				t.Errorf("a failed answer was cached: %d calls after a second request", n)
			}
		})
	}
}

func equalDurations(a, b []time.Duration) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestRetryAfter(t *testing.T) {
	u := newUpstream(t)
	var n int
	u.handle("GET /v1/mods/search", func(w http.ResponseWriter, r *http.Request) {
		n++
		switch n {
		case 1:
			w.Header().Set("Retry-After", "2")
			w.WriteHeader(http.StatusTooManyRequests)
		case 2:
			w.Header().Set("Retry-After", time.Date(2026, 11, 23, 12, 0, 5, 0, time.UTC).Format(http.TimeFormat))
			w.WriteHeader(http.StatusServiceUnavailable)
		default:
			w.Write([]byte(`{"data":[],"pagination":{"index":0,"pageSize":10,"resultCount":0,"totalCount":0}}`))
		}
	})
	s, clock := newService(t, u, nil)
	got, err := s.SearchCurseForge(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	// 2 s from the first Retry-After; the date is 5 s after the start,
	// and 2 s have passed.
	if want := []time.Duration{2 * time.Second, 3 * time.Second}; !equalDurations(clock.Sleeps(), want) {
		t.Errorf("waits = %v, want %v", clock.Sleeps(), want)
	}
	if got.Count != 0 || got.Results == nil || len(got.Results) != 0 {
		t.Errorf("empty result = %+v, want count 0 and results []", got)
	}
	golden(t, "curseforge_empty", got)
}

func TestModrinth429UsesRateLimitReset(t *testing.T) {
	u := newUpstream(t)
	var n int
	u.handle("GET /v2/search", func(w http.ResponseWriter, r *http.Request) {
		n++
		if n == 1 {
			w.Header().Set("X-Ratelimit-Limit", "300")
			w.Header().Set("X-Ratelimit-Remaining", "0")
			w.Header().Set("X-Ratelimit-Reset", "4")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		w.Write([]byte(`{"hits":[],"offset":0,"limit":10,"total_hits":0}`))
	})
	s, clock := newService(t, u, nil)
	got, err := s.SearchModrinth(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if !equalDurations(clock.Sleeps(), []time.Duration{4 * time.Second}) {
		t.Errorf("waits = %v, want [4s]", clock.Sleeps())
	}
	golden(t, "modrinth_empty", got)
}

func TestTimeout(t *testing.T) {
	u := newUpstream(t)
	u.handle("GET /v2/search", func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
	s, _ := newService(t, u, func(o *Options) { o.Timeout = 50 * time.Millisecond; o.Attempts = 2 })
	_, err := s.SearchModrinth(t.Context(), nil)
	if !errors.Is(err, ErrUpstream) || !strings.Contains(err.Error(), "Modrinth did not answer within 50ms (2 attempts)") {
		t.Errorf("SearchModrinth = %v, want ErrUpstream, did not answer within 50ms (2 attempts)", err)
	}
	if n := u.calls.Load(); n != 2 {
		t.Errorf("upstream calls = %d, want 2", n)
	}
}

func TestBadKey(t *testing.T) {
	u := newUpstream(t)
	u.handle("GET /v1/mods/search", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusForbidden) })
	s, _ := newService(t, u, nil)
	_, err := s.SearchCurseForge(t.Context(), nil)
	if !errors.Is(err, ErrUpstream) || !strings.Contains(err.Error(), "refused Kiln's API key") || strings.Contains(err.Error(), testKey) {
		t.Errorf("SearchCurseForge with a refused key = %v", err)
	}
	if u.calls.Load() != 1 {
		t.Errorf("a 403 was retried: %d calls", u.calls.Load())
	}
}

func TestCache(t *testing.T) {
	u := newUpstream(t)
	s, clock := newService(t, u, nil)
	q := url.Values{"query": {"perms"}}
	a, err := s.SearchModrinth(t.Context(), q)
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.SearchModrinth(t.Context(), url.Values{"query": {"perms"}, "index": {"relevance"}})
	if err != nil {
		t.Fatal(err)
	}
	if u.calls.Load() != 1 || a.TotalHits != b.TotalHits {
		t.Errorf("upstream calls after two identical searches = %d, want 1", u.calls.Load())
	}
	if _, err := s.SearchModrinth(t.Context(), url.Values{"query": {"other"}}); err != nil {
		t.Fatal(err)
	}
	if u.calls.Load() != 2 {
		t.Errorf("upstream calls after a different search = %d, want 2", u.calls.Load())
	}
	clock.Advance(5*time.Minute - time.Second)
	if _, err := s.SearchModrinth(t.Context(), q); err != nil || u.calls.Load() != 2 {
		t.Errorf("within the TTL: err %v, calls %d; want a cache hit", err, u.calls.Load())
	}
	clock.Advance(time.Second)
	if _, err := s.SearchModrinth(t.Context(), q); err != nil || u.calls.Load() != 3 {
		t.Errorf("after the TTL: err %v, calls %d; want a new upstream call", err, u.calls.Load())
	}
}

func TestCacheBounds(t *testing.T) {
	clock := &fakeClock{now: time.Unix(0, 0)}
	c := newCache(time.Minute, 3, 1000, clock.Now)
	for i, k := range []string{"a", "b", "c", "d"} {
		c.put(k, i, 10)
	}
	if _, ok := c.get("a"); ok || c.len() != 3 {
		t.Errorf("after 4 puts into 3 entries: a cached %v, len %d; want the oldest out", ok, c.len())
	}
	c.get("b") // b is now the most recent
	c.put("big", 0, 980)
	_, hasB := c.get("b")
	_, hasC := c.get("c")
	_, hasD := c.get("d")
	if !hasB || hasC || hasD {
		t.Errorf("after passing the byte bound: b %v, c %v, d %v; want the least recently used (c, d) out and b kept", hasB, hasC, hasD)
	}
	if _, ok := c.get("big"); !ok {
		t.Error("the newest entry was evicted")
	}
	c.put("huge", 0, 2000)
	if _, ok := c.get("huge"); ok {
		t.Error("an entry larger than the whole cache was kept")
	}
}

func TestConcurrentIdentical(t *testing.T) {
	u := newUpstream(t)
	const n = 50
	var started sync.WaitGroup
	started.Add(n)
	allStarted := make(chan struct{})
	go func() { started.Wait(); close(allStarted) }()
	u.handle("GET /v1/mods/search", func(w http.ResponseWriter, r *http.Request) {
		<-allStarted
		w.Write([]byte(`{"data":[],"pagination":{"index":0,"pageSize":10,"resultCount":0,"totalCount":7}}`))
	})
	s, _ := newService(t, u, nil)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for range n {
		wg.Go(func() {
			started.Done()
			r, err := s.SearchCurseForge(t.Context(), url.Values{"searchFilter": {"same"}})
			if err == nil && r.TotalCount != 7 {
				err = errors.New("wrong answer")
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if c := u.calls.Load(); c != 1 {
		t.Errorf("%d concurrent identical searches made %d upstream calls, want 1", n, c)
	}
}

// TestCallerLeaves: a caller whose context ends gets its error at once;
// the shared call goes on for the others.
func TestCallerLeaves(t *testing.T) {
	u := newUpstream(t)
	release := make(chan struct{})
	u.handle("GET /v2/search", func(w http.ResponseWriter, r *http.Request) {
		<-release
		w.Write([]byte(`{"hits":[],"offset":0,"limit":10,"total_hits":3}`))
	})
	s, _ := newService(t, u, nil)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := s.SearchModrinth(ctx, nil); !errors.Is(err, context.Canceled) {
		t.Errorf("canceled caller = %v, want context.Canceled", err)
	}
	close(release)
	got, err := s.SearchModrinth(t.Context(), nil)
	if err != nil || got.TotalHits != 3 {
		t.Errorf("second caller = %+v, %v", got, err)
	}
}

func TestLimiter(t *testing.T) {
	clock := &fakeClock{now: time.Unix(0, 0)}
	l := newLimiter(300, clock.Now, func(ctx context.Context, d time.Duration) error {
		clock.mu.Lock()
		clock.sleeps = append(clock.sleeps, d)
		clock.mu.Unlock()
		return nil
	})
	for range 300 {
		if err := l.wait(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	// Every request is asked for at the same instant: the 20 of the burst
	// go at once, the rest wait their turn, and the 300th waits a whole
	// minute, so no minute holds more than 300.
	s := clock.Sleeps()
	if len(s) != 280 {
		t.Fatalf("%d requests waited, want 280 (the burst is 20)", len(s))
	}
	if last := s[len(s)-1]; last < 59*time.Second || last > 61*time.Second {
		t.Errorf("the 300th request waited %v, want 60s", last)
	}
	for i := 1; i < len(s); i++ {
		if s[i] <= s[i-1] {
			t.Fatalf("wait %d (%v) is not after wait %d (%v): waiters are not served in order", i, s[i], i-1, s[i-1])
		}
	}
}

func TestNewRefusesBadBaseURL(t *testing.T) {
	for _, raw := range []string{"ftp://x", "api.modrinth.com", "https://u:p@x", "https://x/?q=1"} {
		if _, err := New(loopback(), Options{ModrinthURL: raw}); err == nil {
			t.Errorf("New(ModrinthURL %q) succeeded, want an error", raw)
		}
	}
}

func TestPrivateAddressRefused(t *testing.T) {
	u := newUpstream(t)
	s, err := New(netguardDefault(), Options{ModrinthURL: u.srv.URL, Attempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	_, err = s.SearchModrinth(t.Context(), nil)
	want := "Modrinth could not be reached: its address is private or local, which Kiln refuses unless --pull-allow-cidr allows it"
	if !errors.Is(err, ErrUpstream) || err.Error() != want {
		t.Errorf("a loopback upstream without an allow list = %v, want ErrUpstream, %q", err, want)
	}
	if u.calls.Load() != 0 {
		t.Error("the loopback upstream was reached")
	}
}

// TestUnreachableSaysWhy: a catalog whose port refuses connections is
// named as such in the error the user sees (the whole error is logged).
func TestUnreachableSaysWhy(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	s, err := New(loopback(), Options{ModrinthURL: "http://" + addr, Attempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	_, err = s.SearchModrinth(t.Context(), nil)
	want := "Modrinth could not be reached: the connection was refused"
	if !errors.Is(err, ErrUpstream) || err.Error() != want {
		t.Errorf("SearchModrinth of a closed port = %v, want ErrUpstream, %q", err, want)
	}
}

// TestCurseForgeSearchHits: a hit sums up the project's latest files as
// distinct game versions and loaders, in CurseForge's order.
func TestCurseForgeSearchHits(t *testing.T) {
	u := newUpstream(t)
	fullPage(t, u)
	s, _ := newService(t, u, nil)
	got, err := s.SearchCurseForge(t.Context(), url.Values{"pageSize": {"2"}})
	if err != nil {
		t.Fatal(err)
	}
	if got.Count != 2 || got.TotalCount != 5000 {
		t.Fatalf("count %d, total_count %d; want 2, 5000", got.Count, got.TotalCount)
	}
	h := got.Results[0]
	wantGV := []string{"1.20.0", "1.20.1", "1.20.2", "1.20.3", "1.20.4", "1.20.5", "1.20.6"}
	wantL := []string{"forge", "cauldron", "liteloader", "fabric", "quilt", "neoforge"}
	if h.ID != 238222 || h.Kind != "mod" || !slices.Equal(h.GameVersions, wantGV) || !slices.Equal(h.Loaders, wantL) {
		t.Errorf("hit = id %d kind %s game_versions %q loaders %q; want 238222 mod %q %q", h.ID, h.Kind, h.GameVersions, h.Loaders, wantGV, wantL)
	}
	if unsafe.StringData(got.Results[0].GameVersions[0]) != unsafe.StringData(got.Results[1].GameVersions[0]) {
		t.Error("the hits of a page do not share their game versions' strings")
	}
}
