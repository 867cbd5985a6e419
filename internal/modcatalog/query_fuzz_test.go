package modcatalog

import (
	"encoding/json"
	"errors"
	"maps"
	"net/url"
	"path"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/kilnhq/kiln/internal/validate"
)

// FuzzCatalogQuery: whatever the query string and path identifier, the
// four catalog endpoints' validation answers without panicking, twice
// the same, and either a *validate.Error naming only parameters (never an
// upstream call) or an upstream query inside CurseForge's and Modrinth's
// documented bounds, whose path stays where it was meant to go.
func FuzzCatalogQuery(f *testing.F) {
	for _, s := range []struct {
		endpoint uint8
		query    string
		id       string
	}{
		{0, "searchFilter=jei&classId=6&gameVersion=1.20.1&sortField=totalDownloads&sortOrder=desc&pageSize=20&index=40", ""},
		{0, "pageSize=0", ""},
		{0, "pageSize=51&index=-1&sortOrder=up&sortField=13&classId=12", ""},
		{0, "index=9990&pageSize=20", ""},
		{0, "index=9223372036854775807&pageSize=1", ""}, // index+pageSize overflowed past the 10,000 rule
		{0, "pageSize=%2B5&sortField=%2B6", ""},
		{0, "searchFilter=a%00b&gameVersion=1.20%2F..%2Fx", ""},
		{0, "pagesize=5&index=1&index=2", ""},
		{1, "gameVersion=1.21.4&pageSize=50&index=9950", "238222"},
		{1, "", "-5"},
		{1, "", "9007199254740993"},
		{2, "query=perms&limit=5&offset=10&index=downloads&project_type=plugin&versions=1.21.1,%201.21&loaders=paper,purpur", ""},
		{2, "limit=101&offset=-3&index=random&project_type=world", ""},
		{2, "versions=1.21%22%5D&loaders=Paper!", ""},
		{2, "facets=%5B%5D", ""},
		{3, "loaders=paper&game_versions=1.21.1,1.21&featured=true", "luckperms"},
		{3, "featured=yes&game_versions=x;y", "a/b"},
		{3, "", ".."}, // was accepted, and the upstream path became /v2/version
		{3, "", "..."},
		{3, "", "%2e%2e"},
	} {
		f.Add(s.endpoint, s.query, s.id)
	}
	f.Fuzz(func(t *testing.T, endpoint uint8, raw, id string) {
		v, _ := url.ParseQuery(raw) // what net/http gives a handler
		var (
			up      url.Values
			upPath  string
			allowed []string
			err     error
		)
		check := func() { t.Helper() }
		switch endpoint % 4 {
		case 0:
			allowed = []string{"searchFilter", "classId", "gameVersion", "sortField", "sortOrder", "pageSize", "index"}
			var index, size int
			up, index, size, err = curseForgeSearchQuery(v)
			upPath = "/v1/mods/search"
			check = func() {
				t.Helper()
				if up.Get("gameId") != "432" || !slices.Contains([]string{"6", "4471", "5"}, up.Get("classId")) {
					t.Fatalf("gameId %q, classId %q", up.Get("gameId"), up.Get("classId"))
				}
				curseForgeWindow(t, up, index, size)
				if so := up.Get("sortOrder"); so != "" && so != "asc" && so != "desc" {
					t.Fatalf("sortOrder %q", so)
				}
				if sf, ok := up["sortField"]; ok {
					if n, err := strconv.Atoi(sf[0]); err != nil || n < 1 || n > 12 || sf[0] != strconv.Itoa(n) {
						t.Fatalf("sortField %q", sf)
					}
				}
				text(t, up.Get("searchFilter"))
				if gv, ok := up["gameVersion"]; ok && !gameVersionRe.MatchString(gv[0]) {
					t.Fatalf("gameVersion %q", gv)
				}
			}
		case 1:
			allowed = []string{"gameVersion", "pageSize", "index"}
			var pid int64
			var index, size int
			pid, up, index, size, err = curseForgeFilesQuery(id, v)
			upPath = "/v1/mods/" + strconv.FormatInt(pid, 10) + "/files"
			check = func() {
				t.Helper()
				if pid <= 0 || strconv.FormatInt(pid, 10) != strings.TrimLeft(strings.TrimPrefix(id, "+"), "0") {
					t.Fatalf("project id %d from %q", pid, id)
				}
				curseForgeWindow(t, up, index, size)
			}
		case 2:
			allowed = []string{"query", "limit", "offset", "index", "project_type", "versions", "loaders"}
			var limit, offset int
			up, limit, offset, err = modrinthSearchQuery(v)
			upPath = "/v2/search"
			check = func() {
				t.Helper()
				if limit < 1 || limit > 100 || up.Get("limit") != strconv.Itoa(limit) || offset < 0 || up.Get("offset") != strconv.Itoa(offset) {
					t.Fatalf("limit %d offset %d, upstream %v", limit, offset, up)
				}
				if !slices.Contains([]string{"relevance", "downloads", "follows", "newest", "updated"}, up.Get("index")) {
					t.Fatalf("index %q", up.Get("index"))
				}
				text(t, up.Get("query"))
				if fs, ok := up["facets"]; ok {
					var facets [][]string
					if err := json.Unmarshal([]byte(fs[0]), &facets); err != nil || len(facets) == 0 {
						t.Fatalf("facets %q: %v", fs, err)
					}
					for _, or := range facets {
						for _, f := range or {
							k, val, _ := strings.Cut(f, ":")
							if !slices.Contains([]string{"project_type", "versions", "categories"}, k) || val == "" || strings.ContainsAny(val, `"[],:`) {
								t.Fatalf("facet %q", f)
							}
						}
					}
				}
			}
		case 3:
			allowed = []string{"loaders", "game_versions", "featured"}
			upPath, up, err = modrinthVersionsQuery(id, v)
			check = func() {
				t.Helper()
				rest, ok := strings.CutPrefix(upPath, "/v2/project/")
				seg, ok2 := strings.CutSuffix(rest, "/version")
				if !ok || !ok2 || seg == "" || strings.Contains(seg, "/") || path.Clean(upPath) != upPath {
					t.Fatalf("upstream path %q from %q", upPath, id)
				}
				for _, k := range []string{"loaders", "game_versions"} {
					if l, ok := up[k]; ok {
						var items []string
						if err := json.Unmarshal([]byte(l[0]), &items); err != nil || len(items) == 0 || len(items) > maxList {
							t.Fatalf("%s %q: %v", k, l, err)
						}
					}
				}
				if f, ok := up["featured"]; ok && f[0] != "true" && f[0] != "false" {
					t.Fatalf("featured %q", f)
				}
				if up.Get("include_changelog") != "false" {
					t.Fatalf("include_changelog %q", up.Get("include_changelog"))
				}
			}
		}
		if err != nil {
			ve, ok := errors.AsType[*validate.Error](err)
			if !ok || len(ve.Issues) == 0 {
				t.Fatalf("error %v (%T), want a *validate.Error with issues", err, err)
			}
			for _, is := range ve.Issues {
				if is.Message == "" || !(slices.Contains(allowed, is.Path) || is.Path == "projectId" || is.Path == "slug" || v.Has(is.Path)) {
					t.Fatalf("issue %q: %q names no parameter", is.Path, is.Message)
				}
			}
			return
		}
		// Accepted: only allowed parameters, each once.
		for _, k := range slices.Sorted(maps.Keys(v)) {
			if v.Get(k) != "" && (!slices.Contains(allowed, k) || len(v[k]) > 1) {
				t.Fatalf("accepted parameter %q = %q", k, v[k])
			}
		}
		check()
		// The cache key is canonical: the same request, the same query.
		var again url.Values
		switch endpoint % 4 {
		case 0:
			again, _, _, _ = curseForgeSearchQuery(v)
		case 1:
			_, again, _, _, _ = curseForgeFilesQuery(id, v)
		case 2:
			again, _, _, _ = modrinthSearchQuery(v)
		case 3:
			_, again, _ = modrinthVersionsQuery(id, v)
		}
		if again.Encode() != up.Encode() {
			t.Fatalf("two validations of one request: %q, then %q", up.Encode(), again.Encode())
		}
		// The URL the upstream receives carries exactly that query, at
		// that path.
		base, _ := url.Parse("https://api.example.test")
		target := base.JoinPath(upPath)
		target.RawQuery = up.Encode()
		got, err := url.Parse(target.String())
		wantPath, _ := url.PathUnescape(upPath) // "%21" is the name "!"
		if err != nil || got.Path != wantPath || got.Query().Encode() != up.Encode() {
			t.Fatalf("upstream URL %q: path %q, query %q (%v); want %q, %q", target, got.Path, got.Query().Encode(), err, wantPath, up.Encode())
		}
	})
}

// curseForgeWindow checks pageSize and index against CurseForge's rules.
func curseForgeWindow(t *testing.T, up url.Values, index, size int) {
	t.Helper()
	if size < 1 || size > MaxPageSize || up.Get("pageSize") != strconv.Itoa(size) ||
		index < 0 || up.Get("index") != strconv.Itoa(index) || index > MaxResultWindow-size {
		t.Fatalf("pageSize %d index %d, upstream %v", size, index, up)
	}
}

// text checks a free-text parameter: at most maxText characters, valid,
// no control characters.
func text(t *testing.T, s string) {
	t.Helper()
	if utf8.RuneCountInString(s) > maxText || strings.ContainsFunc(s, unicode.IsControl) {
		t.Fatalf("free text %q accepted", s)
	}
}
