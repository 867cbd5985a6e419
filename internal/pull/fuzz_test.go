package pull

import (
	"net/url"
	"strings"
	"testing"

	"github.com/kilnhq/kiln/internal/files"
	"github.com/kilnhq/kiln/internal/quota"
)

// FuzzParseRequest checks what Start accepts: an http(s) URL with a host
// and no user information, and a target path that files.Clean leaves as
// it is, inside the named directory, with a plain file name.
func FuzzParseRequest(f *testing.F) {
	for _, s := range [][3]string{
		{"http://127.0.0.1/x.jar", "/", ""},
		{"https://example.com/a/b/paper.jar?x=1#f", "/plugins", ""},
		{"http://127.0.0.1/%2e%2e", "/", ""},
		{"http://127.0.0.1/a%2fb", "/", ""},
		{"http://127.0.0.1/a%00b", "/", ""},
		{"http://u:p@127.0.0.1/x", "/", ""},
		{"http://127.0.0.1/x", "../x", ""},
		{"http://127.0.0.1/x", "/etc", "/etc"},
		{"http://127.0.0.1/x", "a\x00", "b"},
		{"http://127.0.0.1/", "/", "."},
		{"HTTP://127.0.0.1/X", "//a//b/", "c"},
		{"http://[::1]:80/x", "/", ".kiln-tmp-x"},
	} {
		f.Add(s[0], s[1], s[2])
	}
	f.Fuzz(func(t *testing.T, rawURL, dir, name string) {
		r, err := parseRequest(rawURL, dir, name)
		if err != nil {
			return
		}
		if r.url.Scheme != "http" && r.url.Scheme != "https" || r.url.Host == "" || r.url.User != nil || len(rawURL) > MaxURLLen {
			t.Fatalf("parseRequest(%q) accepted URL %#v", rawURL, r.url)
		}
		if name != "" && r.filename != name {
			t.Fatalf("filename %q became %q", name, r.filename)
		}
		if r.filename == "" || r.filename == "." || r.filename == ".." || strings.ContainsAny(r.filename, "/\x00") ||
			quota.Reserved(r.filename) {
			t.Fatalf("parseRequest(%q, %q, %q) accepted file name %q", rawURL, dir, name, r.filename)
		}
		if c, err := files.Clean("x", r.rel); err != nil || c != r.rel {
			t.Fatalf("target %q is not clean (%q, %v)", r.rel, c, err)
		}
		if c, err := files.Clean("x", r.dir); err != nil || c != r.dir {
			t.Fatalf("directory %q is not clean (%q, %v)", r.dir, c, err)
		}
		want := r.filename
		if r.dir != "." {
			want = r.dir + "/" + r.filename
		}
		if r.rel != want || files.Display(r.dir) != r.directory {
			t.Fatalf("target %q in %q (%q), want %q", r.rel, r.dir, r.directory, want)
		}
	})
}

func TestNameFromURL(t *testing.T) {
	for _, tc := range []struct{ url, want string }{
		{"http://h/paper-1.21.jar", "paper-1.21.jar"},
		{"http://h/a/b/c.jar?x=/y.jar#z.jar", "c.jar"},
		{"http://h/My%20Plugin.jar", "My Plugin.jar"},
		{"http://h/a%2Fb", ""},
		{"http://h/dir/", ""},
		{"http://h", ""},
		{"http://h/..", ""},
		{"http://h/%2e", ""},
	} {
		u, err := url.Parse(tc.url)
		if err != nil {
			t.Fatal(err)
		}
		if got, _ := nameFromURL(u); got != tc.want {
			t.Errorf("nameFromURL(%q) = %q, want %q", tc.url, got, tc.want)
		}
	}
}
