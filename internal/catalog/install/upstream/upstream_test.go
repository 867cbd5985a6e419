package upstream

import "testing"

func TestTarget(t *testing.T) {
	mirrored := Fetcher{Mirror: "http://mirror.test/base"}
	direct := Fetcher{}
	for _, tt := range []struct {
		f       Fetcher
		in      string
		want    string
		wantErr bool
	}{
		{mirrored, "https://fill.papermc.io/v3/projects/paper", "http://mirror.test/base/fill.papermc.io/v3/projects/paper", false},
		{mirrored, "https://ci.md-5.net/job/BungeeCord/lastSuccessfulBuild/api/json?tree=number", "http://mirror.test/base/ci.md-5.net/job/BungeeCord/lastSuccessfulBuild/api/json?tree=number", false},
		{mirrored, "https://meta.fabricmc.net/v2/versions/loader/1.14%20Pre-Release%205/0.16.9/1.0.1/server/jar", "http://mirror.test/base/meta.fabricmc.net/v2/versions/loader/1.14%20Pre-Release%205/0.16.9/1.0.1/server/jar", false},
		{mirrored, "http://example.test:8080/a", "http://mirror.test/base/example.test:8080/a", false},
		{mirrored, "ftp://example.test/a", "", true},
		{mirrored, "https://user:pw@example.test/a", "", true},
		{mirrored, "https://example.test/a/../../b", "", true},
		{mirrored, "https://example.test/a/%2e%2e/b", "", true},
		{direct, "https://fill.papermc.io/v3/projects/paper", "https://fill.papermc.io/v3/projects/paper", false},
		{direct, "http://fill-data.papermc.io/x.jar", "", true},
		{direct, "/relative", "", true},
	} {
		got, err := tt.f.Target(tt.in)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("target(%q) with mirror %q = %q, %v; want %q (error: %v)", tt.in, tt.f.Mirror, got, err, tt.want, tt.wantErr)
		}
	}
}

func TestCompareVersions(t *testing.T) {
	for _, tt := range []struct {
		a, b string
		want int
	}{
		{"1.20.1", "1.16.5", 1}, {"1.21", "1.21.0", 0}, {"1.21.10", "1.21.9", 1},
		{"21.1.77", "21.1.100", -1}, {"20.2.3-beta", "20.2.3", -1}, {"26.1", "1.21.11", 1},
	} {
		if got := compareVersions(tt.a, tt.b); got != tt.want {
			t.Errorf("compareVersions(%q, %q) = %d, want %d", tt.a, tt.b, got, tt.want)
		}
	}
	for nv, mc := range map[string]string{"21.1.77": "1.21.1", "21.0.167": "1.21", "20.4.237": "1.20.4",
		"20.2.3-beta": "1.20.2", "21.4.1-beta": "1.21.4", "26.1.0.5": "26.1", "26.1.1.2-beta": "26.1.1"} {
		if got := neoGameVersion(nv); got != mc {
			t.Errorf("neoGameVersion(%q) = %q, want %q", nv, got, mc)
		}
	}
}

// TestConcurrentInstalls installs one artifact into many roots at once,
// sharing the cache.
