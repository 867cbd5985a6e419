package install

import (
	"crypto/md5"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// fakeUpstream is every installer upstream in one local HTTP server, laid out
// the way a Kiln mirror is: /mirror/<host>/<path>. It serves the documented
// answer shapes (network.md §4) with small fake jars, and records every
// request.
type fakeUpstream struct {
	t      *testing.T
	srv    *httptest.Server
	routes map[string]http.HandlerFunc // "<host><path>" → handler
	// mojangDocs maps a game version to the route of its version document.
	mojangDocs map[string]string

	mu       sync.Mutex
	requests []seen
	override map[string]http.HandlerFunc
	// subst replaces strings in fixture answers (fixtures_test.go): the
	// checksums and sizes of real artifacts by those of the stand-ins.
	subst map[string]string
}

type seen struct {
	Route     string // "<host><path>"
	UserAgent string
	Method    string
}

// mirrorPrefix is the path of the mirror base URL on the test server.
const mirrorPrefix = "/mirror"

func sha256Hex(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }
func sha1Hex(b []byte) string   { s := sha1.Sum(b); return hex.EncodeToString(s[:]) }
func md5Hex(b []byte) string    { s := md5.Sum(b); return hex.EncodeToString(s[:]) }

// jar returns the fake content of an artifact.
func jar(name string) []byte { return []byte("PK fake jar: " + name + "\n") }

func newUpstream(t *testing.T) *fakeUpstream {
	t.Helper()
	u := &fakeUpstream{t: t, routes: map[string]http.HandlerFunc{}, override: map[string]http.HandlerFunc{},
		mojangDocs: map[string]string{}, subst: map[string]string{}}
	u.fill()
	u.purpur()
	u.mojang()
	u.fabric()
	u.forge()
	u.neoforge()
	u.bungeecord()
	u.srv = httptest.NewServer(http.HandlerFunc(u.serve))
	t.Cleanup(u.srv.Close)
	return u
}

// mirror is the MirrorURL for Options.
func (u *fakeUpstream) mirror() string { return u.srv.URL + mirrorPrefix }

func (u *fakeUpstream) serve(w http.ResponseWriter, r *http.Request) {
	route, ok := strings.CutPrefix(r.URL.Path, mirrorPrefix+"/")
	if !ok {
		http.Error(w, "not under the mirror prefix", http.StatusNotFound)
		return
	}
	u.mu.Lock()
	u.requests = append(u.requests, seen{Route: route, UserAgent: r.Header.Get("User-Agent"), Method: r.Method})
	h := u.override[route]
	u.mu.Unlock()
	if h == nil {
		h = u.routes[route]
	}
	if h == nil {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprint(w, `{"ok":false,"message":"not found"}`)
		return
	}
	h(w, r)
}

// set replaces the answer of one route for the rest of the test.
func (u *fakeUpstream) set(route string, h http.HandlerFunc) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.override[route] = h
}

// count returns how many requests were made for route.
func (u *fakeUpstream) count(route string) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	n := 0
	for _, s := range u.requests {
		if s.Route == route && s.Method == http.MethodGet {
			n++
		}
	}
	return n
}

func (u *fakeUpstream) seen() []seen {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]seen(nil), u.requests...)
}

func (u *fakeUpstream) json(route string, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		u.t.Fatal(err)
	}
	u.raw(route, "application/json", body)
}

func (u *fakeUpstream) raw(route, ctype string, body []byte) {
	u.routes[route] = func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", ctype)
		w.Write(body)
	}
}

// Routes of the artifacts the tests count.
const (
	paperJarRoute    = "fill-data.papermc.io/v1/objects/paper-1.21.4-232/paper-1.21.4-232.jar"
	purpurJarRoute   = "api.purpurmc.org/v2/purpur/1.21.4/2416/download"
	vanillaJarRoute  = "piston-data.mojang.com/v1/objects/server-1.21.4/server.jar"
	fabricJarRoute   = "meta.fabricmc.net/v2/versions/loader/1.21.4/0.16.9/1.0.1/server/jar"
	forgeJarRoute    = "maven.minecraftforge.net/net/minecraftforge/forge/1.20.1-47.3.0/forge-1.20.1-47.3.0-installer.jar"
	neoforgeJarRoute = "maven.neoforged.net/releases/net/neoforged/neoforge/21.1.77/neoforge-21.1.77-installer.jar"
	bungeeJarRoute   = "ci.md-5.net/job/BungeeCord/1900/artifact/bootstrap/target/BungeeCord.jar"
)

// fill serves paper, folia, velocity and waterfall. For paper, 1.21.5 is
// the newest version but has only a BETA build, so "latest" resolves to
// 1.21.4, whose newest build 233 is ALPHA and 232 the newest STABLE.
func (u *fakeUpstream) fill() {
	type dl struct {
		Name      string            `json:"name"`
		Size      int               `json:"size"`
		URL       string            `json:"url"`
		Checksums map[string]string `json:"checksums"`
	}
	type build struct {
		ID        int           `json:"id"`
		Time      string        `json:"time"`
		Channel   string        `json:"channel"`
		Downloads map[string]dl `json:"downloads"`
	}
	mk := func(project, version string, id int, channel string) build {
		name := fmt.Sprintf("%s-%s-%d.jar", project, version, id)
		content := jar(name)
		route := fmt.Sprintf("fill-data.papermc.io/v1/objects/%s-%s-%d/%s", project, version, id, name)
		u.raw(route, "application/java-archive", content)
		return build{ID: id, Time: "2025-01-01T00:00:00Z", Channel: channel, Downloads: map[string]dl{
			"server:default": {Name: name, Size: len(content), URL: "https://" + route,
				Checksums: map[string]string{"sha256": sha256Hex(content)}},
		}}
	}
	// /versions lists versions newest first with Fill's java.version.minimum.
	versions := func(project string, vs ...string) {
		var list []map[string]any
		for _, v := range vs {
			list = append(list, map[string]any{
				"version": map[string]any{"id": v, "java": map[string]any{"version": map[string]any{"minimum": 21}}},
				"builds":  []int{1},
			})
		}
		u.json("fill.papermc.io/v3/projects/"+project+"/versions", map[string]any{"versions": list})
	}
	versions("paper", "1.21.5", "1.21.4", "1.20.6")
	u.json("fill.papermc.io/v3/projects/paper/versions/1.21.5/builds", []build{mk("paper", "1.21.5", 3, "BETA")})
	u.json("fill.papermc.io/v3/projects/paper/versions/1.21.4/builds", []build{
		mk("paper", "1.21.4", 233, "ALPHA"), mk("paper", "1.21.4", 232, "STABLE"), mk("paper", "1.21.4", 231, "STABLE"),
	})
	u.json("fill.papermc.io/v3/projects/paper/versions/1.20.6/builds", []build{mk("paper", "1.20.6", 151, "STABLE")})

	for project, version := range map[string]string{"folia": "1.21.4", "velocity": "3.4.0-SNAPSHOT", "waterfall": "1.21"} {
		versions(project, version)
		u.json("fill.papermc.io/v3/projects/"+project+"/versions/"+version+"/builds",
			[]build{mk(project, version, 7, "RECOMMENDED")})
	}
}

func (u *fakeUpstream) purpur() {
	content := jar("purpur-1.21.4-2416.jar")
	u.json("api.purpurmc.org/v2/purpur", map[string]any{"project": "purpur", "versions": []string{"1.20.6", "1.21.4"}})
	u.json("api.purpurmc.org/v2/purpur/1.21.4", map[string]any{"project": "purpur", "version": "1.21.4",
		"builds": map[string]any{"latest": "2416", "all": []string{"2415", "2416"}}})
	u.json("api.purpurmc.org/v2/purpur/1.21.4/2416", map[string]any{"project": "purpur", "version": "1.21.4",
		"build": "2416", "result": "SUCCESS", "md5": md5Hex(content)})
	u.raw(purpurJarRoute, "application/java-archive", content)
}

// mojang serves 1.21.4 (with javaVersion 21) and 1.16.5 (without, so the
// table applies).
func (u *fakeUpstream) mojang() {
	type ver struct {
		ID   string `json:"id"`
		Type string `json:"type"`
		URL  string `json:"url"`
		SHA1 string `json:"sha1"`
	}
	var versions []ver
	for _, v := range []struct {
		id   string
		java int
	}{{"1.21.4", 21}, {"1.16.5", 0}} {
		content := jar("server-" + v.id + ".jar")
		jarRoute := "piston-data.mojang.com/v1/objects/server-" + v.id + "/server.jar"
		u.raw(jarRoute, "application/java-archive", content)
		doc := map[string]any{"id": v.id, "downloads": map[string]any{
			"server": map[string]any{"sha1": sha1Hex(content), "size": len(content), "url": "https://" + jarRoute},
		}}
		if v.java != 0 {
			doc["javaVersion"] = map[string]any{"component": "java-runtime-delta", "majorVersion": v.java}
		}
		body, _ := json.Marshal(doc)
		docRoute := "piston-meta.mojang.com/v1/packages/" + sha1Hex(body) + "/" + v.id + ".json"
		u.raw(docRoute, "application/json", body)
		u.mojangDocs[v.id] = docRoute
		versions = append(versions, ver{ID: v.id, Type: "release", URL: "https://" + docRoute, SHA1: sha1Hex(body)})
	}
	u.json("piston-meta.mojang.com/mc/game/version_manifest_v2.json", map[string]any{
		"latest": map[string]string{"release": "1.21.4", "snapshot": "25w02a"}, "versions": versions,
	})
}

func (u *fakeUpstream) fabric() {
	u.json("meta.fabricmc.net/v2/versions/game", []map[string]any{
		{"version": "25w02a", "stable": false}, {"version": "1.21.4", "stable": true}, {"version": "1.16.5", "stable": true},
	})
	for _, game := range []string{"1.21.4", "1.16.5"} {
		u.json("meta.fabricmc.net/v2/versions/loader/"+game, []map[string]any{
			{"loader": map[string]any{"separator": ".", "build": 10, "maven": "net.fabricmc:fabric-loader:0.17.0-beta.1", "version": "0.17.0-beta.1", "stable": false}},
			{"loader": map[string]any{"separator": ".", "build": 9, "maven": "net.fabricmc:fabric-loader:0.16.9", "version": "0.16.9", "stable": true}},
		})
	}
	u.json("meta.fabricmc.net/v2/versions/installer", []map[string]any{
		{"url": "https://maven.fabricmc.net/net/fabricmc/fabric-installer/1.0.1/fabric-installer-1.0.1.jar",
			"maven": "net.fabricmc:fabric-installer:1.0.1", "version": "1.0.1", "stable": true},
	})
	u.raw(fabricJarRoute, "application/java-archive", jar("fabric-launcher"))
}

// forge publishes a .sha1 sidecar but no .sha256, so the fallback is used.
func (u *fakeUpstream) forge() {
	u.json("files.minecraftforge.net/net/minecraftforge/forge/promotions_slim.json", map[string]any{
		"homepage": "https://files.minecraftforge.net/net/minecraftforge/forge/",
		"promos": map[string]string{
			"1.20.1-latest": "47.3.10", "1.20.1-recommended": "47.3.0",
			"1.16.5-latest": "36.2.42", "1.16.5-recommended": "36.2.34",
		},
	})
	for _, full := range []string{"1.20.1-47.3.0", "1.16.5-36.2.34"} {
		content := jar("forge-" + full + "-installer")
		route := "maven.minecraftforge.net/net/minecraftforge/forge/" + full + "/forge-" + full + "-installer.jar"
		u.raw(route, "application/java-archive", content)
		u.raw(route+".sha1", "text/plain", []byte(sha1Hex(content)))
	}
}

// neoforge publishes a .sha256 sidecar ("<hex>  <file>" form).
func (u *fakeUpstream) neoforge() {
	u.raw("maven.neoforged.net/releases/net/neoforged/neoforge/maven-metadata.xml", "text/xml", []byte(`<?xml version="1.0" encoding="UTF-8"?>
<metadata><groupId>net.neoforged</groupId><artifactId>neoforge</artifactId><versioning><versions>
<version>20.4.237</version><version>21.1.76</version><version>21.1.77</version><version>21.4.1-beta</version>
<version>21.4.2-alpha.1+snapshot-1</version></versions></versioning></metadata>`))
	content := jar("neoforge-21.1.77-installer")
	u.raw(neoforgeJarRoute, "application/java-archive", content)
	u.raw(neoforgeJarRoute+".sha256", "text/plain", []byte(sha256Hex(content)+"  neoforge-21.1.77-installer.jar\n"))
}

func (u *fakeUpstream) bungeecord() {
	content := jar("BungeeCord")
	build := map[string]any{
		"_class": "hudson.maven.MavenModuleSetBuild", "number": 1900, "result": "SUCCESS",
		"artifacts": []map[string]string{{"fileName": "BungeeCord.jar", "relativePath": "bootstrap/target/BungeeCord.jar"}},
	}
	u.json("ci.md-5.net/job/BungeeCord/lastStableBuild/api/json", build)
	u.json(bungeeJarRoute+"/*fingerprint*/api/json", map[string]any{
		"_class": "hudson.model.Fingerprint", "fileName": "BungeeCord.jar", "hash": md5Hex(content)})
	u.json("ci.md-5.net/job/BungeeCord/1900/api/json", build)
	u.raw(bungeeJarRoute, "application/java-archive", content)
}
