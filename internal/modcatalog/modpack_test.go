package modcatalog

import (
	"archive/zip"
	"bytes"
	"crypto/sha1"
	"crypto/sha512"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kilnhq/kiln/internal/validate"
)

// packEnv is installEnv (a real Paper 1.21.4 server, the catalog stub)
// with Modpacks whose allowed origins add the stub.
type packEnv struct {
	*installEnv
	mp *Modpacks

	mu     sync.Mutex
	served map[string][]byte // /dl/<name> → body
	gets   []string          // /dl/ paths requested
}

func newPackEnv(t testing.TB, mod func(*ModpackOptions)) *packEnv {
	t.Helper()
	e := &packEnv{installEnv: newInstallEnv(t), served: map[string][]byte{}}
	opts := ModpackOptions{Origins: append(slices.Clone(DefaultModpackOrigins), e.up.srv.URL)}
	if mod != nil {
		mod(&opts)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	mp, err := NewModpacks(e.in.cat, e.in.servers.(ModpackServers), opts, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(mp.Close)
	e.mp = mp
	e.up.mux.HandleFunc("GET /dl/", func(w http.ResponseWriter, r *http.Request) {
		e.mu.Lock()
		body, ok := e.served[r.URL.Path]
		e.gets = append(e.gets, r.URL.Path)
		e.mu.Unlock()
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Write(body)
	})
	return e
}

// serve makes the stub answer /dl/name with body; it returns the URL.
func (e *packEnv) serve(name string, body []byte) string {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.served["/dl/"+name] = body
	return e.up.srv.URL + "/dl/" + name
}

// packFile is an entry of files[] for body served at url.
func packFile(path, url string, body []byte, env string) map[string]any {
	s5, s1 := sha512.Sum512(body), sha1.Sum(body)
	f := map[string]any{
		"path":      path,
		"hashes":    map[string]string{"sha512": hex.EncodeToString(s5[:]), "sha1": hex.EncodeToString(s1[:])},
		"downloads": []string{url},
		"fileSize":  len(body),
	}
	if env != "" {
		f["env"] = map[string]string{"client": "required", "server": env}
	}
	return f
}

// buildPack zips an index (modrinth.index.json) and other entries, in the
// order given (name, content pairs).
func buildPack(t testing.TB, index map[string]any, entries ...string) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	raw, err := json.Marshal(index)
	if err != nil {
		t.Fatal(err)
	}
	w, _ := zw.Create("modrinth.index.json")
	w.Write(raw)
	for i := 0; i+1 < len(entries); i += 2 {
		w, err := zw.Create(entries[i])
		if err != nil {
			t.Fatal(err)
		}
		w.Write([]byte(entries[i+1]))
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func index(files ...map[string]any) map[string]any {
	if files == nil {
		files = []map[string]any{}
	}
	return map[string]any{
		"formatVersion": 1, "game": "minecraft", "versionId": "1.0.0", "name": "Test Pack",
		"files": files, "dependencies": map[string]string{"minecraft": "1.21.4"},
	}
}

// servePackVersion makes /v2/version/PackVer1 Modrinth's published
// Version example made a modpack version for 1.21.4 (loaders: minecraft,
// which needs no mod loader) whose one file is pack, served by the stub.
func (e *packEnv) servePackVersion(t *testing.T, pack []byte) {
	t.Helper()
	sum := sha512.Sum512(pack)
	url := e.serve("pack.mrpack", pack)
	body := fixture(t, "modrinth/version.json", func(doc any) {
		v := doc.(map[string]any)
		v["id"], v["loaders"], v["game_versions"], v["dependencies"] = "PackVer1", []any{"minecraft"}, []any{"1.21.4"}, []any{}
		f := at(v, "files", 0)
		f["filename"], f["url"], f["primary"], f["size"], f["file_type"] = "Test Pack 1.0.0.mrpack", url, true, len(pack), nil
		f["hashes"] = map[string]any{"sha512": hex.EncodeToString(sum[:])}
	})
	e.up.serveBody("GET /v2/version/PackVer1", body)
}

// writePack puts pack in the server's files at rel.
func (e *packEnv) writePack(t testing.TB, rel string, pack []byte) {
	t.Helper()
	p := filepath.Join(e.root, filepath.FromSlash(rel))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, pack, 0o644); err != nil {
		t.Fatal(err)
	}
}

func (e *packEnv) waitPack(t testing.TB, id string) ModpackInstall {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		got, err := e.mp.Get(t.Context(), e.teamID, e.serverID, id)
		if err != nil {
			t.Fatal(err)
		}
		if got.Status != PackRunning {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("modpack install %s still running: %+v", id, got)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// tree is every entry of the server's root: path → content ("/" for a
// directory).
func (e *packEnv) tree(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(e.root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(e.root, p)
		if d.IsDir() {
			out[rel] = "/"
			return nil
		}
		b, err := os.ReadFile(p)
		out[rel] = string(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// sameTree reports every entry added, removed or changed.
func sameTree(t *testing.T, before, after map[string]string) {
	t.Helper()
	for p, b := range before {
		if a, ok := after[p]; !ok {
			t.Errorf("%s was removed", p)
		} else if a != b {
			t.Errorf("%s changed: %q, was %q", p, a, b)
		}
	}
	for p := range after {
		if _, ok := before[p]; !ok {
			t.Errorf("%s was added", p)
		}
	}
}

// goodPack is a pack with two downloads, a client-only file, overrides
// and server-overrides that overlap.
func (e *packEnv) goodPack(t *testing.T) []byte {
	jar, cfg, client := []byte("PK\x03\x04 sodium-free server mod"), []byte("downloaded config"), []byte("client only")
	return buildPack(t, index(
		packFile("mods/lithium.jar", e.serve("lithium.jar", jar), jar, "required"),
		packFile("config/replaced.toml", e.serve("replaced.toml", cfg), cfg, ""),
		packFile("mods/sodium.jar", e.serve("sodium.jar", client), client, "unsupported"),
	),
		"server-overrides/config/first.toml", "server-overrides win",
		"overrides/", "",
		"overrides/config/", "",
		"overrides/config/first.toml", "even when they come first",
		"overrides/config/both.toml", "from overrides",
		"overrides/config/replaced.toml", "override beats download",
		"server-overrides/config/both.toml", "from server-overrides",
		"overrides/server.properties", "motd=pack",
		"client-overrides/options.txt", "client",
	)
}

func (e *packEnv) checkGood(t *testing.T, got ModpackInstall) {
	t.Helper()
	if got.Status != PackDone || got.Error != nil {
		t.Fatalf("install = %+v, want done", got)
	}
	want := []string{"config/both.toml", "config/first.toml", "config/replaced.toml", "mods/lithium.jar", "server.properties"}
	if !slices.Equal(got.Installed, want) {
		t.Errorf("installed = %q, want %q", got.Installed, want)
	}
	if want := []string{"mods/sodium.jar"}; !slices.Equal(got.Skipped, want) {
		t.Errorf("skipped = %q, want %q", got.Skipped, want)
	}
	if got.InstalledCount != 5 || got.SkippedCount != 1 {
		t.Errorf("counts = %d installed, %d skipped; want 5 and 1", got.InstalledCount, got.SkippedCount)
	}
	if got.FilesTotal != 5 || got.FilesDone != 5 {
		t.Errorf("files %d/%d, want 5/5", got.FilesDone, got.FilesTotal)
	}
	if got.Pack == nil || got.Pack.Name != "Test Pack" || got.Pack.Dependencies["minecraft"] != "1.21.4" {
		t.Errorf("pack = %+v, want Test Pack for 1.21.4", got.Pack)
	}
	for rel, want := range map[string]string{
		"mods/lithium.jar":     "PK\x03\x04 sodium-free server mod",
		"config/both.toml":     "from server-overrides",
		"config/first.toml":    "server-overrides win",
		"config/replaced.toml": "override beats download",
		"server.properties":    "motd=pack",
	} {
		b, err := os.ReadFile(filepath.Join(e.root, rel))
		if err != nil || string(b) != want {
			t.Errorf("%s = %q, %v; want %q", rel, b, err, want)
		}
	}
	tree := e.tree(t)
	for p := range tree {
		if strings.Contains(p, ".kiln-tmp") || strings.HasPrefix(p, "options.txt") || strings.Contains(p, "sodium") {
			t.Errorf("the root holds %s after the install", p)
		}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, g := range e.gets {
		if g == "/dl/sodium.jar" || g == "/dl/replaced.toml" {
			t.Errorf("%s was downloaded: client-only or overridden files need not be", g)
		}
	}
}

// TestModpackFromVersion: a Modrinth version's .mrpack installs byte for
// byte, server-overrides over overrides over downloads, client-only
// files skipped.
func TestModpackFromVersion(t *testing.T) {
	e := newPackEnv(t, nil)
	e.servePackVersion(t, e.goodPack(t))
	got, err := e.mp.Install(t.Context(), e.teamID, e.serverID, ModpackRequest{VersionID: "PackVer1"})
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != PackRunning || got.ID == "" {
		t.Errorf("Install = %+v, want a running install", got)
	}
	e.checkGood(t, e.waitPack(t, got.ID))
}

// TestModpackListsCapped: a finished install keeps at most MaxListed of
// the paths it put in place (the first ones, sorted) and counts them all:
// what finished installs hold stays small whatever the packs (before,
// every path of the last 100 installs was kept: 600 MiB for four packs of
// 100,000 files).
func TestModpackListsCapped(t *testing.T) {
	e := newPackEnv(t, nil)
	const n = MaxListed + 234
	var entries []string
	for i := range n {
		entries = append(entries, fmt.Sprintf("overrides/config/f%05d.toml", i), "x")
	}
	e.writePack(t, "packs/big.mrpack", buildPack(t, index(), entries...))
	got, err := e.mp.Install(t.Context(), e.teamID, e.serverID, ModpackRequest{File: "/packs/big.mrpack"})
	if err != nil {
		t.Fatal(err)
	}
	done := e.waitPack(t, got.ID)
	if done.Status != PackDone || done.InstalledCount != n || len(done.Installed) != MaxListed ||
		done.Installed[0] != "config/f00000.toml" || done.Installed[MaxListed-1] != fmt.Sprintf("config/f%05d.toml", MaxListed-1) {
		t.Errorf("install = %s, %d counted, %d listed (%q … %q); want done, %d counted, the first %d listed",
			done.Status, done.InstalledCount, len(done.Installed), done.Installed[0], done.Installed[len(done.Installed)-1], n, MaxListed)
	}
	if cap(done.Installed) > MaxListed {
		t.Errorf("the kept list holds an array of %d paths", cap(done.Installed))
	}
}

// TestModpackFromFile: an .mrpack in the server's files installs.
func TestModpackFromFile(t *testing.T) {
	e := newPackEnv(t, nil)
	e.writePack(t, "packs/test.mrpack", e.goodPack(t))
	got, err := e.mp.Install(t.Context(), e.teamID, e.serverID, ModpackRequest{File: "/packs/test.mrpack"})
	if err != nil {
		t.Fatal(err)
	}
	e.checkGood(t, e.waitPack(t, got.ID))
	if _, err := os.Stat(filepath.Join(e.root, "packs/test.mrpack")); err != nil {
		t.Errorf("the pack file is gone: %v", err)
	}
}

// TestModpackRefused: hostile or unfit packs are refused, the server's
// root unchanged. Packs from the server's files are refused by the
// request; a Modrinth version's after its download (the install fails).
func TestModpackRefused(t *testing.T) {
	e := newPackEnv(t, nil)
	jar := []byte("PK\x03\x04 a mod")
	ok := func() map[string]any { return packFile("mods/a.jar", e.serve("a.jar", jar), jar, "required") }
	withDeps := func(deps map[string]string) map[string]any {
		ix := index(ok())
		ix["dependencies"] = deps
		return ix
	}
	badHash := ok()
	badHash["path"] = "mods/b.jar"
	badHash["hashes"] = map[string]string{"sha512": strings.Repeat("ab", 64)}
	badSHA1 := ok()
	badSHA1["hashes"].(map[string]string)["sha1"] = strings.Repeat("cd", 20)
	tests := []struct {
		name string
		pack []byte
		want string // in the message
		late bool   // refused only when the files are downloaded
	}{
		{"dotdot path", buildPack(t, index(ok(), packFile("mods/../../evil.jar", e.serve("evil.jar", jar), jar, ""))), `leads out of the server's root`, false},
		{"absolute path", buildPack(t, index(packFile("/etc/cron.d/evil", e.serve("evil", jar), jar, ""))), "is an absolute path", false},
		{"override escapes", buildPack(t, index(ok()), "overrides/../../evil.txt", "x"), `leads out of the server's root`, false},
		{"server-override escapes", buildPack(t, index(ok()), "server-overrides/mods/../../../x", "x"), `leads out of the server's root`, false},
		{"override absolute", buildPack(t, index(ok()), "overrides//etc/passwd", "x"), "is an absolute path", false},
		{"host outside the list", buildPack(t, index(ok(), packFile("mods/b.jar", "https://evil.example.com/b.jar", jar, ""))), "evil.example.com, which is not a host", false},
		{"http cdn", buildPack(t, index(packFile("mods/b.jar", "http://cdn.modrinth.com/b.jar", jar, ""))), "not a host", false},
		{"fabric pack on paper", buildPack(t, withDeps(map[string]string{"minecraft": "1.20.1", "fabric-loader": "0.16.9"})),
			"this pack is for fabric on Minecraft 1.20.1; the server runs paper 1.21.4: pick a fabric server on Minecraft 1.20.1", false},
		{"other game version", buildPack(t, withDeps(map[string]string{"minecraft": "1.20.1"})), "pick a paper server on Minecraft 1.20.1", false},
		{"unknown dependency", buildPack(t, withDeps(map[string]string{"minecraft": "1.21.4", "rift": "1"})), `depends on "rift"`, false},
		{"format version 2", buildPack(t, map[string]any{"formatVersion": 2, "game": "minecraft", "dependencies": map[string]string{"minecraft": "1.21.4"}}), "format version is 2", false},
		{"not a zip", []byte("not a zip"), "not a zip archive", false},
		{"file over directory", buildPack(t, index(ok()), "overrides/mods/a.jar/x", "x"), "needs it to be a directory", false},
		{"sha512 mismatch", buildPack(t, index(ok(), badHash)), "mods/b.jar: sha512 does not match", true},
		{"sha1 mismatch", buildPack(t, index(badSHA1)), "mods/a.jar: sha1 does not match", true},
		{"download missing", buildPack(t, index(packFile("mods/gone.jar", e.up.srv.URL+"/dl/gone.jar", jar, ""))), "mods/gone.jar: download from 127.0.0.1", true},
	}
	// Something the pack would overwrite, to see it kept.
	e.writePack(t, "mods/a.jar", []byte("the old a.jar"))
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e.writePack(t, "packs/p.mrpack", tt.pack)
			before := e.tree(t)
			got, err := e.mp.Install(t.Context(), e.teamID, e.serverID, ModpackRequest{File: "packs/p.mrpack"})
			if tt.late {
				if err != nil {
					t.Fatalf("Install = %v, want it started", err)
				}
				got = e.waitPack(t, got.ID)
				if got.Status != PackFailed || got.Error == nil || !strings.Contains(*got.Error, tt.want) || !strings.HasSuffix(*got.Error, "nothing was installed") {
					t.Errorf("install = %+v (%v), want failed containing %q", got, got.Error, tt.want)
				}
			} else {
				ve, ok := errors.AsType[*validate.Error](err)
				if !ok || ve.Issues[0].Path != "file" || !strings.Contains(ve.Issues[0].Message, tt.want) {
					t.Errorf("Install = %v, want a validation error at file containing %q", err, tt.want)
				}
			}
			sameTree(t, before, e.tree(t))
		})
	}
	// From a version, the same checks run once the pack is downloaded.
	t.Run("version with escaping path", func(t *testing.T) {
		before := e.tree(t)
		e.servePackVersion(t, buildPack(t, index(ok()), "overrides/../x", "x"))
		got, err := e.mp.Install(t.Context(), e.teamID, e.serverID, ModpackRequest{VersionID: "PackVer1"})
		if err != nil {
			t.Fatal(err)
		}
		got = e.waitPack(t, got.ID)
		if got.Status != PackFailed || !strings.Contains(*got.Error, "leads out of the server's root") {
			t.Errorf("install = %+v, want failed for the escaping override", got)
		}
		sameTree(t, before, e.tree(t))
	})
	t.Run("version pack tampered", func(t *testing.T) {
		before := e.tree(t)
		e.servePackVersion(t, buildPack(t, index(ok())))
		e.serve("pack.mrpack", []byte("PK tampered"))
		got, _ := e.mp.Install(t.Context(), e.teamID, e.serverID, ModpackRequest{VersionID: "PackVer1"})
		got = e.waitPack(t, got.ID)
		if got.Status != PackFailed || !strings.Contains(*got.Error, "the pack: has 11 bytes") {
			t.Errorf("install = %+v, want failed for the pack's size", got)
		}
		sameTree(t, before, e.tree(t))
	})
}

// TestModpackRequests: bad requests, unknown installs, another team's.
func TestModpackRequests(t *testing.T) {
	e := newPackEnv(t, nil)
	for _, tt := range []struct {
		req        ModpackRequest
		path, want string
	}{
		{ModpackRequest{}, "version_id", "or file is required"},
		{ModpackRequest{VersionID: "a", File: "b"}, "file", "name one pack"},
		{ModpackRequest{VersionID: "no spaces"}, "version_id", "Modrinth version id"},
		{ModpackRequest{VersionID: "null"}, "version_id", "Modrinth version id (8 letters and digits"},
		{ModpackRequest{VersionID: "PackVer10"}, "version_id", "Modrinth version id"},
		{ModpackRequest{File: "../x.mrpack"}, "file", `".."`},
		{ModpackRequest{File: "/"}, "file", "not the server's root"},
	} {
		_, err := e.mp.Install(t.Context(), e.teamID, e.serverID, tt.req)
		ve, ok := errors.AsType[*validate.Error](err)
		if !ok || ve.Issues[0].Path != tt.path || !strings.Contains(ve.Issues[0].Message, tt.want) {
			t.Errorf("Install(%+v) = %v, want a validation error at %s containing %q", tt.req, err, tt.path, tt.want)
		}
	}
	if _, err := e.mp.Get(t.Context(), e.teamID, e.serverID, "nope"); !errors.Is(err, ErrModpackNotFound) {
		t.Errorf("Get(unknown) = %v, want ErrModpackNotFound", err)
	}
	e.writePack(t, "p.mrpack", buildPack(t, index()))
	got, err := e.mp.Install(t.Context(), e.teamID, e.serverID, ModpackRequest{File: "p.mrpack"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.mp.Get(t.Context(), "other-team", e.serverID, got.ID); err == nil {
		t.Errorf("Get from another team = nil error, want one")
	}
	if done := e.waitPack(t, got.ID); done.Status != PackDone || len(done.Installed) != 0 {
		t.Errorf("empty pack = %+v, want done with nothing installed", done)
	}
}

// TestModpackParallel: a 200-file pack installs with at most Parallel (8)
// downloads in flight, and the limit is reached (the stub holds the first
// requests until 8 are in flight). Its memory is measured by
// BenchmarkModpack200.
func TestModpackParallel(t *testing.T) {
	e := newPackEnv(t, nil)
	const n = 200
	var (
		mu       sync.Mutex
		inFlight int
		most     int
		gated    bool
		full     = make(chan struct{})
	)
	var list []map[string]any
	for i := range n {
		body := fmt.Appendf(nil, "mod %d", i)
		name := fmt.Sprintf("m%03d.jar", i)
		list = append(list, packFile("mods/"+name, e.up.srv.URL+"/par/"+name, body, ""))
		e.up.handle("GET /par/"+name, func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			inFlight++
			most = max(most, inFlight)
			if inFlight == 8 && !gated {
				// Hold the first 8 a little longer: a ninth download
				// started meanwhile would show. A correct limit passes
				// whatever the timing.
				gated = true
				time.AfterFunc(100*time.Millisecond, func() { close(full) })
			}
			mu.Unlock()
			select { // hold the first ones until 8 are in flight
			case <-full:
			case <-r.Context().Done():
			}
			w.Write(body)
			mu.Lock()
			inFlight--
			mu.Unlock()
		})
	}
	e.writePack(t, "p.mrpack", buildPack(t, index(list...)))
	got, err := e.mp.Install(t.Context(), e.teamID, e.serverID, ModpackRequest{File: "p.mrpack"})
	if err != nil {
		t.Fatal(err)
	}
	got = e.waitPack(t, got.ID)
	if got.Status != PackDone || got.FilesDone != n || got.FilesTotal != n {
		t.Fatalf("install = %+v, want done with %d files", got, n)
	}
	mu.Lock()
	defer mu.Unlock()
	if most != 8 {
		t.Errorf("at most %d downloads were in flight, want 8", most)
	}
	for i := range n {
		b, err := os.ReadFile(filepath.Join(e.root, "mods", fmt.Sprintf("m%03d.jar", i)))
		if err != nil || string(b) != fmt.Sprintf("mod %d", i) {
			t.Errorf("mods/m%03d.jar = %q, %v", i, b, err)
		}
	}
}

// TestModpackClose: one install per server at a time; Close stops an
// install mid-download, which fails with the root unchanged.
func TestModpackClose(t *testing.T) {
	e := newPackEnv(t, nil)
	arrived := make(chan struct{})
	e.up.handle("GET /slow/a.jar", func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("PK partial")) // some bytes staged, then nothing
		w.(http.Flusher).Flush()
		close(arrived)
		<-r.Context().Done()
	})
	jar := []byte("PK\x03\x04 a mod")
	e.writePack(t, "p.mrpack", buildPack(t, index(packFile("mods/a.jar", e.up.srv.URL+"/slow/a.jar", jar, "")), "overrides/x.txt", "x"))
	before := e.tree(t)
	got, err := e.mp.Install(t.Context(), e.teamID, e.serverID, ModpackRequest{File: "p.mrpack"})
	if err != nil {
		t.Fatal(err)
	}
	<-arrived
	if _, err := e.mp.Install(t.Context(), e.teamID, e.serverID, ModpackRequest{File: "p.mrpack"}); !errors.Is(err, ErrModpackBusy) {
		t.Errorf("a second Install while one runs = %v, want ErrModpackBusy", err)
	}
	e.mp.Close()
	got, err = e.mp.Get(t.Context(), e.teamID, e.serverID, got.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != PackFailed || got.Error == nil || !strings.Contains(*got.Error, "shutting down") {
		t.Errorf("install after Close = %+v, want failed", got)
	}
	sameTree(t, before, e.tree(t))
	if _, err := e.mp.Install(t.Context(), e.teamID, e.serverID, ModpackRequest{File: "p.mrpack"}); !errors.Is(err, ErrClosed) {
		t.Errorf("Install after Close = %v, want ErrClosed", err)
	}
}
