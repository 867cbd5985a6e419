package install

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/kilnhq/kiln/internal/catalog"
	"github.com/kilnhq/kiln/internal/netguard"
	"github.com/kilnhq/kiln/internal/validate"
)

// customUpstream is a user's web server on loopback (TLS: custom URLs
// are https, like every upstream without a mirror): /server.jar and
// /mirror.jar serve jar, /other.jar other bytes, /moved redirects to the
// cloud metadata address.
func customUpstream(t *testing.T, jar []byte) (*httptest.Server, *atomic.Int32) {
	var gets atomic.Int32
	mux := http.NewServeMux()
	for _, p := range []string{"/server.jar", "/mirror.jar"} {
		mux.HandleFunc("GET "+p, func(w http.ResponseWriter, r *http.Request) {
			gets.Add(1)
			w.Write(jar)
		})
	}
	mux.HandleFunc("GET /other.jar", func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("PK\x03\x04 not the jar its hash names"))
	})
	mux.HandleFunc("GET /moved", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "https://169.254.169.254/latest/meta-data/", http.StatusFound)
	})
	srv := httptest.NewTLSServer(mux)
	t.Cleanup(srv.Close)
	return srv, &gets
}

// customInstaller returns an Installer whose guard allows 127.0.0.1 only
// (as --pull-allow-cidr 127.0.0.1/32 would) and trusts srv's certificate;
// allow nil keeps the default guard (public addresses only).
func customInstaller(t *testing.T, srv *httptest.Server, allow []netip.Prefix) (*Installer, string) {
	t.Helper()
	cacheDir := t.TempDir()
	base := srv.Client().Transport.(*http.Transport).Clone()
	opts := Options{CacheDir: cacheDir, UserURLBase: base,
		// The mirror serves upstreams only: a custom URL never goes there.
		MirrorURL: "http://127.0.0.1:1/mirror"}
	if allow != nil {
		opts.UserURLs = netguard.NewPolicy(allow, nil)
	}
	i, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return i, cacheDir
}

func TestCustomJar(t *testing.T) {
	jar := []byte("PK\x03\x04 a server jar of the user's own")
	sum := sha256Hex(jar)
	srv, gets := customUpstream(t, jar)
	i, cacheDir := customInstaller(t, srv, []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")})

	env := map[string]string{"JAR_URL": srv.URL + "/server.jar", "JAR_SHA256": strings.ToUpper(sum), "EULA": "true"}
	got, root, err := install(t, i, "custom", "1.20.1", env)
	if err != nil {
		t.Fatalf("Install(custom) = %v", err)
	}
	want := catalog.Result{Version: "1.20.1", JavaMajor: 17, Jar: "server.jar", SHA256: sum, Source: srv.URL + "/server.jar", Checksum: "sha256"}
	if got != want {
		t.Errorf("Install(custom)\n got %+v\nwant %+v", got, want)
	}
	if data, err := os.ReadFile(filepath.Join(root, "server.jar")); err != nil || string(data) != string(jar) {
		t.Errorf("server.jar = %q, %v", data, err)
	}
	if files := rootFiles(t, root); !slices.Equal(files, []string{"eula.txt", "server.jar"}) {
		t.Errorf("root holds %q", files)
	}
	// The same jar under another URL is downloaded again: the cache never
	// hands a user's jar to whoever names its SHA-256 ...
	env["JAR_URL"] = srv.URL + "/mirror.jar"
	if _, _, err := install(t, i, "custom", "1.20.1", env); err != nil {
		t.Fatal(err)
	}
	if n := gets.Load(); n != 2 {
		t.Errorf("the jar was downloaded %d times, want at each install (2)", n)
	}
	// ... so a team that knows only the hash of another team's cached jar,
	// with a URL that serves something else, gets a checksum error, not
	// the jar.
	_, root, err = install(t, i, "custom", "1.20.1", map[string]string{"JAR_URL": srv.URL + "/other.jar", "JAR_SHA256": sum})
	if ce, ok := errors.AsType[*ChecksumError](err); !ok || ce.Want != sum {
		t.Errorf("Install(custom, the cached jar's SHA-256, a URL serving other bytes) = %v, want a *ChecksumError", err)
	}
	if files := rootFiles(t, root); len(files) != 0 {
		t.Errorf("root after naming another's jar by its hash holds %q", files)
	}

	// A wrong checksum: refused, nothing installed, nothing cached.
	i2, cache2 := customInstaller(t, srv, []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")})
	bad := strings.Repeat("0", 64)
	_, root, err = install(t, i2, "custom", "1.20.1", map[string]string{"JAR_URL": srv.URL + "/server.jar", "JAR_SHA256": bad})
	ce, ok := errors.AsType[*ChecksumError](err)
	if !ok || ce.Algo != "sha256" || ce.Want != bad || ce.Got != sum {
		t.Fatalf("Install(custom, wrong sha256) = %v, want a *ChecksumError", err)
	}
	if files := rootFiles(t, root); len(files) != 0 {
		t.Errorf("root after a wrong checksum holds %q", files)
	}
	if files := rootFiles(t, cache2); len(files) != 0 {
		t.Errorf("cache after a wrong checksum holds %q", files)
	}
	if blobs, _ := os.ReadDir(filepath.Join(cacheDir, "artifacts", "sha256")); len(blobs) != 1 {
		t.Errorf("first cache holds %d blobs, want the one jar", len(blobs))
	}

	// The guard: loopback is refused unless allowed, and so is a
	// redirect to the metadata address even when loopback is allowed.
	i3, cache3 := customInstaller(t, srv, nil)
	_, root, err = install(t, i3, "custom", "1.20.1", map[string]string{"JAR_URL": srv.URL + "/server.jar", "JAR_SHA256": sum})
	if be, ok := errors.AsType[*netguard.BlockedError](err); !ok || be.Addr != netip.MustParseAddr("127.0.0.1") {
		t.Errorf("Install(custom, loopback, default guard) = %v, want a *netguard.BlockedError for 127.0.0.1", err)
	}
	// (Another jar's checksum: the cache holds this one.)
	_, _, err = install(t, i, "custom", "1.20.1", map[string]string{"JAR_URL": srv.URL + "/moved", "JAR_SHA256": sha256Hex([]byte("another jar"))})
	if be, ok := errors.AsType[*netguard.BlockedError](err); !ok || be.Addr != netip.MustParseAddr("169.254.169.254") {
		t.Errorf("Install(custom, redirect to 169.254.169.254) = %v, want a *netguard.BlockedError", err)
	}
	if files := append(rootFiles(t, root), rootFiles(t, filepath.Join(cache3, "artifacts", "sha256"))...); len(files) != 0 {
		t.Errorf("a refused download left %q", files)
	}
}

// TestCustomJarEnv: the URL and the SHA-256 are required and checked
// before anything is fetched.
func TestCustomJarEnv(t *testing.T) {
	srv, gets := customUpstream(t, []byte("jar"))
	i, _ := customInstaller(t, srv, []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")})
	for _, tt := range []struct {
		env  map[string]string
		path string
		msg  string
	}{
		{map[string]string{"JAR_URL": srv.URL + "/server.jar"}, "env.JAR_SHA256", "is required"},
		{map[string]string{"JAR_SHA256": sha256Hex([]byte("jar"))}, "env.JAR_URL", "is required"},
		{map[string]string{"JAR_URL": srv.URL + "/server.jar", "JAR_SHA256": "abc"}, "env.JAR_SHA256", "must be a SHA-256: 64 hexadecimal digits"},
		{map[string]string{"JAR_URL": strings.Replace(srv.URL, "https", "http", 1) + "/server.jar", "JAR_SHA256": sha256Hex([]byte("jar"))},
			"env.JAR_URL", "must be an absolute https URL without user info or fragment"},
		{map[string]string{"JAR_URL": "https://user:pw@example.com/x.jar", "JAR_SHA256": sha256Hex([]byte("jar"))},
			"env.JAR_URL", "must be an absolute https URL without user info or fragment"},
	} {
		_, _, err := install(t, i, "custom", "1.21.4", tt.env)
		ve, ok := errors.AsType[*validate.Error](err)
		if !ok || len(ve.Issues) != 1 || ve.Issues[0].Path != tt.path || ve.Issues[0].Message != tt.msg {
			t.Errorf("Install(custom, %v) = %v, want %s: %s", tt.env, err, tt.path, tt.msg)
		}
	}
	if n := gets.Load(); n != 0 {
		t.Errorf("%d downloads for refused environments", n)
	}
}
