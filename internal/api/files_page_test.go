package api

import (
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// wantIssue checks a 400 VALIDATION_ERROR whose issues name field.
func wantIssue(t *testing.T, st int, body []byte, field string) {
	t.Helper()
	var e struct {
		Code   string `json:"code"`
		Issues []struct {
			Path string `json:"path"`
		} `json:"issues"`
	}
	if err := json.Unmarshal(body, &e); err != nil || st != 400 || e.Code != codeValidation ||
		len(e.Issues) != 1 || e.Issues[0].Path != field {
		t.Errorf("status %d body %s; want 400 VALIDATION_ERROR naming %q", st, body, field)
	}
}

// TestFilesListPages: GET /files/list pages with limit and cursor; the
// pages end to end are the whole directory (directories first, then by
// name), next_cursor is "" on the last; bad values name their field.
func TestFilesListPages(t *testing.T) {
	h := newHarness(t, sqliteDB(t))
	id, root := h.fileServer(1024)
	var want []string
	if err := os.MkdirAll(filepath.Join(root, "big"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"world", "plugins", "logs"} {
		if err := os.Mkdir(filepath.Join(root, "big", d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	want = append(want, "logs", "plugins", "world")
	for i := range 11 {
		name := fmt.Sprintf("f-%02d.txt", 10-i)
		if err := os.WriteFile(filepath.Join(root, "big", name), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 11 {
		want = append(want, fmt.Sprintf("f-%02d.txt", i))
	}
	type page struct {
		Files []struct {
			Name string `json:"name"`
		} `json:"files"`
		Count      int    `json:"count"`
		NextCursor string `json:"next_cursor"`
	}
	get := func(q string) page {
		t.Helper()
		st, body := h.files("GET", id, "list?directory=/big"+q, nil)
		var p page
		if err := json.Unmarshal(body, &p); st != 200 || err != nil {
			t.Fatalf("list%s: %d %s", q, st, body)
		}
		return p
	}
	for _, limit := range []int{1, 4, 13, 14, 15, 10000} {
		var got []string
		cursor := ""
		for pages := 0; ; pages++ {
			if pages > len(want) {
				t.Fatalf("limit %d: the pages do not end", limit)
			}
			q := fmt.Sprintf("&limit=%d", limit)
			if cursor != "" {
				q += "&cursor=" + url.QueryEscape(cursor)
			}
			p := get(q)
			if p.Count != len(p.Files) || p.Count > limit {
				t.Fatalf("limit %d: count %d for %d files", limit, p.Count, len(p.Files))
			}
			for _, f := range p.Files {
				got = append(got, f.Name)
			}
			if p.NextCursor == "" {
				break
			}
			cursor = p.NextCursor
		}
		if !slices.Equal(got, want) {
			t.Errorf("pages of %d = %q\nwant %q", limit, got, want)
		}
	}
	if p := get(""); len(p.Files) != len(want) || p.NextCursor != "" {
		t.Errorf("list without limit = %d files, next_cursor %q; want all %d and \"\"", len(p.Files), p.NextCursor, len(want))
	}

	for _, tc := range []struct{ q, field string }{
		{"limit=0", "limit"}, {"limit=10001", "limit"}, {"limit=-5", "limit"}, {"limit=ten", "limit"}, {"limit=1&limit=2", "limit"},
		{"limit=99999999999999999999999", "limit"},
		{"cursor=not-a-cursor", "cursor"}, {"cursor=" + strings.Repeat("A", 500), "cursor"}, {"cursor=AWZh&cursor=AWZh", "cursor"},
		// A cursor is a place in the order, never a path; these are refused anyway.
		{"cursor=AWYuLi8uLi9ldGMvcGFzc3dk", "cursor"}, // "../../etc/passwd"
		{"cursor=AWQuLg", "cursor"},                   // ".."
		{"cursor=AWZhAGI", "cursor"},                  // a NUL byte
	} {
		st, body := h.files("GET", id, "list?directory=/big&"+tc.q, nil)
		wantIssue(t, st, body, tc.field)
	}
}

// TestFilesSearchLimit: limit bounds the results and truncated says more
// matched.
func TestFilesSearchLimit(t *testing.T) {
	h := newHarness(t, sqliteDB(t))
	id, root := h.fileServer(1024)
	if err := os.MkdirAll(filepath.Join(root, "plugins"), 0o755); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if err := os.WriteFile(filepath.Join(root, "plugins", fmt.Sprintf("c%d.yml", i)), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		q         string
		count     int
		truncated bool
	}{{"", 5, false}, {"&limit=5", 5, false}, {"&limit=2", 2, true}, {"&limit=1000", 5, false}} {
		st, body := h.files("GET", id, "search?pattern=*.yml"+tc.q, nil)
		var r struct {
			Results   []any `json:"results"`
			Count     int   `json:"count"`
			Truncated bool  `json:"truncated"`
		}
		if err := json.Unmarshal(body, &r); st != 200 || err != nil || r.Count != tc.count || len(r.Results) != tc.count || r.Truncated != tc.truncated {
			t.Errorf("search%s = %d %s; want %d results, truncated %v", tc.q, st, body, tc.count, tc.truncated)
		}
	}
	for _, q := range []string{"limit=0", "limit=1001", "limit=x"} {
		st, body := h.files("GET", id, "search?pattern=*.yml&"+q, nil)
		wantIssue(t, st, body, "limit")
	}
}
