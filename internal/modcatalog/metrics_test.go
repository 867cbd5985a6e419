package modcatalog

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kilnhq/kiln/internal/metrics"
)

// TestMetrics: each upstream request is counted by catalog and outcome
// (retries included) and timed; each cache lookup is a hit or a miss.
// The series are read from a real registry's /metrics answer.
func TestMetrics(t *testing.T) {
	u := newUpstream(t)
	u.handle("GET /v2/project/broken/version", func(w http.ResponseWriter, r *http.Request) { http.Error(w, "boom", 500) })
	u.handle("GET /v1/mods/7", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte(`{"data": [`)) })
	m := metrics.New()
	s, _ := newService(t, u, func(o *Options) { o.Metrics = m.Catalog() })
	ctx := t.Context()
	for range 2 { // a miss, then a hit
		if _, err := s.SearchModrinth(ctx, url.Values{"query": {"x"}}); err != nil {
			t.Fatal(err)
		}
	}
	_, _ = s.ModrinthProjectVersions(ctx, "broken", nil) // 500 three times
	_, _ = s.ModrinthProjectVersions(ctx, "nope", nil)   // 404
	_, _ = s.CurseForgeProject(ctx, "7")                 // malformed JSON
	if _, err := s.SearchCurseForge(ctx, nil); err != nil {
		t.Fatal(err)
	}

	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Result().Body)
	var got []string
	for line := range strings.Lines(string(body)) {
		if strings.HasPrefix(line, "kiln_catalog_") && !strings.Contains(line, "_bucket") && !strings.Contains(line, "_sum") {
			got = append(got, strings.TrimSpace(line))
		}
	}
	want := []string{
		`kiln_catalog_cache_lookups_total{catalog="curseforge",result="miss"} 2`,
		`kiln_catalog_cache_lookups_total{catalog="modrinth",result="hit"} 1`,
		`kiln_catalog_cache_lookups_total{catalog="modrinth",result="miss"} 3`,
		`kiln_catalog_upstream_request_duration_seconds_count{catalog="curseforge"} 2`,
		`kiln_catalog_upstream_request_duration_seconds_count{catalog="modrinth"} 5`,
		`kiln_catalog_upstream_requests_total{catalog="curseforge",outcome="invalid_answer"} 1`,
		`kiln_catalog_upstream_requests_total{catalog="curseforge",outcome="ok"} 1`,
		`kiln_catalog_upstream_requests_total{catalog="modrinth",outcome="not_found"} 1`,
		`kiln_catalog_upstream_requests_total{catalog="modrinth",outcome="ok"} 1`,
		`kiln_catalog_upstream_requests_total{catalog="modrinth",outcome="server_error"} 3`,
	}
	if !slices.Equal(got, want) {
		t.Errorf("catalog series:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestOutcomes: the outcome label of each way an attempt ends.
func TestOutcomes(t *testing.T) {
	for _, tc := range []struct {
		name, want string
		h          http.HandlerFunc
	}{
		{"429", OutcomeRateLimited, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Retry-After", "3600")
			w.WriteHeader(429)
		}},
		{"403", OutcomeRefused, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(403) }},
		{"400", OutcomeClientError, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(400) }},
		{"timeout", OutcomeTimeout, func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }},
		{"too large", OutcomeInvalidAnswer, func(w http.ResponseWriter, r *http.Request) {
			w.Write([]byte(`{"hits":"` + strings.Repeat("x", maxBody) + `"}`))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := newUpstream(t)
			u.handle("GET /v2/search", tc.h)
			m := metrics.New()
			// Only the timeout case needs a short timeout: 8 MiB of a too large
			// answer can take longer than that on a busy machine.
			timeout := 30 * time.Second
			if tc.want == OutcomeTimeout {
				timeout = 100 * time.Millisecond
			}
			s, _ := newService(t, u, func(o *Options) { o.Metrics = m.Catalog(); o.Attempts = 1; o.Timeout = timeout })
			if _, err := s.SearchModrinth(t.Context(), nil); err == nil {
				t.Fatal("SearchModrinth succeeded")
			}
			rec := httptest.NewRecorder()
			m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
			want := `kiln_catalog_upstream_requests_total{catalog="modrinth",outcome="` + tc.want + `"} 1`
			if !strings.Contains(rec.Body.String(), want+"\n") {
				t.Errorf("/metrics lacks %s", want)
			}
		})
	}
}
