package modcatalog

import (
	"encoding/json"
	"net/http"
	"net/url"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// fullPage serves CurseForge searches with pageSize copies of the
// published Mod given the lengths of a popular mod's page: a 120-character
// summary, real-length names and URLs, 3 categories, 2 authors, and 40
// latestFilesIndexes (one per game version and loader).
func fullPage(t testing.TB, u *upstreamStub) {
	var one struct {
		Data json.RawMessage `json:"data"`
	}
	raw := fixture(t, "curseforge/mod.json", func(v any) {
		m := at(v, "data")
		m["id"], m["gameId"], m["classId"], m["name"], m["slug"] = 238222, 432, 6, "Just Enough Items (JEI)", "jei"
		m["summary"] = strings.Repeat("View items and recipes. ", 5)
		m["links"] = map[string]any{"websiteUrl": "https://www.curseforge.com/minecraft/mc-mods/jei", "wikiUrl": "",
			"issuesUrl": "https://github.com/mezz/JustEnoughItems/issues", "sourceUrl": "https://github.com/mezz/JustEnoughItems"}
		cat := at(v, "data", "categories", 0)
		cat["name"], cat["url"] = "API and Library", "https://www.curseforge.com/minecraft/mc-mods/library-api"
		m["categories"] = []any{cat, cat, cat}
		a := at(v, "data", "authors", 0)
		a["name"], a["url"] = "mezz", "https://www.curseforge.com/members/17072262-mezz?username=mezz"
		m["authors"] = []any{a, a}
		logo := at(v, "data", "logo")
		logo["url"] = "https://media.forgecdn.net/avatars/29/69/635838945588716414.jpeg"
		var idx []any
		for i := range 40 {
			idx = append(idx, map[string]any{"gameVersion": "1.20." + strconv.Itoa(i%7), "fileId": 4593548 + i,
				"filename": "jei-1.20.1-forge-15.2.0." + strconv.Itoa(i) + ".jar", "releaseType": 1, "gameVersionTypeId": 75125, "modLoader": 1 + i%6})
		}
		m["latestFilesIndexes"] = idx
	})
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

// BenchmarkCachedSearch measures a CurseForge search of 10 full results
// answered from the cache, validation included, and reports the median
// and p99 of the calls (target: p99 under 1 ms; bench/catalogs.sh).
func BenchmarkCachedSearch(b *testing.B) {
	u := newUpstream(b)
	fullPage(b, u)
	s, _ := newService(b, u, nil)
	q := url.Values{"searchFilter": {"jei"}, "classId": {"6"}, "pageSize": {"10"}}
	if _, err := s.SearchCurseForge(b.Context(), q); err != nil {
		b.Fatal(err)
	}
	var took []time.Duration
	b.ReportAllocs()
	for b.Loop() {
		start := time.Now()
		if _, err := s.SearchCurseForge(b.Context(), q); err != nil {
			b.Fatal(err)
		}
		took = append(took, time.Since(start))
	}
	if u.calls.Load() != 1 {
		b.Fatalf("upstream calls = %d, want 1", u.calls.Load())
	}
	slices.Sort(took)
	b.ReportMetric(float64(took[len(took)/2].Nanoseconds()), "p50-ns")
	b.ReportMetric(float64(took[len(took)*99/100].Nanoseconds()), "p99-ns")
}

// BenchmarkCacheMemory fills the cache with 1,000 distinct searches of 10
// results each (fullPage: a popular mod's page) and reports the live heap
// they hold (target: under 20 MiB) and the bytes the cache accounts.
func BenchmarkCacheMemory(b *testing.B) {
	heap := func() uint64 {
		runtime.GC()
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	for range b.N {
		b.StopTimer()
		u := newUpstream(b)
		fullPage(b, u)
		s, _ := newService(b, u, nil) // the defaults: 2,000 entries, 64 MiB
		before := heap()
		acc0 := s.cache.bytes
		b.StartTimer()
		for i := range 1000 {
			if _, err := s.SearchCurseForge(b.Context(), url.Values{"searchFilter": {"mod " + strconv.Itoa(i)}}); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		u.mu.Lock()
		u.reqs = nil // the stub's record of requests is not the cache's
		u.mu.Unlock()
		used := int64(heap()) - int64(before)
		if s.cache.len() != 1000 {
			b.Fatalf("cache holds %d entries, want 1000", s.cache.len())
		}
		b.ReportMetric(float64(used)/(1<<20), "MiB/1000-entries")
		b.ReportMetric(float64(used)/1000, "B/entry")
		b.ReportMetric(float64(s.cache.bytes-acc0)/1000, "accounted-B/entry")
		runtime.KeepAlive(s)
		s.Close()
	}
}
