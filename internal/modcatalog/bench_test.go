package modcatalog

import (
	"encoding/json"
	"net/http"
	"net/url"
	"os"
	"runtime"
	"strconv"
	"testing"
)

// fullPage serves CurseForge searches with pageSize copies of the
// documented Mod (each with its latest file), the size of a real page.
func fullPage(t testing.TB, u *upstreamStub) {
	raw, err := os.ReadFile("testdata/curseforge/mod.json")
	if err != nil {
		t.Fatal(err)
	}
	var one struct {
		Data json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(raw, &one); err != nil {
		t.Fatal(err)
	}
	u.handle("GET /v1/mods/search", func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(r.URL.Query().Get("pageSize"))
		mods := make([]json.RawMessage, n)
		for i := range mods {
			mods[i] = one.Data
		}
		json.NewEncoder(w).Encode(map[string]any{
			"data":       mods,
			"pagination": map[string]int{"index": 0, "pageSize": n, "resultCount": n, "totalCount": 5000},
		})
	})
}

// BenchmarkCachedSearch measures a CurseForge search answered from the
// cache, validation included (the acceptance bound is 1 ms).
func BenchmarkCachedSearch(b *testing.B) {
	u := newUpstream(b)
	fullPage(b, u)
	s, _ := newService(b, u, nil)
	q := url.Values{"searchFilter": {"jei"}, "classId": {"6"}, "pageSize": {"10"}}
	if _, err := s.SearchCurseForge(b.Context(), q); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.SearchCurseForge(b.Context(), q); err != nil {
			b.Fatal(err)
		}
	}
	if u.calls.Load() != 1 {
		b.Fatalf("upstream calls = %d, want 1", u.calls.Load())
	}
}

// TestCachedSearchSpeed holds the 1 ms bound with a wide margin: the
// median of 200 cached searches (testing.Benchmark gives the mean).
func TestCachedSearchSpeed(t *testing.T) {
	if testing.Short() {
		t.Skip("measures")
	}
	r := testing.Benchmark(BenchmarkCachedSearch)
	per := r.NsPerOp()
	t.Logf("cached search: %d ns/op, %d B/op, %d allocs/op", per, r.AllocedBytesPerOp(), r.AllocsPerOp())
	if per > 1_000_000 {
		t.Errorf("a cached search took %d ns, want under 1 ms", per)
	}
}

// TestCacheMemory fills the cache with 1,000 distinct searches of 10 full
// results each and measures the live heap they hold (bound: 20 MiB).
func TestCacheMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("measures")
	}
	u := newUpstream(t)
	fullPage(t, u)
	s, _ := newService(t, u, nil)
	heap := func() uint64 {
		runtime.GC()
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	before := heap()
	for i := range 1000 {
		if _, err := s.SearchCurseForge(t.Context(), url.Values{"searchFilter": {"mod " + strconv.Itoa(i)}}); err != nil {
			t.Fatal(err)
		}
	}
	u.mu.Lock()
	u.reqs = nil // the stub's record of requests is not the cache's
	u.mu.Unlock()
	after := heap()
	if s.cache.len() != 1000 {
		t.Fatalf("cache holds %d entries, want 1000", s.cache.len())
	}
	used := int64(after) - int64(before)
	t.Logf("1,000 cached searches of 10 results: %.2f MiB live heap (%d bytes/entry); accounted %.2f MiB", float64(used)/(1<<20), used/1000, float64(s.cache.bytes)/(1<<20))
	if used > 20<<20 {
		t.Errorf("1,000 cached searches hold %d bytes, want under 20 MiB", used)
	}
	runtime.KeepAlive(s)
}
