package upstream

import (
	"net/url"
	"strings"
	"testing"
)

// FuzzTarget checks that with a mirror every request stays on the mirror,
// whatever URL an upstream answer contains.
func FuzzTarget(f *testing.F) {
	for _, s := range []string{
		"https://fill.papermc.io/v3/projects/paper", "https://a.test/%2e%2e/x", "https://a.test/../../x",
		"https://a.test@b.test/x", "http://[::1]:80/x?y=z#f", "https:///x", "//a.test/x", "https://a.test/\\..\\x",
	} {
		f.Add(s)
	}
	m := Fetcher{Mirror: "http://127.0.0.1:8080/mirror"}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := m.Target(s)
		if err != nil {
			return
		}
		u, err := url.Parse(got)
		if err != nil {
			t.Fatalf("target(%q) = %q, not a URL: %v", s, got, err)
		}
		if u.Scheme != "http" || u.Host != "127.0.0.1:8080" || !strings.HasPrefix(u.Path, "/mirror/") {
			t.Errorf("target(%q) = %q leaves the mirror", s, got)
		}
		for seg := range strings.SplitSeq(u.Path, "/") {
			if seg == ".." || seg == "." {
				t.Errorf("target(%q) = %q has a dot segment", s, got)
			}
		}
	})
}

func FuzzCompareVersions(f *testing.F) {
	for _, s := range [][2]string{{"1.20.1", "1.21"}, {"21.1.77", "21.1.77-beta"}, {"", "1"}, {"1..2", "1.2."}} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		if x, y := compareVersions(a, b), compareVersions(b, a); x != -y {
			t.Errorf("compareVersions(%q, %q) = %d but reversed = %d", a, b, x, y)
		}
		_ = neoGameVersion(a)
	})
}
