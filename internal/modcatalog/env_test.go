package modcatalog

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kilnhq/kiln/internal/netguard"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden")

const (
	testKey = "test-key-$2a$10$abc"
	testUA  = "kilnhq/kiln/1.2.3 (ops@example.test)"
)

// upstreamStub serves the catalogs' published example answers from
// testdata (see testdata/README.md) on a loopback httptest server and
// records what it received.
type upstreamStub struct {
	srv   *httptest.Server
	mux   *http.ServeMux
	calls atomic.Int64
	mu    sync.Mutex
	reqs  []*http.Request
	over  map[string]http.HandlerFunc // "GET /path" → handler, before mux
}

func newUpstream(t testing.TB) *upstreamStub {
	t.Helper()
	u := &upstreamStub{mux: http.NewServeMux()}
	serve := func(pattern, file string) {
		u.mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
			body, err := os.ReadFile(filepath.Join("testdata", file))
			if err != nil {
				t.Errorf("fixture %s: %v", file, err)
			}
			w.Header().Set("Content-Type", "application/json")
			w.Write(body)
		})
	}
	serve("GET /v1/mods/search", "curseforge/search.json")
	serve("GET /v1/mods/238222", "curseforge/mod.json")
	serve("GET /v1/mods/238222/files", "curseforge/files.json")
	serve("GET /v1/mods/238222/files/4593548", "curseforge/file.json")
	serve("GET /v2/search", "modrinth/search.json")
	serve("GET /v2/project/luckperms/version", "modrinth/versions.json")
	serve("GET /v2/version/OrIs0S6b", "modrinth/version.json")
	serve("GET /v2/project/luckperms", "modrinth/project.json")
	u.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.calls.Add(1)
		u.mu.Lock()
		u.reqs = append(u.reqs, r.Clone(context.Background()))
		h := u.over[r.Method+" "+r.URL.Path]
		u.mu.Unlock()
		if h != nil {
			h(w, r)
			return
		}
		u.mux.ServeHTTP(w, r)
	}))
	t.Cleanup(u.srv.Close)
	return u
}

// handle replaces what "METHOD /path" answers.
func (u *upstreamStub) handle(pattern string, h http.HandlerFunc) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.over == nil {
		u.over = map[string]http.HandlerFunc{}
	}
	u.over[pattern] = h
}

// last is the last request received.
func (u *upstreamStub) last(t *testing.T) *http.Request {
	t.Helper()
	u.mu.Lock()
	defer u.mu.Unlock()
	if len(u.reqs) == 0 {
		t.Fatal("the upstream received no request")
	}
	return u.reqs[len(u.reqs)-1]
}

// fakeClock is the services' clock and sleep: sleeping advances it.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	sleeps []time.Duration
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Sleep(ctx context.Context, d time.Duration) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sleeps = append(c.sleeps, d)
	c.now = c.now.Add(d)
	return ctx.Err()
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func (c *fakeClock) Sleeps() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Duration(nil), c.sleeps...)
}

// loopback allows the test upstreams on 127.0.0.1 and nothing else.
func loopback() *netguard.Policy {
	return netguard.NewPolicy([]netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}, nil)
}

// newService returns a Service whose catalogs are u, with a fake clock.
func newService(t testing.TB, u *upstreamStub, mod func(*Options)) (*Service, *fakeClock) {
	t.Helper()
	clock := &fakeClock{now: time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)}
	o := Options{
		CurseForgeURL: u.srv.URL, ModrinthURL: u.srv.URL, CurseForgeKey: testKey, UserAgent: testUA,
		Now: clock.Now, Sleep: clock.Sleep,
	}
	if mod != nil {
		mod(&o)
	}
	s, err := New(loopback(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s, clock
}

// golden compares v, as the API would write it, with testdata/name.golden.
func golden(t *testing.T, name string, v any) {
	t.Helper()
	got, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	got = append(got, '\n')
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./internal/modcatalog -update)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from %s:\n%s", name, path, got)
	}
}

// netguardDefault refuses every private address, as kiln serve does
// without --pull-allow-cidr.
func netguardDefault() *netguard.Policy { return netguard.NewPolicy(nil, nil) }

// fixture is testdata/name, a published example answer, with edit applied
// to its decoded JSON (nil: unchanged). Tests that need other values than
// the example's change them here, in sight.
func fixture(t testing.TB, name string, edit func(v any)) []byte {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	if edit == nil {
		return raw
	}
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatal(err)
	}
	edit(v)
	out, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// at walks v by object keys (string) and array indexes (int) to an object.
func at(v any, path ...any) map[string]any {
	for _, p := range path {
		switch k := p.(type) {
		case string:
			v = v.(map[string]any)[k]
		case int:
			v = v.([]any)[k]
		}
	}
	return v.(map[string]any)
}

// serveBody makes u answer pattern with body.
func (u *upstreamStub) serveBody(pattern string, body []byte) {
	u.handle(pattern, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write(body)
	})
}
