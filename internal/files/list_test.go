package files

import (
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kilnhq/kiln/internal/validate"
)

// names lists the entries' names.
func names(list []Entry) []string {
	out := make([]string, len(list))
	for i, e := range list {
		out[i] = e.Name
	}
	return out
}

// listAll pages through rel with limit, checking each page's size, and
// returns every entry in order.
func listAll(t *testing.T, r *Root, rel string, limit int) []Entry {
	t.Helper()
	var all []Entry
	after := Cursor{}
	for pages := 0; ; pages++ {
		if pages > 10000 {
			t.Fatalf("ListPage(%q, limit %d) does not end", rel, limit)
		}
		p, err := r.ListPage(rel, after, limit)
		if err != nil {
			t.Fatalf("ListPage(%q, %v, %d) = %v", rel, after, limit, err)
		}
		if len(p.Entries) > limit {
			t.Fatalf("ListPage(limit %d) = %d entries", limit, len(p.Entries))
		}
		all = append(all, p.Entries...)
		if p.Next.IsZero() {
			return all
		}
		if len(p.Entries) != limit {
			t.Fatalf("ListPage(limit %d): a page that is not the last holds %d entries", limit, len(p.Entries))
		}
		// What the client gets and sends back is the string.
		if after, err = ParseCursor("cursor", p.Next.String()); err != nil {
			t.Fatalf("ParseCursor(%q) = %v", p.Next.String(), err)
		}
	}
}

// TestListPages: pages of any size, put end to end, are the whole
// listing (directories first, then by name), each entry once; the last
// page has no next cursor, including when it is exactly full.
func TestListPages(t *testing.T) {
	r, dir := newRoot(t)
	var want []string
	for i := range 7 {
		name := fmt.Sprintf("dir-%02d", 6-i)
		if err := os.Mkdir(filepath.Join(dir, name), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 7 {
		want = append(want, fmt.Sprintf("dir-%02d", i))
	}
	files := []string{"Zeta", "a", "a.txt", "b\xffodd", "line\nbreak", "ümlaut", "~tilde", ".hidden"}
	for _, n := range files {
		write(t, dir, n, "x")
	}
	if err := os.Symlink("dir-00", filepath.Join(dir, "link-to-dir")); err != nil {
		t.Fatal(err) // a link to a directory is a link: among the files
	}
	files = append(files, "link-to-dir")
	slices.Sort(files)
	want = append(want, files...)

	for _, limit := range []int{1, 2, 3, 7, 8, len(want) - 1, len(want), len(want) + 1, MaxListLimit} {
		if got := names(listAll(t, r, ".", limit)); !slices.Equal(got, want) {
			t.Errorf("pages of %d = %q\nwant %q", limit, got, want)
		}
	}
	p, err := r.ListPage(".", Cursor{}, len(want))
	if err != nil || !p.Next.IsZero() || len(p.Entries) != len(want) {
		t.Errorf("ListPage(limit = entry count) = %d entries, next %q, %v; want all and no next cursor", len(p.Entries), p.Next.String(), err)
	}
	if list, err := r.List("."); err != nil || !slices.Equal(names(list), want) {
		t.Errorf("List = %q, %v", names(list), err)
	}
	empty, _ := os.MkdirTemp(dir, "empty")
	if p, err := r.ListPage(filepath.Base(empty), Cursor{}, 5); err != nil || len(p.Entries) != 0 || !p.Next.IsZero() {
		t.Errorf("ListPage(empty) = %+v, %v", p, err)
	}
}

// TestListPageChanges: a cursor stays valid when its entry is removed,
// and entries added behind it are not listed again.
func TestListPageChanges(t *testing.T) {
	r, dir := newRoot(t)
	for _, n := range []string{"a", "b", "c", "d", "e"} {
		write(t, dir, n, "x")
	}
	p, err := r.ListPage(".", Cursor{}, 2)
	if err != nil || !slices.Equal(names(p.Entries), []string{"a", "b"}) {
		t.Fatalf("first page = %q, %v", names(p.Entries), err)
	}
	if err := os.Remove(filepath.Join(dir, "b")); err != nil {
		t.Fatal(err)
	}
	write(t, dir, "aa", "x") // before the cursor: not seen
	write(t, dir, "cc", "x") // after it: seen
	p, err = r.ListPage(".", p.Next, 10)
	if err != nil || !slices.Equal(names(p.Entries), []string{"c", "cc", "d", "e"}) || !p.Next.IsZero() {
		t.Errorf("second page = %q next %q, %v; want c cc d e and the end", names(p.Entries), p.Next.String(), err)
	}
}

func TestListPageErrors(t *testing.T) {
	r, dir := newRoot(t)
	write(t, dir, "file", "x")
	for _, limit := range []int{0, -1, MaxListLimit + 1} {
		_, err := r.ListPage(".", Cursor{}, limit)
		if ve, ok := errors.AsType[*validate.Error](err); !ok || ve.Issues[0].Path != "limit" {
			t.Errorf("ListPage(limit %d) = %v, want a validation error naming limit", limit, err)
		}
	}
	if _, err := r.ListPage("file", Cursor{}, 10); !errors.Is(err, ErrNotDirectory) {
		t.Errorf("ListPage(file) = %v, want ErrNotDirectory", err)
	}
	if _, err := r.ListPage("nope", Cursor{}, 10); !errors.Is(err, ErrNotFound) {
		t.Errorf("ListPage(missing) = %v, want ErrNotFound", err)
	}
}

// TestListPageMemory: a small page of a large directory allocates for
// the page, not for every entry of the directory.
func TestListPageMemory(t *testing.T) {
	r, dir := newRoot(t)
	if err := os.Mkdir(filepath.Join(dir, "big"), 0o755); err != nil {
		t.Fatal(err)
	}
	for i := range 2000 {
		if err := os.WriteFile(filepath.Join(dir, "big", fmt.Sprintf("f-%05d", i)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var err error
	allocs := testing.AllocsPerRun(5, func() {
		var p Page
		p, err = r.ListPage("big", Cursor{}, 10)
		if err == nil && (len(p.Entries) != 10 || p.Entries[0].Name != "f-00000" || p.Next.IsZero()) {
			err = fmt.Errorf("page = %q next %q", names(p.Entries), p.Next.String())
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if allocs > 500 {
		t.Errorf("ListPage(limit 10) of 2000 entries: %.0f allocations per call, want them bounded by the page (< 500)", allocs)
	}
}

func TestCursor(t *testing.T) {
	for _, k := range []listKey{{false, "world"}, {true, "server.properties"}, {true, "bad\xff\n name"}, {true, strings.Repeat("n", MaxNameLen)}} {
		c := Cursor{key: k, set: true}
		got, err := ParseCursor("cursor", c.String())
		if err != nil || got != c {
			t.Errorf("ParseCursor(%q) = %+v, %v; want %+v", c.String(), got, err, c)
		}
	}
	if c, err := ParseCursor("cursor", ""); err != nil || !c.IsZero() || c.String() != "" {
		t.Errorf(`ParseCursor("") = %+v, %v; want the zero Cursor`, c, err)
	}
	raw := func(b string) string { return base64.RawURLEncoding.EncodeToString([]byte(b)) }
	for _, bad := range []string{
		"not base64!", "AQ", raw("\x01d"), raw("\x02dname"), raw("\x01xname"), raw("\x01fa/b"), raw("\x01fa\x00b"),
		raw("\x01d.."), raw("\x01f."), raw("\x01f" + strings.Repeat("n", MaxNameLen+1)), raw("\x01fname") + "=",
		strings.Repeat("A", 1000),
	} {
		_, err := ParseCursor("cursor", bad)
		if ve, ok := errors.AsType[*validate.Error](err); !ok || ve.Issues[0].Path != "cursor" {
			t.Errorf("ParseCursor(%q) = %v, want a validation error naming cursor", bad, err)
		}
	}
}

// FuzzParseCursor: any string is refused or parsed into a cursor that
// encodes back to exactly it.
func FuzzParseCursor(f *testing.F) {
	for _, s := range []string{"", "AWR3b3JsZA", "AWZh", "AWYuLg", "not base64", "AWZhL2I", "AWY\n0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, err := ParseCursor("cursor", s)
		if err != nil {
			return
		}
		if c.String() != s {
			t.Fatalf("ParseCursor(%q).String() = %q", s, c.String())
		}
	})
}

// TestSearchLimit: at most limit results; truncated only when more
// matched.
func TestSearchLimit(t *testing.T) {
	r, dir := newRoot(t)
	for i := range 5 {
		write(t, dir, fmt.Sprintf("sub/m-%d.yml", i), "x")
	}
	m, _ := NewMatcher("pattern", "*.yml")
	for _, tc := range []struct {
		limit     int
		n         int
		truncated bool
	}{{1, 1, true}, {4, 4, true}, {5, 5, false}, {6, 5, false}, {MaxResults, 5, false}} {
		res, truncated, err := r.SearchLimit(t.Context(), ".", m, tc.limit)
		if err != nil || len(res) != tc.n || truncated != tc.truncated {
			t.Errorf("SearchLimit(limit %d) = %d results, truncated %v, %v; want %d, %v", tc.limit, len(res), truncated, err, tc.n, tc.truncated)
		}
	}
}
