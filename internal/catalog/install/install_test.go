package install

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kilnhq/kiln/internal/blob"
	"github.com/kilnhq/kiln/internal/blob/blobtest"
	"github.com/kilnhq/kiln/internal/catalog"
	"github.com/kilnhq/kiln/internal/catalog/install/upstream"
	"github.com/kilnhq/kiln/internal/validate"
)

const testUA = "Kiln/test (+https://github.com/kilnhq/kiln)"

func profile(t *testing.T, typ string) catalog.Profile {
	t.Helper()
	c, err := catalog.Load(true)
	if err != nil {
		t.Fatal(err)
	}
	p, ok := c.Get(typ)
	if !ok {
		t.Fatalf("no profile %q", typ)
	}
	return p
}

// newInstaller returns an Installer whose mirror is the fake upstream, and
// its cache directory.
func newInstaller(t *testing.T, u *fakeUpstream) (*Installer, string) {
	t.Helper()
	cacheDir := t.TempDir()
	i, err := New(Options{MirrorURL: u.mirror(), CacheDir: cacheDir, UserAgent: testUA, HTTPClient: u.srv.Client()})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return i, cacheDir
}

func install(t *testing.T, i *Installer, typ, version string, env map[string]string) (catalog.Result, string, error) {
	t.Helper()
	root := filepath.Join(t.TempDir(), "root")
	res, err := i.Install(t.Context(), profile(t, typ), version, root, env)
	return res, root, err
}

// rootFiles lists every file under root, relative, sorted.
func rootFiles(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			rel, _ := filepath.Rel(root, p)
			out = append(out, filepath.ToSlash(rel))
		}
		return nil
	})
	slices.Sort(out)
	return out
}

func TestInstallLatest(t *testing.T) {
	u := newUpstream(t)
	i, _ := newInstaller(t, u)
	tests := []struct {
		typ  string
		want catalog.Result
		jar  []byte // content of want.Jar
	}{
		{"paper", catalog.Result{Version: "1.21.4", Build: "232", JavaMajor: 21, Jar: "server.jar", Checksum: "sha256",
			Source: "https://" + paperJarRoute}, jar("paper-1.21.4-232.jar")},
		{"folia", catalog.Result{Version: "1.21.4", Build: "7", JavaMajor: 21, Jar: "server.jar", Checksum: "sha256",
			Source: "https://fill-data.papermc.io/v1/objects/folia-1.21.4-7/folia-1.21.4-7.jar"}, jar("folia-1.21.4-7.jar")},
		{"velocity", catalog.Result{Version: "3.4.0-SNAPSHOT", Build: "7", JavaMajor: 21, Jar: "server.jar", Checksum: "sha256",
			Source: "https://fill-data.papermc.io/v1/objects/velocity-3.4.0-SNAPSHOT-7/velocity-3.4.0-SNAPSHOT-7.jar"}, jar("velocity-3.4.0-SNAPSHOT-7.jar")},
		{"waterfall", catalog.Result{Version: "1.21", Build: "7", JavaMajor: 21, Jar: "server.jar", Checksum: "sha256",
			Source: "https://fill-data.papermc.io/v1/objects/waterfall-1.21-7/waterfall-1.21-7.jar"}, jar("waterfall-1.21-7.jar")},
		{"purpur", catalog.Result{Version: "1.21.4", Build: "2416", JavaMajor: 21, Jar: "server.jar", Checksum: "md5",
			Source: "https://" + purpurJarRoute}, jar("purpur-1.21.4-2416.jar")},
		{"vanilla", catalog.Result{Version: "1.21.4", JavaMajor: 21, Jar: "server.jar", Checksum: "sha1",
			Source: "https://" + vanillaJarRoute}, jar("server-1.21.4.jar")},
		{"fabric", catalog.Result{Version: "1.21.4", Build: "0.16.9", JavaMajor: 21, Jar: "fabric-server-launcher.jar", Checksum: "",
			Source: "https://" + fabricJarRoute}, jar("fabric-launcher")},
		{"bungeecord", catalog.Result{Version: "1900", Build: "1900", JavaMajor: 21, Jar: "server.jar", Checksum: "md5",
			Source: "https://" + bungeeJarRoute}, jar("BungeeCord")},
		{"kiln-test", catalog.Result{Version: "dev"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.typ, func(t *testing.T) {
			got, root, err := install(t, i, tt.typ, "latest", nil)
			if err != nil {
				t.Fatalf("Install(%s, latest): %v", tt.typ, err)
			}
			if tt.jar != nil {
				tt.want.SHA256 = sha256Hex(tt.jar)
			}
			if got != tt.want {
				t.Errorf("Install(%s, latest)\n got %+v\nwant %+v", tt.typ, got, tt.want)
			}
			if tt.jar != nil {
				data, err := os.ReadFile(filepath.Join(root, got.Jar))
				if err != nil || !bytes.Equal(data, tt.jar) {
					t.Errorf("%s in root = %q, %v; want %q", got.Jar, data, err, tt.jar)
				}
			}
			p := profile(t, tt.typ)
			eula, err := os.ReadFile(filepath.Join(root, "eula.txt"))
			// Not accepted unless the user set EULA=true (TestConfigureEULA).
			if _, has := p.Var("EULA"); has != (err == nil) || has && !bytes.Contains(eula, []byte("\neula=false\n")) {
				t.Errorf("eula.txt = %q, %v; profile has EULA: %v", eula, err, has)
			}
			for _, f := range rootFiles(t, root) {
				if strings.HasSuffix(f, ".tmp") {
					t.Errorf("temporary file left in root: %s", f)
				}
			}
		})
	}
	t.Run("fabric installs the vanilla jar too", func(t *testing.T) {
		_, root, err := install(t, i, "fabric", "1.21.4", nil)
		if err != nil {
			t.Fatal(err)
		}
		if data, _ := os.ReadFile(filepath.Join(root, ".fabric/server/1.21.4-server.jar")); !bytes.Equal(data, jar("server-1.21.4.jar")) {
			t.Errorf(".fabric/server/1.21.4-server.jar = %q, want the vanilla jar", data)
		}
	})
	t.Run("kiln-test writes only its marker", func(t *testing.T) {
		_, root, err := install(t, i, "kiln-test", "", map[string]string{"MOTD": "hi"})
		if err != nil {
			t.Fatal(err)
		}
		if got := rootFiles(t, root); !slices.Equal(got, []string{".kiln-testserver"}) {
			t.Errorf("root files = %q", got)
		}
	})
}

func TestInstallExplicit(t *testing.T) {
	u := newUpstream(t)
	i, _ := newInstaller(t, u)
	tests := []struct {
		name      string
		typ       string
		version   string
		env       map[string]string
		wantVer   string
		wantBuild string
		wantJava  int
	}{
		{"paper version", "paper", "1.20.6", nil, "1.20.6", "151", 21},
		{"paper pinned alpha build", "paper", "1.21.4", map[string]string{"BUILD_NUMBER": "233"}, "1.21.4", "233", 21},
		{"paper version from env", "paper", "", map[string]string{"MINECRAFT_VERSION": "1.20.6"}, "1.20.6", "151", 21},
		{"version field wins over env", "paper", "1.21.4", map[string]string{"MINECRAFT_VERSION": "1.20.6"}, "1.21.4", "232", 21},
		{"vanilla without javaVersion uses the table", "vanilla", "1.16.5", nil, "1.16.5", "", 8},
		{"bungeecord build number", "bungeecord", "1900", nil, "1900", "1900", 21},
		{"velocity version", "velocity", "3.4.0-SNAPSHOT", nil, "3.4.0-SNAPSHOT", "7", 21},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, _, err := install(t, i, tt.typ, tt.version, tt.env)
			if err != nil {
				t.Fatalf("Install(%s, %q, %v): %v", tt.typ, tt.version, tt.env, err)
			}
			if got.Version != tt.wantVer || got.Build != tt.wantBuild || got.JavaMajor != tt.wantJava {
				t.Errorf("Install(%s, %q) = version %q build %q java %d, want %q %q %d",
					tt.typ, tt.version, got.Version, got.Build, got.JavaMajor, tt.wantVer, tt.wantBuild, tt.wantJava)
			}
		})
	}
}

// TestCacheHit installs each artifact twice, into two roots: the second
// install must not download it again, whatever the checksum kind (sha256
// itself, an md5/sha1 index entry, or the URL for Fabric).
func TestCacheHit(t *testing.T) {
	for _, tt := range []struct {
		typ   string
		route string
	}{
		{"paper", paperJarRoute},
		{"purpur", purpurJarRoute},
		{"vanilla", vanillaJarRoute},
		{"fabric", fabricJarRoute},
		{"bungeecord", bungeeJarRoute},
	} {
		t.Run(tt.typ, func(t *testing.T) {
			u := newUpstream(t)
			i, cacheDir := newInstaller(t, u)
			first, root1, err := install(t, i, tt.typ, "latest", nil)
			if err != nil {
				t.Fatal(err)
			}
			second, root2, err := install(t, i, tt.typ, "latest", nil)
			if err != nil {
				t.Fatal(err)
			}
			if n := u.count(tt.route); n != 1 {
				t.Errorf("artifact %s downloaded %d times, want 1", tt.route, n)
			}
			if first != second {
				t.Errorf("second install = %+v, want %+v", second, first)
			}
			a, _ := os.ReadFile(filepath.Join(root1, first.Jar))
			b, _ := os.ReadFile(filepath.Join(root2, second.Jar))
			if !bytes.Equal(a, b) || len(a) == 0 {
				t.Errorf("roots differ: %q vs %q", a, b)
			}
			if _, err := os.Stat(filepath.Join(cacheDir, "artifacts", "sha256", first.SHA256)); err != nil {
				t.Errorf("cache blob: %v", err)
			}
		})
	}
}

// TestCorruptCacheRefetched damages a cached blob: the next install notices
// while copying, drops the blob and downloads it again.
func TestCorruptCacheRefetched(t *testing.T) {
	u := newUpstream(t)
	i, cacheDir := newInstaller(t, u)
	res, _, err := install(t, i, "paper", "latest", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cacheDir, "artifacts", "sha256", res.SHA256), []byte("bit rot"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, root, err := install(t, i, "paper", "latest", nil)
	if err != nil {
		t.Fatalf("Install after corruption: %v", err)
	}
	if data, _ := os.ReadFile(filepath.Join(root, "server.jar")); !bytes.Equal(data, jar("paper-1.21.4-232.jar")) {
		t.Errorf("server.jar = %q", data)
	}
	if n := u.count(paperJarRoute); n != 2 {
		t.Errorf("downloads = %d, want 2", n)
	}
}

// TestChecksumMismatch serves artifacts whose content differs from the
// published checksum: Install fails with a *ChecksumError and leaves
// nothing in the root or the cache.
func TestChecksumMismatch(t *testing.T) {
	tamper := func(b []byte) []byte { b = bytes.Clone(b); b[len(b)-2] ^= 1; return b }
	for _, tt := range []struct {
		typ   string
		route string
		body  []byte
		algo  string
	}{
		{"paper", paperJarRoute, tamper(jar("paper-1.21.4-232.jar")), "sha256"},
		{"paper short", paperJarRoute, []byte("short"), "size"},
		{"purpur", purpurJarRoute, tamper(jar("purpur-1.21.4-2416.jar")), "md5"},
		{"vanilla", vanillaJarRoute, tamper(jar("server-1.21.4.jar")), "sha1"},
		{"bungeecord", bungeeJarRoute, tamper(jar("BungeeCord")), "md5"},
	} {
		t.Run(tt.typ, func(t *testing.T) {
			u := newUpstream(t)
			u.set(tt.route, func(w http.ResponseWriter, r *http.Request) { w.Write(tt.body) })
			i, cacheDir := newInstaller(t, u)
			typ, _, _ := strings.Cut(tt.typ, " ")
			_, root, err := install(t, i, typ, "latest", nil)
			ce, ok := errors.AsType[*ChecksumError](err)
			if !ok {
				t.Fatalf("Install = %v, want *ChecksumError", err)
			}
			if ce.Algo != tt.algo || ce.URL != "https://"+tt.route || ce.Want == ce.Got {
				t.Errorf("ChecksumError = %+v, want algo %s for %s", ce, tt.algo, tt.route)
			}
			if files := rootFiles(t, root); len(files) != 0 {
				t.Errorf("root holds %q after a bad checksum", files)
			}
			if files := rootFiles(t, cacheDir); len(files) != 0 {
				t.Errorf("cache holds %q after a bad checksum", files)
			}
		})
	}

	t.Run("mojang version document", func(t *testing.T) {
		u := newUpstream(t)
		route := u.mojangDocs["1.21.4"]
		u.set(route, func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, `{"downloads":{}}`) })
		i, cacheDir := newInstaller(t, u)
		_, root, err := install(t, i, "vanilla", "1.21.4", nil)
		ce, ok := errors.AsType[*ChecksumError](err)
		if !ok || ce.Algo != "sha1" || ce.URL != "https://"+route {
			t.Fatalf("Install = %v, want a sha1 *ChecksumError for the version document", err)
		}
		if files := append(rootFiles(t, root), rootFiles(t, cacheDir)...); len(files) != 0 {
			t.Errorf("files left: %q", files)
		}
	})
}

func TestVersionNotFound(t *testing.T) {
	u := newUpstream(t)
	fakeJava(t, "exit 1")
	i, _ := newInstaller(t, u)
	for _, tt := range []struct {
		name    string
		typ     string
		version string
		env     map[string]string
	}{
		{"paper version", "paper", "1.99", nil},
		{"paper build", "paper", "1.21.4", map[string]string{"BUILD_NUMBER": "999"}},
		{"paper only beta builds", "paper", "1.21.5", nil},
		{"purpur version", "purpur", "1.99", nil},
		{"purpur build", "purpur", "1.21.4", map[string]string{"BUILD_NUMBER": "1"}},
		{"vanilla", "vanilla", "1.99", nil},
		{"fabric game", "fabric", "1.99", nil},
		{"fabric loader", "fabric", "1.21.4", map[string]string{"LOADER_VERSION": "9.9.9"}},
		{"forge game", "forge", "1.99", nil},
		{"forge pinned", "forge", "1.20.1", map[string]string{"FORGE_VERSION": "99.9.9"}},
		{"neoforge game", "neoforge", "1.99", nil},
		{"neoforge pinned", "neoforge", "latest", map[string]string{"NEOFORGE_VERSION": "99.1.1"}},
		{"neoforge pinned for another game", "neoforge", "1.20.4", map[string]string{"NEOFORGE_VERSION": "21.1.77"}},
		{"bungeecord build", "bungeecord", "1234", nil},
		{"velocity", "velocity", "9.9.9", nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, root, err := install(t, i, tt.typ, tt.version, tt.env)
			if !errors.Is(err, ErrVersionNotFound) {
				t.Fatalf("Install(%s, %q, %v) = %v, want ErrVersionNotFound", tt.typ, tt.version, tt.env, err)
			}
			if files := rootFiles(t, root); len(files) != 0 {
				t.Errorf("root holds %q", files)
			}
		})
	}
}

func TestInvalidInput(t *testing.T) {
	u := newUpstream(t)
	i, _ := newInstaller(t, u)
	for _, tt := range []struct {
		name    string
		typ     string
		version string
		env     map[string]string
		path    string
	}{
		{"traversal", "paper", "../../etc", nil, "version"},
		{"slash", "vanilla", "1.21/../x", nil, "version"},
		{"unknown env", "paper", "1.21.4", map[string]string{"NOPE": "x"}, "env.NOPE"},
		{"build not a number", "paper", "1.21.4", map[string]string{"BUILD_NUMBER": "abc"}, "env.BUILD_NUMBER"},
		{"bungeecord version", "bungeecord", "1.21", nil, "version"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := install(t, i, tt.typ, tt.version, tt.env)
			ve, ok := errors.AsType[*validate.Error](err)
			if !ok || ve.Issues[0].Path != tt.path {
				t.Fatalf("Install(%s, %q, %v) = %v, want a validation issue at %s", tt.typ, tt.version, tt.env, err, tt.path)
			}
		})
	}
	if n := len(u.seen()); n != 0 {
		t.Errorf("%d upstream requests for invalid input", n)
	}
}

func TestUpstreamError(t *testing.T) {
	for _, tt := range []struct {
		name  string
		typ   string
		route string
	}{
		{"metadata", "paper", "fill.papermc.io/v3/projects/paper/versions"},
		{"artifact", "vanilla", vanillaJarRoute},
	} {
		t.Run(tt.name, func(t *testing.T) {
			u := newUpstream(t)
			u.set(tt.route, func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(http.StatusInternalServerError)
				fmt.Fprint(w, `{"ok":false,"message":"database on fire"}`)
			})
			i, cacheDir := newInstaller(t, u)
			_, root, err := install(t, i, tt.typ, "latest", nil)
			ue, ok := errors.AsType[*UpstreamError](err)
			if !ok {
				t.Fatalf("Install = %v, want *UpstreamError", err)
			}
			if ue.Status != 500 || ue.Message != "database on fire" || ue.URL != u.mirror()+"/"+tt.route {
				t.Errorf("UpstreamError = %+v", ue)
			}
			if files := append(rootFiles(t, root), rootFiles(t, cacheDir)...); len(files) != 0 {
				t.Errorf("files left: %q", files)
			}
		})
	}
}

// TestMirrorAndUserAgent checks that every request goes to the mirror as
// /<host>/<path>, including URLs found in upstream answers, and carries the
// User-Agent.
func TestMirrorAndUserAgent(t *testing.T) {
	u := newUpstream(t)
	i, _ := newInstaller(t, u)
	for _, typ := range []string{"paper", "purpur", "vanilla", "fabric", "bungeecord", "velocity"} {
		if _, _, err := install(t, i, typ, "latest", nil); err != nil {
			t.Fatalf("Install(%s): %v", typ, err)
		}
	}
	hosts := map[string]bool{}
	for _, s := range u.seen() {
		if s.UserAgent != testUA {
			t.Errorf("request %s had User-Agent %q, want %q", s.Route, s.UserAgent, testUA)
		}
		host, _, _ := strings.Cut(s.Route, "/")
		hosts[host] = true
	}
	for _, h := range []string{"fill.papermc.io", "fill-data.papermc.io", "api.purpurmc.org", "piston-meta.mojang.com",
		"piston-data.mojang.com", "meta.fabricmc.net", "ci.md-5.net"} {
		if !hosts[h] {
			t.Errorf("no request reached the mirror for %s (saw %v)", h, hosts)
		}
	}
}

// rerouter sends every request to the fake upstream without a mirror set,
// recording the URL the installer asked for: it checks the official
// upstream URLs without leaving the machine.
type rerouter struct {
	to   *url.URL
	next http.RoundTripper
	urls chan string
}

func (r rerouter) RoundTrip(req *http.Request) (*http.Response, error) {
	r.urls <- req.URL.String()
	req = req.Clone(req.Context())
	req.URL.Path = mirrorPrefix + "/" + req.URL.Host + req.URL.Path
	req.URL.RawPath = ""
	req.URL.Scheme, req.URL.Host = r.to.Scheme, r.to.Host
	return r.next.RoundTrip(req)
}

func TestOfficialURLsWithoutMirror(t *testing.T) {
	u := newUpstream(t)
	to, _ := url.Parse(u.srv.URL)
	urls := make(chan string, 100)
	client := &http.Client{Transport: rerouter{to: to, next: u.srv.Client().Transport, urls: urls}}
	i, err := New(Options{CacheDir: t.TempDir(), HTTPClient: client, UserAgent: testUA})
	if err != nil {
		t.Fatal(err)
	}
	res, _, err := install(t, i, "paper", "1.20.6", nil)
	if err != nil {
		t.Fatalf("Install: %v", err)
	}
	close(urls)
	var got []string
	for s := range urls {
		got = append(got, s)
	}
	want := []string{
		"https://fill.papermc.io/v3/projects/paper/versions",
		"https://fill.papermc.io/v3/projects/paper/versions/1.20.6/builds",
		"https://fill-data.papermc.io/v1/objects/paper-1.20.6-151/paper-1.20.6-151.jar",
	}
	if !slices.Equal(got, want) {
		t.Errorf("requested %q, want %q", got, want)
	}
	if res.Source != want[2] {
		t.Errorf("Source = %q, want %q", res.Source, want[2])
	}

	// Without a mirror, a plain-http download URL in an answer is refused.
	u.set("fill.papermc.io/v3/projects/paper/versions/1.20.6/builds", func(w http.ResponseWriter, r *http.Request) {
		sum := sha256Hex(jar("x"))
		fmt.Fprintf(w, `[{"id":151,"channel":"STABLE","downloads":{"server:default":{"name":"x.jar","size":0,"url":"http://fill-data.papermc.io/x.jar","checksums":{"sha256":%q}}}}]`, sum)
	})
	i2, _ := New(Options{CacheDir: t.TempDir(), HTTPClient: &http.Client{Transport: rerouter{to: to, next: u.srv.Client().Transport, urls: make(chan string, 100)}}})
	if _, _, err := install(t, i2, "paper", "1.20.6", nil); err == nil || !strings.Contains(err.Error(), "refusing plain http") {
		t.Errorf("Install with an http download URL = %v, want a refusal", err)
	}
}

func TestCancel(t *testing.T) {
	u := newUpstream(t)
	started := make(chan struct{})
	u.set("fill.papermc.io/v3/projects/paper/versions", func(w http.ResponseWriter, r *http.Request) {
		close(started)
		<-r.Context().Done()
	})
	i, _ := newInstaller(t, u)
	ctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() {
		_, err := i.Install(ctx, profile(t, "paper"), "latest", t.TempDir(), nil)
		errc <- err
	}()
	<-started
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Errorf("Install after cancel = %v, want context.Canceled", err)
	}
}

func TestTooLarge(t *testing.T) {
	u := newUpstream(t)
	i, cacheDir := newInstaller(t, u)
	i.fetch.MetaMax = 64
	if _, _, err := install(t, i, "paper", "latest", nil); !errors.Is(err, ErrTooLarge) {
		t.Errorf("Install with a 64-byte metadata cap = %v, want ErrTooLarge", err)
	}
	i.fetch.MetaMax = upstream.DefaultMetaMax
	i.artifactMax = 10
	_, root, err := install(t, i, "paper", "latest", nil)
	if !errors.Is(err, ErrTooLarge) {
		t.Errorf("Install with a 10-byte artifact cap = %v, want ErrTooLarge", err)
	}
	if files := append(rootFiles(t, root), rootFiles(t, cacheDir)...); len(files) != 0 {
		t.Errorf("files left: %q", files)
	}

	// A body larger than its Content-Length promised is cut at the cap too.
	i.artifactMax = upstream.DefaultArtifactMax
	u.set(purpurJarRoute, func(w http.ResponseWriter, r *http.Request) {
		w.(http.Flusher).Flush() // no Content-Length: chunked
		w.Write(bytes.Repeat([]byte("x"), 100))
	})
	i.artifactMax = 50
	if _, _, err := install(t, i, "purpur", "latest", nil); !errors.Is(err, ErrTooLarge) {
		t.Errorf("Install with a chunked oversized body = %v, want ErrTooLarge", err)
	}
}

func TestNew(t *testing.T) {
	for _, o := range []Options{
		{},
		{CacheDir: t.TempDir(), MirrorURL: "mirror.local"},
		{CacheDir: t.TempDir(), MirrorURL: "ftp://mirror.local/"},
		{CacheDir: t.TempDir(), MirrorURL: "http://mirror.local/?x=1"},
	} {
		if _, err := New(o); err == nil {
			t.Errorf("New(%+v) = nil error", o)
		}
	}
	i, err := New(Options{CacheDir: t.TempDir(), MirrorURL: "http://127.0.0.1:9/m/"})
	if err != nil || i.fetch.Mirror != "http://127.0.0.1:9/m" || i.fetch.UserAgent != UserAgent("dev") {
		t.Errorf("New = %+v, %v", i, err)
	}
}

func TestConcurrentInstalls(t *testing.T) {
	u := newUpstream(t)
	i, _ := newInstaller(t, u)
	p := profile(t, "purpur")
	const n = 6
	errs := make(chan error, n)
	roots := make([]string, n)
	for k := range roots {
		roots[k] = filepath.Join(t.TempDir(), "root")
		go func() {
			_, err := i.Install(t.Context(), p, "1.21.4", roots[k], nil)
			errs <- err
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Errorf("Install: %v", err)
		}
	}
	for _, root := range roots {
		if data, _ := os.ReadFile(filepath.Join(root, "server.jar")); !bytes.Equal(data, jar("purpur-1.21.4-2416.jar")) {
			t.Errorf("%s/server.jar = %q", root, data)
		}
	}
}

// TestSymlinkInRoot plants server.jar and eula.txt as symlinks to files
// outside the root: Install replaces the links and never writes through
// them.
func TestSymlinkInRoot(t *testing.T) {
	u := newUpstream(t)
	i, _ := newInstaller(t, u)
	root := t.TempDir()
	outside := filepath.Join(t.TempDir(), "precious")
	if err := os.WriteFile(outside, []byte("keep me"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"server.jar", "eula.txt"} {
		if err := os.Symlink(outside, filepath.Join(root, name)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := i.Install(t.Context(), profile(t, "paper"), "latest", root, nil); err != nil {
		t.Fatal(err)
	}
	if data, _ := os.ReadFile(outside); string(data) != "keep me" {
		t.Errorf("file outside the root = %q", data)
	}
	for _, name := range []string{"server.jar", "eula.txt"} {
		if fi, err := os.Lstat(filepath.Join(root, name)); err != nil || !fi.Mode().IsRegular() {
			t.Errorf("%s is %v, %v; want a regular file", name, fi.Mode(), err)
		}
	}
}

// TestArtifactsSharedInS3 keeps the artifact cache in the S3 store (the
// test command's versitygw), as replicas sharing --blob-url do: a second
// installer with its own local directory finds every artifact the first
// stored and downloads nothing, and a bad checksum stores nothing.
func TestArtifactsSharedInS3(t *testing.T) {
	store := blobtest.S3(t)
	u := newUpstream(t)
	newOn := func() *Installer {
		i, err := New(Options{MirrorURL: u.mirror(), CacheDir: t.TempDir(), Artifacts: store, UserAgent: testUA, HTTPClient: u.srv.Client()})
		if err != nil {
			t.Fatal(err)
		}
		return i
	}
	for _, typ := range []string{"paper", "vanilla", "fabric"} {
		if _, _, err := install(t, newOn(), typ, "latest", nil); err != nil {
			t.Fatalf("%s on the first replica: %v", typ, err)
		}
	}
	before := u.count(paperJarRoute) + u.count(vanillaJarRoute) + u.count(fabricJarRoute)
	for _, typ := range []string{"paper", "vanilla", "fabric"} {
		res, root, err := install(t, newOn(), typ, "latest", nil)
		if err != nil {
			t.Fatalf("%s on the second replica: %v", typ, err)
		}
		data, _ := os.ReadFile(filepath.Join(root, res.Jar))
		if got := sha256Hex(data); got != res.SHA256 {
			t.Errorf("%s: %s has sha256 %s, want %s", typ, res.Jar, got, res.SHA256)
		}
	}
	if after := u.count(paperJarRoute) + u.count(vanillaJarRoute) + u.count(fabricJarRoute); after != before {
		t.Errorf("the second replica downloaded %d artifacts, want 0", after-before)
	}
	var keys []string
	if err := store.List(t.Context(), "artifacts/", func(in blob.Info) error { keys = append(keys, in.Key); return nil }); err != nil {
		t.Fatal(err)
	}
	// paper: its sha256 blob; vanilla: blob + sha1 index (+ the version
	// document is metadata, not cached); fabric: blob + url index.
	if len(keys) != 5 {
		t.Errorf("store holds %d keys, want 5: %v", len(keys), keys)
	}
}
