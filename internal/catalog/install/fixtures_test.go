package install

import (
	"archive/zip"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/kilnhq/kiln/internal/catalog"
)

// The tests in this file run every installer against copies of the
// upstreams' real answers in testdata/upstream (testdata/upstream/README.md
// names the source and date of each), served by the same stand-in as the
// other tests. Real jars cannot be fetched here, so every artifact is a
// small stand-in and the checksum the answer publishes for it is replaced,
// at serve time, by the stand-in's (u.subst); nothing else of an answer is
// changed. The Forge, NeoForge and Quilt installer jars are StandIn.java
// (testdata/standin), compiled by the test and run with the host's java.

const fixtureDir = "testdata/upstream"

// fixtureRoute maps a file under testdata/upstream to the route it
// answers: Jenkins' "…/api/json" is stored as "…/api.json", an artifact's
// "*fingerprint*/api/json" as "<artifact>.fingerprint.json", and the
// answers of Fill, Purpur, Fabric meta and Quilt meta (which have no
// extension in their URLs) as "<path>.json".
func fixtureRoute(rel string) string {
	rel = filepath.ToSlash(rel)
	switch {
	case strings.HasSuffix(rel, ".fingerprint.json"):
		return strings.TrimSuffix(rel, ".fingerprint.json") + "/*fingerprint*/api/json"
	case strings.HasSuffix(rel, "/api.json"):
		return strings.TrimSuffix(rel, "/api.json") + "/api/json"
	case strings.HasPrefix(rel, "fill.papermc.io/"), strings.HasPrefix(rel, "api.purpurmc.org/"),
		strings.HasPrefix(rel, "meta.fabricmc.net/"), strings.HasPrefix(rel, "meta.quiltmc.org/"):
		return strings.TrimSuffix(rel, ".json")
	}
	return rel
}

// newFixtures returns a stand-in upstream serving only the fixtures, with
// a stand-in artifact registered for every download a Fill build or a
// Mojang version document names.
func newFixtures(t *testing.T) *fakeUpstream {
	t.Helper()
	u := &fakeUpstream{t: t, routes: map[string]http.HandlerFunc{}, override: map[string]http.HandlerFunc{},
		mojangDocs: map[string]string{}, subst: map[string]string{}}
	err := filepath.WalkDir(fixtureDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() == "README.md" {
			return err
		}
		rel, _ := filepath.Rel(fixtureDir, p)
		u.routes[fixtureRoute(rel)] = u.fixtureHandler(p)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	u.fillArtifacts()
	u.mojangArtifacts()
	u.srv = httptest.NewServer(http.HandlerFunc(u.serve))
	t.Cleanup(u.srv.Close)
	return u
}

// fixtureHandler serves a fixture file with the substitutions applied.
func (u *fakeUpstream) fixtureHandler(file string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		body, err := os.ReadFile(file)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		switch path.Ext(file) {
		case ".xml":
			w.Header().Set("Content-Type", "text/xml")
		default:
			w.Header().Set("Content-Type", "application/json")
		}
		w.Write(u.substitute(body))
	}
}

func (u *fakeUpstream) substitute(body []byte) []byte {
	u.mu.Lock()
	defer u.mu.Unlock()
	s := string(body)
	for old, repl := range u.subst {
		s = strings.ReplaceAll(s, old, repl)
	}
	return []byte(s)
}

// sub applies the substitutions to s (a route or URL of a fixture).
func (u *fakeUpstream) sub(s string) string { return string(u.substitute([]byte(s))) }

func (u *fakeUpstream) replace(old, repl string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.subst[old] = repl
}

func fixtureJSON(t *testing.T, rel string, v any) {
	t.Helper()
	body, err := os.ReadFile(filepath.Join(fixtureDir, rel))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(body, v); err != nil {
		t.Fatalf("%s: %v", rel, err)
	}
}

// fillArtifacts registers a stand-in jar for every build in the Fill
// fixtures and substitutes its sha256 and size into the answers.
func (u *fakeUpstream) fillArtifacts() {
	files, _ := filepath.Glob(filepath.Join(fixtureDir, "fill.papermc.io/v3/projects/*/versions/*/builds.json"))
	for _, f := range files {
		rel, _ := filepath.Rel(fixtureDir, f)
		var builds []struct { // encoding/json matches the keys case-insensitively
			Downloads map[string]struct {
				Name, URL string
				Size      int64
				Checksums struct{ SHA256 string }
			}
		}
		fixtureJSON(u.t, rel, &builds)
		for _, b := range builds {
			d := b.Downloads["server:default"]
			content := jar(d.Name)
			u.replace(d.Checksums.SHA256, sha256Hex(content))
			// Fill's URLs name the object by its sha256, so the route moves too.
			u.raw(u.sub(strings.TrimPrefix(d.URL, "https://")), "application/java-archive", content)
			u.replace(fmt.Sprintf(`"size": %d`, d.Size), fmt.Sprintf(`"size": %d`, len(content)))
		}
	}
}

// mojangArtifacts registers a stand-in server jar for every version
// document, substitutes its sha1 and size into the document, and the
// document's new sha1 (and so its URL) into the manifest.
func (u *fakeUpstream) mojangArtifacts() {
	var manifest struct {
		Versions []struct{ ID, URL, SHA1 string } `json:"versions"`
	}
	fixtureJSON(u.t, "piston-meta.mojang.com/mc/game/version_manifest_v2.json", &manifest)
	for _, v := range manifest.Versions {
		rel := strings.TrimPrefix(v.URL, "https://")
		var doc struct {
			Downloads struct {
				Server struct {
					SHA1 string `json:"sha1"`
					Size int64  `json:"size"`
					URL  string `json:"url"`
				} `json:"server"`
			} `json:"downloads"`
		}
		fixtureJSON(u.t, rel, &doc)
		s := doc.Downloads.Server
		content := jar("minecraft_server." + v.ID + ".jar")
		u.replace(s.SHA1, sha1Hex(content))
		// Mojang's URLs name the object by its sha1, so the route moves too.
		u.raw(u.sub(strings.TrimPrefix(s.URL, "https://")), "application/java-archive", content)
		u.replace(fmt.Sprintf(`"size": %d`, s.Size), fmt.Sprintf(`"size": %d`, len(content)))
		raw, err := os.ReadFile(filepath.Join(fixtureDir, rel))
		if err != nil {
			u.t.Fatal(err)
		}
		newSHA1 := sha1Hex(u.substitute(raw))
		u.replace(v.SHA1, newSHA1)
		route := strings.Replace(rel, v.SHA1, newSHA1, 1)
		u.routes[route] = u.fixtureHandler(filepath.Join(fixtureDir, rel))
		u.mojangDocs[v.ID] = route
	}
}

// mojangJar is the stand-in server jar of a game version.
func mojangJar(id string) []byte { return jar("minecraft_server." + id + ".jar") }

var standIn struct {
	once  sync.Once
	class []byte
	err   error
}

// standInJar builds an installer jar that checks it is run with args and
// then follows plan (see testdata/standin/StandIn.java). Without a JDK the
// test fails under KILN_REQUIRE_JDK=1 (CI) and is skipped with one loud
// line otherwise.
func standInJar(t *testing.T, args string, plan ...string) []byte {
	t.Helper()
	standIn.once.Do(func() {
		javac, err := exec.LookPath("javac")
		if err != nil {
			standIn.err = fmt.Errorf("javac not found: %w", err)
			return
		}
		if _, err := exec.LookPath("java"); err != nil {
			standIn.err = fmt.Errorf("java not found: %w", err)
			return
		}
		dir, err := os.MkdirTemp("", "kiln-standin-")
		if err != nil {
			standIn.err = err
			return
		}
		defer os.RemoveAll(dir)
		out, err := exec.Command(javac, "--release", "8", "-nowarn", "-d", dir, "testdata/standin/StandIn.java").CombinedOutput()
		if err != nil {
			standIn.err = fmt.Errorf("javac: %v: %s", err, out)
			return
		}
		standIn.class, standIn.err = os.ReadFile(filepath.Join(dir, "StandIn.class"))
	})
	if standIn.err != nil {
		if os.Getenv("KILN_REQUIRE_JDK") == "1" {
			t.Fatalf("the installer stand-in cannot be built but KILN_REQUIRE_JDK=1: %v", standIn.err)
		}
		t.Skipf("SKIP JDK: the installer stand-in cannot be built (%v); set KILN_REQUIRE_JDK=1 to fail instead", standIn.err)
	}
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, f := range []struct {
		name string
		data []byte
	}{
		{"META-INF/MANIFEST.MF", []byte("Manifest-Version: 1.0\r\nMain-Class: StandIn\r\n\r\n")},
		{"StandIn.class", standIn.class},
		{"kiln-standin/plan.txt", []byte("args " + args + "\n" + strings.Join(plan, "\n") + "\n")},
	} {
		w, err := zw.Create(f.name)
		if err != nil {
			t.Fatal(err)
		}
		w.Write(f.data)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// mavenJar serves an installer jar at route with the checksum sidecars a
// Maven publishes (.sha1 and .md5; Forge's and NeoForge's Mavens also
// publish .sha256 for newer artifacts, which is then preferred).
func (u *fakeUpstream) mavenJar(route string, content []byte, sums ...string) {
	u.raw(route, "application/java-archive", content)
	for _, algo := range sums {
		var sum string
		switch algo {
		case "sha256":
			sum = sha256Hex(content)
		case "sha1":
			sum = sha1Hex(content)
		case "md5":
			sum = md5Hex(content)
		}
		u.raw(route+"."+algo, "text/plain", []byte(sum))
	}
}

// assertClean checks a failed install left nothing in the root or cache.
func assertClean(t *testing.T, root, cacheDir string) {
	t.Helper()
	if files := rootFiles(t, root); len(files) != 0 {
		t.Errorf("root holds %q after a failed install", files)
	}
	if files := rootFiles(t, cacheDir); len(files) != 0 {
		t.Errorf("cache holds %q after a failed install", files)
	}
}

// withoutEULA drops eula.txt, which is written from the EULA variable
// whatever the installer: these tests are about what the installer puts.
func withoutEULA(files []string) []string {
	return slices.DeleteFunc(files, func(f string) bool { return f == "eula.txt" })
}

func installInto(t *testing.T, i *Installer, typ, version, root string, env map[string]string) (catalog.Result, error) {
	t.Helper()
	return i.Install(t.Context(), profile(t, typ), version, root, env)
}

func TestFixtureFill(t *testing.T) {
	const build60 = "fill-data.papermc.io/v1/objects/8de7c52c3b02403503d16fac58003f1efef7dd7a0256786843927fa92ee57f1e/paper-1.21.8-60.jar"
	t.Run("latest skips versions whose builds are all ALPHA", func(t *testing.T) {
		u := newFixtures(t)
		i, _ := newInstaller(t, u)
		res, root, err := install(t, i, "paper", "latest", nil)
		if err != nil {
			t.Fatal(err)
		}
		want := catalog.Result{Version: "1.21.8", Build: "60", JavaMajor: 21, Jar: "server.jar",
			SHA256: sha256Hex(jar("paper-1.21.8-60.jar")), Source: "https://" + u.sub(build60), Checksum: "sha256"}
		if res != want {
			t.Errorf("Install\n got %+v\nwant %+v", res, want)
		}
		if data, _ := os.ReadFile(filepath.Join(root, "server.jar")); !bytes.Equal(data, jar("paper-1.21.8-60.jar")) {
			t.Errorf("server.jar = %q", data)
		}
		var asked []string
		for _, s := range u.seen() {
			asked = append(asked, s.Route)
		}
		wantAsked := []string{"fill.papermc.io/v3/projects/paper/versions",
			"fill.papermc.io/v3/projects/paper/versions/1.21.9/builds",
			"fill.papermc.io/v3/projects/paper/versions/1.21.9-rc1/builds",
			"fill.papermc.io/v3/projects/paper/versions/1.21.8/builds", u.sub(build60)}
		if !slices.Equal(asked, wantAsked) {
			t.Errorf("requests\n got %q\nwant %q", asked, wantAsked)
		}
	})
	for _, tt := range []struct {
		name    string
		version string
		env     map[string]string
		build   string
	}{
		{"pinned ALPHA build", "1.21.9", map[string]string{"BUILD_NUMBER": "49"}, "49"},
		{"pinned STABLE build", "1.21.8", map[string]string{"BUILD_NUMBER": "60"}, "60"},
		{"experimental channel", "latest", map[string]string{"CHANNEL": "experimental"}, "49"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			u := newFixtures(t)
			i, _ := newInstaller(t, u)
			res, _, err := install(t, i, "paper", tt.version, tt.env)
			if err != nil {
				t.Fatal(err)
			}
			if res.Build != tt.build || res.JavaMajor != 21 {
				t.Errorf("Install = %+v, want build %s, Java 21", res, tt.build)
			}
		})
	}
	t.Run("a version with only ALPHA builds needs a pin or the channel", func(t *testing.T) {
		u := newFixtures(t)
		i, _ := newInstaller(t, u)
		_, _, err := install(t, i, "paper", "1.21.9", nil)
		if !errors.Is(err, ErrVersionNotFound) || !strings.Contains(err.Error(), "CHANNEL=experimental") {
			t.Errorf("Install = %v", err)
		}
		_, _, err = install(t, i, "paper", "latest", map[string]string{"CHANNEL": "nightly"})
		if err == nil || !strings.Contains(err.Error(), "env.CHANNEL") {
			t.Errorf("Install with CHANNEL=nightly = %v", err)
		}
	})
	t.Run("checksum mismatch", func(t *testing.T) {
		u := newFixtures(t)
		u.set(u.sub(build60), func(w http.ResponseWriter, r *http.Request) { w.Write(jar("paper-1.21.8-6X.jar")) })
		i, cacheDir := newInstaller(t, u)
		_, root, err := install(t, i, "paper", "latest", nil)
		if ce, ok := errors.AsType[*ChecksumError](err); !ok || ce.Algo != "sha256" {
			t.Fatalf("Install = %v, want a sha256 *ChecksumError", err)
		}
		assertClean(t, root, cacheDir)
	})
}

func TestFixturePurpur(t *testing.T) {
	const (
		projectRoute = "api.purpurmc.org/v2/purpur"
		jarRoute     = "api.purpurmc.org/v2/purpur/1.21.1/2329/download"
	)
	content := jar("purpur-1.21.1-2329.jar")
	serve := func(u *fakeUpstream) {
		u.raw(jarRoute, "application/java-archive", content)
		u.replace("00000000000000000000000000000000", md5Hex(content))
	}
	t.Run("latest is metadata.current, not the last version listed", func(t *testing.T) {
		u := newFixtures(t)
		serve(u)
		i, _ := newInstaller(t, u)
		res, root, err := install(t, i, "purpur", "latest", nil)
		if err != nil {
			t.Fatal(err)
		}
		want := catalog.Result{Version: "1.21.1", Build: "2329", JavaMajor: 21, Jar: "server.jar",
			SHA256: sha256Hex(content), Source: "https://" + jarRoute, Checksum: "md5"}
		if res != want {
			t.Errorf("Install\n got %+v\nwant %+v", res, want)
		}
		if data, _ := os.ReadFile(filepath.Join(root, "server.jar")); !bytes.Equal(data, content) {
			t.Errorf("server.jar = %q", data)
		}
		var asked []string
		for _, s := range u.seen() {
			asked = append(asked, s.Route)
		}
		wantAsked := []string{projectRoute, "api.purpurmc.org/v2/purpur/1.21.1",
			"api.purpurmc.org/v2/purpur/1.21.1/2329", jarRoute}
		if !slices.Equal(asked, wantAsked) {
			t.Errorf("requests\n got %q\nwant %q", asked, wantAsked)
		}
	})
	// The captured answer without its metadata (and without 1.21.3, which
	// has no fixtures): the last version listed is taken.
	for _, tt := range []struct {
		name     string
		metadata any
	}{
		{"no metadata: the last version listed", nil},
		{"metadata.current not listed: the last version listed", map[string]string{"current": "1.21.3"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			u := newFixtures(t)
			serve(u)
			var project map[string]any
			fixtureJSON(t, "api.purpurmc.org/v2/purpur.json", &project)
			delete(project, "metadata")
			if tt.metadata != nil {
				project["metadata"] = tt.metadata
			}
			vs := project["versions"].([]any)
			project["versions"] = vs[:len(vs)-1]
			body, _ := json.Marshal(project)
			u.set(projectRoute, func(w http.ResponseWriter, r *http.Request) { w.Write(body) })
			i, _ := newInstaller(t, u)
			res, _, err := install(t, i, "purpur", "latest", nil)
			if err != nil || res.Version != "1.21.1" || res.Build != "2329" {
				t.Errorf("Install = %+v, %v; want 1.21.1 build 2329", res, err)
			}
		})
	}
	t.Run("pinned version and build", func(t *testing.T) {
		u := newFixtures(t)
		serve(u)
		i, _ := newInstaller(t, u)
		res, _, err := install(t, i, "purpur", "1.21.1", map[string]string{"BUILD_NUMBER": "2329"})
		if err != nil || res.Version != "1.21.1" || res.Build != "2329" || res.Checksum != "md5" {
			t.Errorf("Install = %+v, %v", res, err)
		}
		if _, _, err := install(t, i, "purpur", "1.21.1", map[string]string{"BUILD_NUMBER": "2330"}); !errors.Is(err, ErrVersionNotFound) {
			t.Errorf("Install(build 2330) = %v, want ErrVersionNotFound", err)
		}
		if _, _, err := install(t, i, "purpur", "1.21.2", nil); !errors.Is(err, ErrVersionNotFound) {
			t.Errorf("Install(1.21.2) = %v, want ErrVersionNotFound", err)
		}
	})
	t.Run("checksum mismatch", func(t *testing.T) {
		u := newFixtures(t)
		serve(u)
		u.set(jarRoute, func(w http.ResponseWriter, r *http.Request) { w.Write(jar("purpur-1.21.1-232X.jar")) })
		i, cacheDir := newInstaller(t, u)
		_, root, err := install(t, i, "purpur", "latest", nil)
		if ce, ok := errors.AsType[*ChecksumError](err); !ok || ce.Algo != "md5" {
			t.Fatalf("Install = %v, want an md5 *ChecksumError", err)
		}
		assertClean(t, root, cacheDir)
	})
}

func TestFixtureMojang(t *testing.T) {
	for _, tt := range []struct {
		version, want string
		java          int
	}{
		{"latest", "26.2", 25},
		{"snapshot", "26.3-snapshot-9", 25},
		{"1.20.1", "1.20.1", 17},
		{"1.16.5", "1.16.5", 8},
	} {
		t.Run(tt.version, func(t *testing.T) {
			u := newFixtures(t)
			i, _ := newInstaller(t, u)
			res, root, err := install(t, i, "vanilla", tt.version, nil)
			if err != nil {
				t.Fatal(err)
			}
			if res.Version != tt.want || res.JavaMajor != tt.java || res.Checksum != "sha1" ||
				!strings.HasPrefix(res.Source, "https://piston-data.mojang.com/v1/objects/") {
				t.Errorf("Install = %+v, want %s on Java %d", res, tt.want, tt.java)
			}
			if data, _ := os.ReadFile(filepath.Join(root, "server.jar")); !bytes.Equal(data, mojangJar(tt.want)) {
				t.Errorf("server.jar = %q", data)
			}
		})
	}
	t.Run("checksum mismatch", func(t *testing.T) {
		u := newFixtures(t)
		u.set(u.sub("piston-data.mojang.com/v1/objects/823e2250d24b3ddac457a60c92a6a941943fcd6a/server.jar"),
			func(w http.ResponseWriter, r *http.Request) { w.Write(mojangJar("26.X")) })
		i, cacheDir := newInstaller(t, u)
		_, root, err := install(t, i, "vanilla", "latest", nil)
		if ce, ok := errors.AsType[*ChecksumError](err); !ok || ce.Algo != "sha1" {
			t.Fatalf("Install = %v, want a sha1 *ChecksumError", err)
		}
		assertClean(t, root, cacheDir)
	})
}

func TestFixtureFabric(t *testing.T) {
	const (
		launcherRoute = "meta.fabricmc.net/v2/versions/loader/1.19.2/0.14.12/0.11.1/server/jar"
		vanillaRoute  = "piston-data.mojang.com/v1/objects/f69c284232d7c7580bd89a5a4931c3581eae1378/server.jar"
	)
	// The body and headers itzg/mc-image-helper recorded for this URL.
	launcher := []byte("fabric-server-mc.1.19.2-loader.0.14.12-launcher.0.11.1")
	serveLauncher := func(u *fakeUpstream) {
		u.routes[launcherRoute] = func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/java-archive")
			w.Header().Set("Content-Disposition", `attachment; filename="fabric-server-mc.1.19.2-loader.0.14.12-launcher.0.11.1.jar"`)
			w.Write(launcher)
		}
	}
	t.Run("first start makes no second download", func(t *testing.T) {
		u := newFixtures(t)
		serveLauncher(u)
		i, _ := newInstaller(t, u)
		res, root, err := install(t, i, "fabric", "1.19.2", nil)
		if err != nil {
			t.Fatal(err)
		}
		want := catalog.Result{Version: "1.19.2", Build: "0.14.12", JavaMajor: 17, Jar: "fabric-server-launcher.jar",
			SHA256: sha256Hex(launcher), Source: "https://" + launcherRoute}
		if res != want {
			t.Errorf("Install\n got %+v\nwant %+v", res, want)
		}
		// From now on the vanilla jar is refused: the launcher must find it
		// where ServerLauncher.java looks (.fabric/server/<game>-server.jar
		// under its working directory, the root; fabricGameJar cites the
		// lines), never fetch it again.
		u.set(u.sub(vanillaRoute), func(w http.ResponseWriter, r *http.Request) {
			t.Errorf("vanilla jar requested after install")
			w.WriteHeader(http.StatusGone)
		})
		if data, err := os.ReadFile(filepath.Join(root, ".fabric", "server", "1.19.2-server.jar")); err != nil || !bytes.Equal(data, mojangJar("1.19.2")) {
			t.Errorf(".fabric/server/1.19.2-server.jar = %q, %v; want the sha1-verified vanilla jar", data, err)
		}
		wantFiles := []string{".fabric/server/1.19.2-server.jar", "fabric-server-launcher.jar"}
		if got := withoutEULA(rootFiles(t, root)); !slices.Equal(got, wantFiles) {
			t.Errorf("root = %q, want %q", got, wantFiles)
		}
		// A second install takes both from the cache.
		if _, _, err := install(t, i, "fabric", "1.19.2", nil); err != nil {
			t.Fatal(err)
		}
		if n := u.count(launcherRoute); n != 1 {
			t.Errorf("launcher downloaded %d times, want 1", n)
		}
	})
	t.Run("snapshot is the newest game version meta lists", func(t *testing.T) {
		u := newFixtures(t)
		i, _ := newInstaller(t, u)
		// The fixture's game list starts with 1.20.1 (stable); no loader
		// list for it was captured, so the install stops there.
		_, _, err := install(t, i, "fabric", "snapshot", nil)
		if ue, ok := errors.AsType[*UpstreamError](err); !ok || ue.Status != 404 || !strings.HasSuffix(ue.URL, "/meta.fabricmc.net/v2/versions/loader/1.20.1") {
			t.Errorf("Install(snapshot) = %v, want the loader list of 1.20.1 asked for", err)
		}
	})
	t.Run("checksum mismatch of the vanilla jar", func(t *testing.T) {
		u := newFixtures(t)
		serveLauncher(u)
		u.set(u.sub(vanillaRoute), func(w http.ResponseWriter, r *http.Request) { w.Write(mojangJar("1.19.X")) })
		i, cacheDir := newInstaller(t, u)
		_, root, err := install(t, i, "fabric", "1.19.2", nil)
		if ce, ok := errors.AsType[*ChecksumError](err); !ok || ce.Algo != "sha1" {
			t.Fatalf("Install = %v, want a sha1 *ChecksumError", err)
		}
		assertClean(t, root, cacheDir)
		if n := u.count(launcherRoute); n != 0 {
			t.Errorf("launcher downloaded %d times after the vanilla jar failed", n)
		}
	})
}

// neoRoute is the installer jar of a net.neoforged:neoforge version.
func neoRoute(nv string) string {
	return "maven.neoforged.net/releases/net/neoforged/neoforge/" + nv + "/neoforge-" + nv + "-installer.jar"
}

// modernLayout is what a Forge or NeoForge 1.17+ installer leaves (run.sh
// as the installers write it for 1.20.1, with the -shim.jar check added
// from 1.20.3 on; see README.md in testdata/upstream).
func modernLayout(libs, full, shim string) []string {
	args := libs + "/" + full + "/unix_args.txt"
	plan := []string{
		"file user_jvm_args.txt\t# Xmx and other JVM arguments\\n",
		"file " + libs + "/" + full + "/unix_args.txt\t-DlibraryDirectory=libraries\\n-p libraries/cpw/mods/bootstraplauncher/1.1.2/bootstraplauncher-1.1.2.jar\\ncpw.mods.bootstraplauncher.BootstrapLauncher\\n",
		"file libraries/cpw/mods/bootstraplauncher/1.1.2/bootstraplauncher-1.1.2.jar\tPK stand-in library\\n",
	}
	run := "#!/usr/bin/env sh\\n"
	if shim != "" {
		plan = append(plan, "file "+shim+"\tPK stand-in shim\\n")
		run += "java -jar " + shim + " --onlyCheckJava || exit 1\\n"
	}
	run += "java @user_jvm_args.txt @" + args + " \"$@\"\\n"
	return append(plan, "file run.sh\t"+run)
}

func TestFixtureNeoForge(t *testing.T) {
	for _, tt := range []struct {
		name, version string
		env           map[string]string
		wantMC        string
		wantNV        string
	}{
		{"latest is the newest release", "latest", nil, "1.21.11", "21.11.42"},
		{"game version", "1.21.1", nil, "1.21.1", "21.1.226"},
		{"pinned", "1.21.1", map[string]string{"NEOFORGE_VERSION": "21.1.225"}, "1.21.1", "21.1.225"},
		{"year-based game without release takes the newest beta, never an alpha", "26.1", nil, "26.1", "26.1.0.19-beta"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			u := newFixtures(t)
			libs := "libraries/net/neoforged/neoforge"
			content := standInJar(t, "--installServer", modernLayout(libs, tt.wantNV, "")...)
			u.mavenJar(neoRoute(tt.wantNV), content, "sha1", "md5")
			i, _ := newInstaller(t, u)
			res, root, err := install(t, i, "neoforge", tt.version, tt.env)
			if err != nil {
				t.Fatal(err)
			}
			want := catalog.Result{Version: tt.wantMC, Build: tt.wantNV, JavaMajor: profile(t, "neoforge").JavaFor(tt.wantMC),
				ArgsFile: libs + "/" + tt.wantNV + "/unix_args.txt", SHA256: sha256Hex(content),
				Source: "https://" + neoRoute(tt.wantNV), Checksum: "sha1"}
			if res != want {
				t.Errorf("Install\n got %+v\nwant %+v", res, want)
			}
			if _, err := os.Stat(filepath.Join(root, installerJar)); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("installer jar left in the root: %v", err)
			}
		})
	}
	t.Run("only alpha builds: nothing to install", func(t *testing.T) {
		u := newFixtures(t)
		// The real metadata as it stood before the first 26.1 beta: the
		// same file with every 26.1 beta and every later version cut.
		body, err := os.ReadFile(filepath.Join(fixtureDir, "maven.neoforged.net/releases/net/neoforged/neoforge/maven-metadata.xml"))
		if err != nil {
			t.Fatal(err)
		}
		var kept []string
		for line := range strings.SplitSeq(string(body), "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "<version>26."); ok && !strings.Contains(v, "-alpha") {
				continue
			}
			kept = append(kept, line)
		}
		trimmed := strings.Join(kept, "\n")
		u.set("maven.neoforged.net/releases/net/neoforged/neoforge/maven-metadata.xml", func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprint(w, trimmed)
		})
		i, _ := newInstaller(t, u)
		for _, env := range []map[string]string{nil, {"NEOFORGE_VERSION": "26.1.0.0-alpha.10+snapshot-6"}} {
			_, root, err := install(t, i, "neoforge", "26.1", env)
			if !errors.Is(err, ErrVersionNotFound) {
				t.Errorf("Install(26.1, %v) = %v, want ErrVersionNotFound", env, err)
			}
			if files := rootFiles(t, root); len(files) != 0 {
				t.Errorf("root holds %q", files)
			}
		}
	})
	t.Run("1.20.1 from net.neoforged:forge", func(t *testing.T) {
		u := newFixtures(t)
		const full = "1.20.1-47.1.84"
		route := "maven.neoforged.net/releases/net/neoforged/forge/" + full + "/forge-" + full + "-installer.jar"
		libs := "libraries/net/neoforged/forge"
		content := standInJar(t, "--installServer", modernLayout(libs, full, "")...)
		u.mavenJar(route, content, "sha256", "sha1")
		i, _ := newInstaller(t, u)
		res, _, err := install(t, i, "neoforge", "1.20.1", nil)
		if err != nil {
			t.Fatal(err)
		}
		want := catalog.Result{Version: "1.20.1", Build: "47.1.84", JavaMajor: 17, ArgsFile: libs + "/" + full + "/unix_args.txt",
			SHA256: sha256Hex(content), Source: "https://" + route, Checksum: "sha256"}
		if res != want {
			t.Errorf("Install\n got %+v\nwant %+v", res, want)
		}
	})
	t.Run("clean reinstall", func(t *testing.T) {
		u := newFixtures(t)
		libs := "libraries/net/neoforged/neoforge"
		old := standInJar(t, "--installServer", modernLayout(libs, "21.1.225", "")...)
		u.mavenJar(neoRoute("21.1.225"), old, "sha1")
		// The new installer refuses to run while the old tree is there.
		next := standInJar(t, "--installServer", append([]string{"absent " + libs + "/21.1.225"}, modernLayout(libs, "21.1.226", "")...)...)
		u.mavenJar(neoRoute("21.1.226"), next, "sha1")
		i, _ := newInstaller(t, u)
		root := filepath.Join(t.TempDir(), "root")
		if _, err := installInto(t, i, "neoforge", "1.21.1", root, map[string]string{"NEOFORGE_VERSION": "21.1.225"}); err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(root, "world.dat"), []byte("keep"), 0o644)
		res, err := installInto(t, i, "neoforge", "1.21.1", root, nil)
		if err != nil {
			t.Fatal(err)
		}
		if res.Build != "21.1.226" {
			t.Errorf("Build = %s", res.Build)
		}
		entries, _ := os.ReadDir(filepath.Join(root, libs))
		if len(entries) != 1 || entries[0].Name() != "21.1.226" {
			t.Errorf("%s holds %v, want only 21.1.226", libs, entries)
		}
		if data, _ := os.ReadFile(filepath.Join(root, "world.dat")); string(data) != "keep" {
			t.Errorf("world.dat = %q: the reinstall touched more than the libraries tree", data)
		}

		// A symlink on the way out of the root is refused, never followed.
		outside := t.TempDir()
		os.MkdirAll(filepath.Join(outside, "neoforge", "21.1.226"), 0o755)
		os.RemoveAll(filepath.Join(root, "libraries/net/neoforged"))
		if err := os.Symlink(outside, filepath.Join(root, "libraries/net/neoforged")); err != nil {
			t.Fatal(err)
		}
		if _, err := installInto(t, i, "neoforge", "1.21.1", root, nil); err == nil || !strings.Contains(err.Error(), "remove the previous install's") {
			t.Errorf("Install through a symlink = %v, want a refusal", err)
		}
		if _, err := os.Stat(filepath.Join(outside, "neoforge", "21.1.226")); err != nil {
			t.Errorf("the install removed a directory outside the root: %v", err)
		}
	})
	t.Run("checksum mismatch", func(t *testing.T) {
		u := newFixtures(t)
		content := standInJar(t, "--installServer", "file ran\tthe installer ran\\n")
		u.mavenJar(neoRoute("21.11.42"), content)
		u.raw(neoRoute("21.11.42")+".sha1", "text/plain", []byte(sha1Hex([]byte("another jar"))))
		i, cacheDir := newInstaller(t, u)
		_, root, err := install(t, i, "neoforge", "latest", nil)
		if ce, ok := errors.AsType[*ChecksumError](err); !ok || ce.Algo != "sha1" {
			t.Fatalf("Install = %v, want a sha1 *ChecksumError", err)
		}
		assertClean(t, root, cacheDir)
	})
}

// forgeRoute is the installer jar of a Forge Maven version.
func forgeRoute(full string) string {
	return "maven.minecraftforge.net/net/minecraftforge/forge/" + full + "/forge-" + full + "-installer.jar"
}

func TestFixtureForge(t *testing.T) {
	libs := "libraries/net/minecraftforge/forge"
	legacy := func(full, mc string, universal bool) []string {
		name := "forge-" + full + ".jar"
		if universal {
			name = "forge-" + full + "-universal.jar"
		}
		return []string{
			"file minecraft_server." + mc + ".jar\tPK stand-in vanilla\\n",
			"file libraries/net/minecraft/launchwrapper/1.12/launchwrapper-1.12.jar\tPK stand-in library\\n",
			"file " + name + "\tPK stand-in forge\\n",
			"print The server installed successfully, you should now be able to run the file " + name,
		}
	}
	for _, tt := range []struct {
		name, version string
		env           map[string]string
		full          string // the Maven version the installer is found under
		plan          []string
		wantMC        string
		wantFV        string
		wantJar       string
		wantArgs      string
		wantJava      int
	}{
		{"1.7.10 under -1.7.10", "1.7.10", nil, "1.7.10-10.13.4.1614-1.7.10", legacy("1.7.10-10.13.4.1614-1.7.10", "1.7.10", true),
			"1.7.10", "10.13.4.1614", "forge-1.7.10-10.13.4.1614-1.7.10-universal.jar", "", 8},
		{"1.8.9 under -1.8.9", "1.8.9", nil, "1.8.9-11.15.1.2318-1.8.9", legacy("1.8.9-11.15.1.2318-1.8.9", "1.8.9", true),
			"1.8.9", "11.15.1.2318", "forge-1.8.9-11.15.1.2318-1.8.9-universal.jar", "", 8},
		{"1.12.2", "1.12.2", nil, "1.12.2-14.23.5.2859", legacy("1.12.2-14.23.5.2859", "1.12.2", false),
			"1.12.2", "14.23.5.2859", "forge-1.12.2-14.23.5.2859.jar", "", 8},
		{"1.20.1", "1.20.1", nil, "1.20.1-47.4.10", modernLayout(libs, "1.20.1-47.4.10", ""),
			"1.20.1", "47.4.10", "", libs + "/1.20.1-47.4.10/unix_args.txt", 17},
		{"1.21.11 with the shim jar", "1.21.11", nil, "1.21.11-61.2.0",
			modernLayout(libs, "1.21.11-61.2.0", "forge-1.21.11-61.2.0-shim.jar"),
			"1.21.11", "61.2.0", "", libs + "/1.21.11-61.2.0/unix_args.txt", 21},
		// The newest promoted game version is 26.2 (year-based, so newer
		// than 1.21.11 although the file's sorted keys put it last).
		{"latest game, latest forge", "latest", map[string]string{"FORGE_VERSION": "latest"}, "26.2-65.1.2",
			modernLayout(libs, "26.2-65.1.2", "forge-26.2-65.1.2-shim.jar"),
			"26.2", "65.1.2", "", libs + "/26.2-65.1.2/unix_args.txt", 25},
		{"latest game, recommended forge", "latest", nil, "26.2-65.1.0",
			modernLayout(libs, "26.2-65.1.0", "forge-26.2-65.1.0-shim.jar"),
			"26.2", "65.1.0", "", libs + "/26.2-65.1.0/unix_args.txt", 25},
		// 26.1.1 has only a latest promotion: the default falls back to it.
		{"no recommended promotion: the latest one", "26.1.1", nil, "26.1.1-63.0.2",
			modernLayout(libs, "26.1.1-63.0.2", "forge-26.1.1-63.0.2-shim.jar"),
			"26.1.1", "63.0.2", "", libs + "/26.1.1-63.0.2/unix_args.txt", 25},
	} {
		t.Run(tt.name, func(t *testing.T) {
			u := newFixtures(t)
			content := standInJar(t, "--installServer", tt.plan...)
			u.mavenJar(forgeRoute(tt.full), content, "sha1", "md5")
			i, _ := newInstaller(t, u)
			res, root, err := install(t, i, "forge", tt.version, tt.env)
			if err != nil {
				t.Fatal(err)
			}
			want := catalog.Result{Version: tt.wantMC, Build: tt.wantFV, JavaMajor: tt.wantJava, Jar: tt.wantJar, ArgsFile: tt.wantArgs,
				SHA256: sha256Hex(content), Source: "https://" + forgeRoute(tt.full), Checksum: "sha1"}
			if res != want {
				t.Errorf("Install\n got %+v\nwant %+v", res, want)
			}
			if _, err := os.Stat(filepath.Join(root, installerJar)); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("installer jar left in the root: %v", err)
			}
		})
	}
	t.Run("every Maven name is tried in order", func(t *testing.T) {
		u := newFixtures(t)
		i, _ := newInstaller(t, u)
		_, _, err := install(t, i, "forge", "1.7.10", map[string]string{"FORGE_VERSION": "10.13.0.1150"})
		if !errors.Is(err, ErrVersionNotFound) {
			t.Fatalf("Install = %v, want ErrVersionNotFound", err)
		}
		var heads []string
		for _, s := range u.seen() {
			if s.Method == http.MethodHead {
				heads = append(heads, s.Route)
			}
		}
		want := []string{forgeRoute("1.7.10-10.13.0.1150"), forgeRoute("1.7.10-10.13.0.1150-1.7.10"), forgeRoute("1.7.10-10.13.0.1150-mc172")}
		if !slices.Equal(heads, want) {
			t.Errorf("probed %q, want %q", heads, want)
		}
	})
	t.Run("clean reinstall", func(t *testing.T) {
		u := newFixtures(t)
		u.mavenJar(forgeRoute("1.20.1-47.4.10"), standInJar(t, "--installServer", modernLayout(libs, "1.20.1-47.4.10", "")...), "sha1")
		u.mavenJar(forgeRoute("1.20.1-47.4.23"), standInJar(t, "--installServer",
			append([]string{"absent " + libs + "/1.20.1-47.4.10"}, modernLayout(libs, "1.20.1-47.4.23", "")...)...), "sha1")
		i, _ := newInstaller(t, u)
		root := filepath.Join(t.TempDir(), "root")
		if _, err := installInto(t, i, "forge", "1.20.1", root, nil); err != nil {
			t.Fatal(err)
		}
		res, err := installInto(t, i, "forge", "1.20.1", root, map[string]string{"FORGE_VERSION": "latest"})
		if err != nil {
			t.Fatal(err)
		}
		if res.ArgsFile != libs+"/1.20.1-47.4.23/unix_args.txt" {
			t.Errorf("ArgsFile = %s", res.ArgsFile)
		}
		if entries, _ := os.ReadDir(filepath.Join(root, libs)); len(entries) != 1 {
			t.Errorf("%s holds %v after the reinstall", libs, entries)
		}
	})
	t.Run("checksum mismatch", func(t *testing.T) {
		u := newFixtures(t)
		u.mavenJar(forgeRoute("1.20.1-47.4.10"), standInJar(t, "--installServer", "file ran\tyes\\n"))
		u.raw(forgeRoute("1.20.1-47.4.10")+".sha1", "text/plain", []byte(strings.Repeat("ab", 20)))
		i, cacheDir := newInstaller(t, u)
		_, root, err := install(t, i, "forge", "1.20.1", nil)
		if ce, ok := errors.AsType[*ChecksumError](err); !ok || ce.Algo != "sha1" {
			t.Fatalf("Install = %v, want a sha1 *ChecksumError", err)
		}
		assertClean(t, root, cacheDir)
	})
}

func TestFixtureBungeeCord(t *testing.T) {
	const jarRoute = "ci.md-5.net/job/BungeeCord/2096/artifact/bootstrap/target/BungeeCord.jar"
	content := jar("BungeeCord-2096")
	serve := func(u *fakeUpstream) {
		u.raw(jarRoute, "application/java-archive", content)
		u.replace("00000000000000000000000000000000", md5Hex(content))
	}
	t.Run("latest is lastStableBuild, verified by the fingerprint of the archived jar", func(t *testing.T) {
		u := newFixtures(t)
		serve(u)
		i, _ := newInstaller(t, u)
		res, _, err := install(t, i, "bungeecord", "latest", nil)
		if err != nil {
			t.Fatal(err)
		}
		want := catalog.Result{Version: "2096", Build: "2096", JavaMajor: 21, Jar: "server.jar",
			SHA256: sha256Hex(content), Source: "https://" + jarRoute, Checksum: "md5"}
		if res != want {
			t.Errorf("Install\n got %+v\nwant %+v", res, want)
		}
		// lastSuccessfulBuild (2097, UNSTABLE in the fixture) is never asked.
		if n := u.count("ci.md-5.net/job/BungeeCord/lastSuccessfulBuild/api/json"); n != 0 {
			t.Errorf("lastSuccessfulBuild asked %d times", n)
		}
		// The Maven fingerprint net.md-5:BungeeCord.jar (689e4631…) is of
		// another file: the stand-in jar matches only the artifact's own.
		if md5Hex(content) == "689e46311c16ce9f2bf5a152f4a8ed75" {
			t.Fatal("stand-in jar collides with the fixture's Maven fingerprint")
		}
	})
	t.Run("pinned build", func(t *testing.T) {
		u := newFixtures(t)
		serve(u)
		i, _ := newInstaller(t, u)
		res, _, err := install(t, i, "bungeecord", "2096", nil)
		if err != nil || res.Build != "2096" || res.Checksum != "md5" {
			t.Errorf("Install(2096) = %+v, %v", res, err)
		}
		if n := u.count("ci.md-5.net/job/BungeeCord/lastStableBuild/api/json"); n != 0 {
			t.Errorf("lastStableBuild asked %d times for a pinned build", n)
		}
	})
	t.Run("an UNSTABLE build is not installed", func(t *testing.T) {
		u := newFixtures(t)
		serve(u)
		u.routes["ci.md-5.net/job/BungeeCord/2097/api/json"] = u.routes["ci.md-5.net/job/BungeeCord/lastSuccessfulBuild/api/json"]
		i, _ := newInstaller(t, u)
		if _, _, err := install(t, i, "bungeecord", "2097", nil); !errors.Is(err, ErrVersionNotFound) || !strings.Contains(err.Error(), "UNSTABLE") {
			t.Errorf("Install(2097) = %v, want ErrVersionNotFound naming UNSTABLE", err)
		}
	})
	t.Run("no fingerprint: refused", func(t *testing.T) {
		u := newFixtures(t)
		serve(u)
		delete(u.routes, jarRoute+"/*fingerprint*/api/json")
		i, cacheDir := newInstaller(t, u)
		_, root, err := install(t, i, "bungeecord", "latest", nil)
		if err == nil || !strings.Contains(err.Error(), "published no fingerprint") {
			t.Fatalf("Install = %v, want a refusal", err)
		}
		assertClean(t, root, cacheDir)
		if n := u.count(jarRoute); n != 0 {
			t.Errorf("jar downloaded %d times", n)
		}
	})
	t.Run("checksum mismatch", func(t *testing.T) {
		u := newFixtures(t)
		serve(u)
		u.set(jarRoute, func(w http.ResponseWriter, r *http.Request) { w.Write(jar("BungeeCord-209X")) })
		i, cacheDir := newInstaller(t, u)
		_, root, err := install(t, i, "bungeecord", "latest", nil)
		if ce, ok := errors.AsType[*ChecksumError](err); !ok || ce.Algo != "md5" {
			t.Fatalf("Install = %v, want an md5 *ChecksumError", err)
		}
		assertClean(t, root, cacheDir)
	})
}

func TestFixtureQuilt(t *testing.T) {
	const instRoute = "maven.quiltmc.org/repository/release/org/quiltmc/quilt-installer/0.15.1/quilt-installer-0.15.1.jar"
	plan := []string{
		"file libraries/org/quiltmc/quilt-loader/0.26.4/quilt-loader-0.26.4.jar\tPK stand-in loader\\n",
		"file quilt-server-launch.jar\tPK stand-in launcher\\n",
		"print Installing server launcher at: .",
	}
	t.Run("latest", func(t *testing.T) {
		u := newFixtures(t)
		content := standInJar(t, "install server 1.20.1 0.26.4 --install-dir=.", plan...)
		u.mavenJar(instRoute, content, "sha1", "md5")
		i, _ := newInstaller(t, u)
		res, root, err := install(t, i, "quilt", "latest", nil)
		if err != nil {
			t.Fatal(err)
		}
		want := catalog.Result{Version: "1.20.1", Build: "0.26.4", JavaMajor: 17, Jar: "quilt-server-launch.jar",
			SHA256: sha256Hex(content), Source: "https://" + instRoute, Checksum: "sha1"}
		if res != want {
			t.Errorf("Install\n got %+v\nwant %+v", res, want)
		}
		if data, _ := os.ReadFile(filepath.Join(root, "server.jar")); !bytes.Equal(data, mojangJar("1.20.1")) {
			t.Errorf("server.jar = %q, want the sha1-verified vanilla jar", data)
		}
		wantFiles := []string{"libraries/org/quiltmc/quilt-loader/0.26.4/quilt-loader-0.26.4.jar", "quilt-server-launch.jar", "server.jar"}
		if got := withoutEULA(rootFiles(t, root)); !slices.Equal(got, wantFiles) {
			t.Errorf("root = %q, want %q", got, wantFiles)
		}
	})
	t.Run("an installer that leaves no launcher fails the install", func(t *testing.T) {
		u := newFixtures(t)
		u.mavenJar(instRoute, standInJar(t, "install server 1.20.1 0.26.4 --install-dir=.", "print java.io.IOException: meta unreachable"), "sha1")
		i, _ := newInstaller(t, u)
		if _, _, err := install(t, i, "quilt", "latest", nil); err == nil || !strings.Contains(err.Error(), "left no quilt-server-launch.jar") {
			t.Errorf("Install = %v", err)
		}
	})
	t.Run("checksum mismatch", func(t *testing.T) {
		u := newFixtures(t)
		u.mavenJar(instRoute, standInJar(t, "install server 1.20.1 0.26.4 --install-dir=.", plan...))
		u.raw(instRoute+".sha1", "text/plain", []byte(sha1Hex([]byte("another jar"))))
		i, cacheDir := newInstaller(t, u)
		_, root, err := install(t, i, "quilt", "latest", nil)
		if ce, ok := errors.AsType[*ChecksumError](err); !ok || ce.Algo != "sha1" {
			t.Fatalf("Install = %v, want a sha1 *ChecksumError", err)
		}
		assertClean(t, root, cacheDir)
	})
}
