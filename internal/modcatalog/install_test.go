package modcatalog

import (
	"context"
	"crypto/md5"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kilnhq/kiln/internal/auth"
	"github.com/kilnhq/kiln/internal/pull"
	"github.com/kilnhq/kiln/internal/servers"
	"github.com/kilnhq/kiln/internal/servers/serverstest"
	"github.com/kilnhq/kiln/internal/store/storetest"
	"github.com/kilnhq/kiln/internal/validate"
)

// installEnv is a real Paper server (installed from a local Fill
// stand-in), a real pull.Manager allowed to reach loopback, and the
// catalog stub, which also serves the mod files.
type installEnv struct {
	up       *upstreamStub
	in       *Installer
	pulls    *pull.Manager
	env      *serverstest.Env
	teamID   string
	serverID string
	root     string
}

// installed creates a server of the team and waits until it is installed
// (from the local mirror).
func installed(t testing.TB, env *serverstest.Env, teamID string, ns servers.NewServer) servers.Server {
	t.Helper()
	sv, err := env.Service.Create(t.Context(), teamID, ns)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		got, err := env.Service.Get(t.Context(), teamID, sv.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.Status == servers.StatusOffline {
			return got
		}
		if got.InstallError != nil || time.Now().After(deadline) {
			t.Fatalf("%s server not installed: status %s, error %v", ns.Software, got.Status, got.InstallError)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func newInstallEnv(t testing.TB) *installEnv {
	t.Helper()
	db := storetest.SQLite(t)
	a, err := auth.NewService(t.Context(), db)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	if _, _, err := a.Bootstrap(t.Context()); err != nil {
		t.Fatal(err)
	}
	tm, err := a.TeamByName(t.Context(), auth.BootstrapTeam)
	if err != nil {
		t.Fatal(err)
	}
	fill := paperMirror(t)
	env := serverstest.New(t, db, serverstest.Options{MirrorURL: fill.URL})
	sv := installed(t, env, tm.ID, servers.NewServer{Name: "p", Software: "paper", Version: "1.21.4", MemoryMB: 1024, DiskMB: 2048})
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	pulls := pull.NewManager(db, env.Service, loopback(), pull.Options{}, log)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- pulls.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	<-pulls.Recovered()
	up := newUpstream(t)
	// No cache: subtests serve different versions under one id.
	cat, _ := newService(t, up, func(o *Options) { o.CacheTTL = -1 })
	return &installEnv{
		up: up, in: NewInstaller(cat, env.Service, env.Catalog, pulls), pulls: pulls, env: env,
		teamID: tm.ID, serverID: sv.ID, root: env.Node.Root(sv.ID),
	}
}

// paperMirror serves, under a mirror root, Fill v3 for paper 1.21.4 and
// what a Fabric 1.21.4 install fetches (Mojang, Fabric meta).
func paperMirror(t testing.TB) *httptest.Server {
	jar := []byte("PK\x03\x04 not really a paper jar")
	h := sha256.Sum256(jar)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /fill.papermc.io/v3/projects/paper/versions", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `{"versions":[{"version":{"id":"1.21.4","java":{"version":{"minimum":21}}},"builds":[232]}]}`)
	})
	mux.HandleFunc("GET /fill.papermc.io/v3/projects/paper/versions/1.21.4/builds", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, `[{"id":232,"channel":"STABLE","downloads":{"server:default":{"name":"paper-1.21.4-232.jar","size":%d,
			"url":"https://fill-data.papermc.io/v1/objects/abc/paper-1.21.4-232.jar","checksums":{"sha256":%q}}}}]`, len(jar), hex.EncodeToString(h[:]))
	})
	mux.HandleFunc("GET /fill-data.papermc.io/v1/objects/abc/paper-1.21.4-232.jar", func(w http.ResponseWriter, r *http.Request) { w.Write(jar) })
	// Fabric 1.21.4: Mojang's manifest, version document and server jar,
	// and Fabric's meta and launcher.
	server := []byte("PK\x03\x04 not really minecraft's server.jar")
	ss := sha1.Sum(server)
	doc := fmt.Appendf(nil, `{"downloads":{"server":{"sha1":%q,"size":%d,"url":"https://piston-data.mojang.com/v1/objects/s/server.jar"}},"javaVersion":{"majorVersion":21}}`,
		hex.EncodeToString(ss[:]), len(server))
	ds := sha1.Sum(doc)
	mux.HandleFunc("GET /piston-meta.mojang.com/mc/game/version_manifest_v2.json", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, `{"latest":{"release":"1.21.4"},"versions":[{"id":"1.21.4","url":"https://piston-meta.mojang.com/v1/packages/d/1.21.4.json","sha1":%q}]}`, hex.EncodeToString(ds[:]))
	})
	mux.HandleFunc("GET /piston-meta.mojang.com/v1/packages/d/1.21.4.json", func(w http.ResponseWriter, r *http.Request) { w.Write(doc) })
	mux.HandleFunc("GET /piston-data.mojang.com/v1/objects/s/server.jar", func(w http.ResponseWriter, r *http.Request) { w.Write(server) })
	for kind, v := range map[string]string{"game": "1.21.4", "loader": "0.16.9", "installer": "1.0.1"} {
		mux.HandleFunc("GET /meta.fabricmc.net/v2/versions/"+kind, func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, `[{"version":%q,"stable":true}]`, v)
		})
	}
	mux.HandleFunc("GET /meta.fabricmc.net/v2/versions/loader/1.21.4/0.16.9/1.0.1/server/jar", func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("PK\x03\x04 not really fabric's launcher"))
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

// serveVersion makes the stub answer /v2/version/OrIs0S6b with Modrinth's
// published Version example (whose project, AABBCCDD, is the published
// Project the stub serves as luckperms), made a Bukkit plugin for 1.21.4
// whose one file is jar, served by the stub; then changed by mod.
func (e *installEnv) serveVersion(t *testing.T, jar []byte, mod func(v map[string]any)) {
	sum := sha512.Sum512(jar)
	body := fixture(t, "modrinth/version.json", func(doc any) {
		v := doc.(map[string]any)
		v["id"] = "OrIs0S6b"
		v["loaders"] = []any{"bukkit", "paper", "spigot"}
		v["game_versions"] = []any{"1.21.4"}
		f := at(v, "files", 0)
		f["filename"] = "LuckPerms-Bukkit-5.4.137.jar"
		f["url"] = e.up.srv.URL + "/cdn/LuckPerms-Bukkit-5.4.137.jar"
		f["hashes"].(map[string]any)["sha512"] = hex.EncodeToString(sum[:])
		f["primary"] = true
		f["file_type"] = nil // the example's "string" placeholder: a primary jar has none
		if mod != nil {
			mod(v)
		}
	})
	e.up.serveBody("GET /v2/version/OrIs0S6b", body)
	e.up.handle("GET /cdn/LuckPerms-Bukkit-5.4.137.jar", func(w http.ResponseWriter, r *http.Request) { w.Write(jar) })
}

func (e *installEnv) wait(t *testing.T, id string) pull.Download {
	return waitDownload(t, e.pulls, e.teamID, e.serverID, id)
}

// waitDownload waits until the download has ended.
func waitDownload(t *testing.T, pulls *pull.Manager, teamID, serverID, id string) pull.Download {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		d, err := pulls.Get(t.Context(), teamID, serverID, id)
		if err != nil {
			t.Fatal(err)
		}
		if !d.Status.Active() {
			return d
		}
		if time.Now().After(deadline) {
			t.Fatalf("download %s still %s", id, d.Status)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

var luckPerms = InstallRequest{Catalog: CatalogModrinth, ProjectID: "luckperms", VersionID: "OrIs0S6b"}

// TestInstallPluginOnPaper: a Modrinth Bukkit plugin lands in plugins/,
// verified by its sha512; required dependencies are listed.
func TestInstallPluginOnPaper(t *testing.T) {
	e := newInstallEnv(t)
	jar := []byte("PK\x03\x04 LuckPerms")
	e.serveVersion(t, jar, nil)
	got, err := e.in.Install(t.Context(), e.teamID, e.serverID, luckPerms)
	if err != nil {
		t.Fatal(err)
	}
	if got.Download.Directory != "/plugins" || got.Download.Filename != "LuckPerms-Bukkit-5.4.137.jar" {
		t.Errorf("download into %s/%s, want /plugins/LuckPerms-Bukkit-5.4.137.jar", got.Download.Directory, got.Download.Filename)
	}
	// The example's one dependency: required, project QQRRSSTT, version
	// IIJJKKLL, file sodium-fabric-mc1.19-0.4.2+build.16.jar.
	if len(got.Dependencies) != 1 || got.Dependencies[0].ProjectID != "QQRRSSTT" || *got.Dependencies[0].VersionID != "IIJJKKLL" {
		t.Errorf("dependencies = %+v, want the required QQRRSSTT", got.Dependencies)
	}
	d := e.wait(t, got.Download.ID)
	if d.Status != pull.StatusDone {
		t.Fatalf("download %s: %s", d.Status, d.Error)
	}
	b, err := os.ReadFile(filepath.Join(e.root, "plugins", "LuckPerms-Bukkit-5.4.137.jar"))
	if err != nil || string(b) != string(jar) {
		t.Errorf("plugins/LuckPerms-Bukkit-5.4.137.jar = %q, %v; want the served jar", b, err)
	}
}

// TestInstallHashMismatch: a file whose sha512 is not the catalog's is
// refused and nothing is left behind.
func TestInstallHashMismatch(t *testing.T) {
	e := newInstallEnv(t)
	e.serveVersion(t, []byte("PK\x03\x04 LuckPerms"), nil)
	e.up.handle("GET /cdn/LuckPerms-Bukkit-5.4.137.jar", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("tampered")) })
	got, err := e.in.Install(t.Context(), e.teamID, e.serverID, luckPerms)
	if err != nil {
		t.Fatal(err)
	}
	d := e.wait(t, got.Download.ID)
	if d.Status != pull.StatusFailed || !strings.Contains(d.Error, "sha512") || !strings.Contains(d.Error, "not kept") {
		t.Errorf("download = %s %q, want failed naming the sha512", d.Status, d.Error)
	}
	entries, _ := os.ReadDir(filepath.Join(e.root, "plugins"))
	for _, de := range entries {
		t.Errorf("plugins/ holds %s after a refused file", de.Name())
	}
}

// TestInstallRefusals: a Fabric mod on Paper, a version for another game
// version, a version of another project, a bad request.
func TestInstallRefusals(t *testing.T) {
	e := newInstallEnv(t)
	jar := []byte("PK\x03\x04 x")
	tests := []struct {
		name string
		mod  func(v map[string]any)
		req  InstallRequest
		path string
		want string
	}{
		{"fabric mod on paper", func(v map[string]any) { v["loaders"] = []string{"fabric"} }, luckPerms, "version_id",
			"this file is made for fabric; the server runs paper, which loads paper, spigot, bukkit files"},
		{"other game version", func(v map[string]any) { v["game_versions"] = []string{"1.20.1"} }, luckPerms, "version_id",
			"this file is for Minecraft 1.20.1; the server runs 1.21.4"},
		{"no catalog", nil, InstallRequest{ProjectID: "x"}, "catalog", "must be curseforge or modrinth"},
		{"modrinth with file_id", nil, InstallRequest{Catalog: CatalogModrinth, ProjectID: "luckperms", VersionID: "OrIs0S6b", FileID: "3"}, "file_id", "is for CurseForge"},
		{"modrinth version null", nil, InstallRequest{Catalog: CatalogModrinth, ProjectID: "luckperms", VersionID: "null"}, "version_id", "must be a Modrinth version id (8 letters and digits"},
		{"modrinth version number", nil, InstallRequest{Catalog: CatalogModrinth, ProjectID: "luckperms", VersionID: "5.4.102"}, "version_id", "must be a Modrinth version id"},
		{"curseforge ids", nil, InstallRequest{Catalog: CatalogCurseForge, ProjectID: "jei", FileID: "1"}, "project_id", "positive integer"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e.serveVersion(t, jar, tt.mod)
			_, err := e.in.Install(t.Context(), e.teamID, e.serverID, tt.req)
			ve, ok := errors.AsType[*validate.Error](err)
			if !ok || ve.Issues[0].Path != tt.path || !strings.Contains(ve.Issues[0].Message, tt.want) {
				t.Errorf("Install = %v, want a validation error at %s containing %q", err, tt.path, tt.want)
			}
		})
	}
	if _, err := e.in.Install(t.Context(), e.teamID, "00000000-0000-4000-8000-000000000000", luckPerms); !errors.Is(err, servers.ErrNotFound) {
		t.Errorf("Install on an unknown server = %v, want servers.ErrNotFound", err)
	}
	entries, _ := os.ReadDir(filepath.Join(e.root, "plugins"))
	if len(entries) != 0 {
		t.Errorf("plugins/ holds %d entries after refusals", len(entries))
	}
}

// serveCurseForge makes the stub answer project 238222 and its file
// 4593548 with CurseForge's published Mod and File examples, the mod of
// class classID and the file served by the stub with gameVersions gvs
// and only a sha1 (plugins) or an md5 (mods) of jar.
func (e *installEnv) serveCurseForge(t *testing.T, classID int, gvs []any, jar []byte) {
	e.up.serveBody("GET /v1/mods/238222", fixture(t, "curseforge/mod.json", func(v any) {
		m := at(v, "data")
		m["id"], m["gameId"], m["classId"], m["name"] = 238222, 432, classID, "Example"
	}))
	e.up.serveBody("GET /v1/mods/238222/files/4593548", fixture(t, "curseforge/file.json", func(v any) {
		f := at(v, "data")
		f["id"], f["modId"], f["fileName"] = 4593548, 238222, "example-1.0.jar"
		f["downloadUrl"] = e.up.srv.URL + "/cdn/example-1.0.jar"
		f["gameVersions"] = gvs
		if classID == ClassPlugins {
			s := sha1.Sum(jar)
			f["hashes"] = []any{map[string]any{"value": hex.EncodeToString(s[:]), "algo": 1}}
		} else {
			s := md5.Sum(jar)
			f["hashes"] = []any{map[string]any{"value": hex.EncodeToString(s[:]), "algo": 2}}
		}
		f["dependencies"] = []any{map[string]any{"modId": 306612, "relationType": 3}, map[string]any{"modId": 1, "relationType": 2}}
	}))
	e.up.handle("GET /cdn/example-1.0.jar", func(w http.ResponseWriter, r *http.Request) { w.Write(jar) })
}

// TestInstallCurseForge: a Forge mod on a Paper server is refused; a
// Bukkit plugin (class 5) lands in plugins/, verified by its sha1, its
// required dependency listed. The ids parse as JSON numbers.
func TestInstallCurseForge(t *testing.T) {
	e := newInstallEnv(t)
	var req InstallRequest
	if err := json.Unmarshal([]byte(`{"catalog":"curseforge","project_id":238222,"file_id":4593548}`), &req); err != nil {
		t.Fatal(err)
	}
	jar := []byte("PK\x03\x04 a plugin")
	e.serveCurseForge(t, ClassMods, []any{"Forge", "1.21.4", "Server"}, jar)
	_, err := e.in.Install(t.Context(), e.teamID, e.serverID, req)
	ve, ok := errors.AsType[*validate.Error](err)
	if !ok || ve.Issues[0].Path != "file_id" || !strings.Contains(ve.Issues[0].Message, "made for forge") {
		t.Errorf("Install(forge mod on paper) = %v, want a validation error at file_id naming forge", err)
	}

	e.serveCurseForge(t, ClassPlugins, []any{"1.21", "Server"}, jar)
	got, err := e.in.Install(t.Context(), e.teamID, e.serverID, req)
	if err != nil {
		t.Fatal(err)
	}
	if got.Download.Directory != "/plugins" || got.Download.Filename != "example-1.0.jar" {
		t.Errorf("download into %s/%s, want /plugins/example-1.0.jar", got.Download.Directory, got.Download.Filename)
	}
	if len(got.Dependencies) != 1 || got.Dependencies[0].ProjectID != "306612" || got.Dependencies[0].Catalog != CatalogCurseForge {
		t.Errorf("dependencies = %+v, want the required 306612", got.Dependencies)
	}
	if d := e.wait(t, got.Download.ID); d.Status != pull.StatusDone {
		t.Fatalf("download %s: %s", d.Status, d.Error)
	}
	if b, err := os.ReadFile(filepath.Join(e.root, "plugins", "example-1.0.jar")); err != nil || string(b) != string(jar) {
		t.Errorf("plugins/example-1.0.jar = %q, %v; want the served jar", b, err)
	}
}

// TestInstallFabricModIntoMods: a Fabric mod on a Fabric server lands in
// mods/, verified by its sha512 (Modrinth) or its md5 (CurseForge).
func TestInstallFabricModIntoMods(t *testing.T) {
	e := newInstallEnv(t)
	fab := installed(t, e.env, e.teamID, servers.NewServer{Name: "f", Software: "fabric", Version: "1.21.4", MemoryMB: 1024, DiskMB: 2048})
	jar := []byte("PK\x03\x04 a fabric mod")
	e.serveVersion(t, jar, func(v map[string]any) { v["loaders"] = []any{"fabric"} })
	got, err := e.in.Install(t.Context(), e.teamID, fab.ID, luckPerms)
	if err != nil {
		t.Fatal(err)
	}
	if got.Download.Directory != "/mods" {
		t.Errorf("download into %s, want /mods", got.Download.Directory)
	}
	d := waitDownload(t, e.pulls, e.teamID, fab.ID, got.Download.ID)
	if d.Status != pull.StatusDone {
		t.Fatalf("download %s: %s", d.Status, d.Error)
	}
	b, err := os.ReadFile(filepath.Join(e.env.Node.Root(fab.ID), "mods", "LuckPerms-Bukkit-5.4.137.jar"))
	if err != nil || string(b) != string(jar) {
		t.Errorf("mods/LuckPerms-Bukkit-5.4.137.jar = %q, %v; want the served jar", b, err)
	}
	// A CurseForge Fabric mod, published with an md5 only.
	cfJar := []byte("PK\x03\x04 a curseforge fabric mod")
	e.serveCurseForge(t, ClassMods, []any{"Fabric", "1.21.4", "Server"}, cfJar)
	got, err = e.in.Install(t.Context(), e.teamID, fab.ID, InstallRequest{Catalog: CatalogCurseForge, ProjectID: "238222", FileID: "4593548"})
	if err != nil {
		t.Fatal(err)
	}
	if d := waitDownload(t, e.pulls, e.teamID, fab.ID, got.Download.ID); d.Status != pull.StatusDone || d.Directory != "/mods" {
		t.Fatalf("download %s into %s: %s", d.Status, d.Directory, d.Error)
	}
	if b, err := os.ReadFile(filepath.Join(e.env.Node.Root(fab.ID), "mods", "example-1.0.jar")); err != nil || string(b) != string(cfJar) {
		t.Errorf("mods/example-1.0.jar = %q, %v; want the served jar", b, err)
	}
	// The same version made for Paper is refused on Fabric.
	e.serveVersion(t, jar, nil)
	_, err = e.in.Install(t.Context(), e.teamID, fab.ID, luckPerms)
	if ve, ok := errors.AsType[*validate.Error](err); !ok || !strings.Contains(ve.Issues[0].Message, "the server runs fabric, which loads fabric files") {
		t.Errorf("Install(paper plugin on fabric) = %v, want refused naming fabric", err)
	}
}
