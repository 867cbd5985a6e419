package executor_test

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/kilnhq/kiln/internal/catalog"
	"github.com/kilnhq/kiln/internal/catalog/install"
	"github.com/kilnhq/kiln/internal/deploy"
	"github.com/kilnhq/kiln/internal/deploy/runs"
	"github.com/kilnhq/kiln/internal/node"
	"github.com/kilnhq/kiln/internal/servers"
	"github.com/kilnhq/kiln/internal/servers/serverstest"
	"github.com/kilnhq/kiln/internal/store/storetest"
)

// TestPropertiesApplied: a spec's properties are written into
// server.properties on create (the install's own lines kept), changed and
// removed on update (restarting the server so it reads them), and a key
// Kiln sets itself before every start is refused at planning.
func TestPropertiesApplied(t *testing.T) {
	e := newEnv(t, storetest.SQLite(t))
	e.start("inst_props")
	spec := `version: 1
servers:
  lobby:
    software: kiln-test
    memory: 256M
    disk: 1G
    properties: {difficulty: hard, pvp: false, view-distance: 12}
`
	cfgID, r := e.apply("", spec)
	if got := e.wait(r.ID); got.Status != runs.Succeeded {
		t.Fatalf("create = %s %q", got.Status, got.Error)
	}
	sv, err := e.srv.FindOwned(t.Context(), e.teamID, servers.Owner{ConfigurationID: cfgID, ResourceKey: "server/lobby"})
	if err != nil {
		t.Fatal(err)
	}
	props := func() string {
		b, _ := os.ReadFile(filepath.Join(e.srvEnv.Node.Root(sv.ID), "server.properties"))
		return string(b)
	}
	for _, want := range []string{"difficulty=hard\n", "pvp=false\n", "view-distance=12\n", "server-port="} {
		if !strings.Contains(props(), want) {
			t.Errorf("server.properties lacks %q:\n%s", want, props())
		}
	}
	edited := strings.Replace(spec, "{difficulty: hard, pvp: false, view-distance: 12}", "{difficulty: peaceful, view-distance: 12}", 1)
	_, r = e.apply(cfgID, edited)
	if got := e.wait(r.ID); got.Status != runs.Succeeded || got.Summary.Update != 1 {
		t.Fatalf("update = %s %q %+v", got.Status, got.Error, got.Summary)
	}
	if p := props(); !strings.Contains(p, "difficulty=peaceful\n") || strings.Contains(p, "pvp=") || !strings.Contains(p, "view-distance=12\n") {
		t.Errorf("server.properties after the update:\n%s", p)
	}
	after, _ := e.srv.FindOwned(t.Context(), e.teamID, servers.Owner{ConfigurationID: cfgID, ResourceKey: "server/lobby"})
	if after.Status != servers.StatusRunning {
		t.Errorf("lobby after the update = %s, want running", after.Status)
	}
	_, r = e.apply(cfgID, strings.Replace(spec, "difficulty: hard", "server-port: 1", 1))
	if got := e.wait(r.ID); got.Status != runs.Failed || got.FailureClass != runs.FailValidation || !strings.Contains(got.Error, "properties.server-port") {
		t.Errorf("a property Kiln owns = %s %s %q; want failed validation naming it", got.Status, got.FailureClass, got.Error)
	}
}

// TestImageApplied: a spec's image (a label of the profile's images) is
// recorded on the server it makes, and changed in place by a later run.
func TestImageApplied(t *testing.T) {
	up := paperUpstream(t, []byte("PK\x03\x04 a paper jar stand-in"), "")
	e := newEnvWith(t, storetest.SQLite(t), serverstest.Options{MirrorURL: up.URL})
	e.start("inst_image")
	spec := "version: 1\nservers:\n  survival: {software: paper, version: 1.21.4, memory: 1G, disk: 2G, state: stopped, image: Java 21}\n"
	cfgID, r := e.apply("", spec)
	if got := e.wait(r.ID); got.Status != runs.Succeeded {
		t.Fatalf("create = %s %s %q", got.Status, got.FailureClass, got.Error)
	}
	o := servers.Owner{ConfigurationID: cfgID, ResourceKey: "server/survival"}
	sv, err := e.srv.FindOwned(t.Context(), e.teamID, o)
	if err != nil || sv.Image != "ghcr.io/kiln/java:21" {
		t.Fatalf("survival = %+v, %v; want image ghcr.io/kiln/java:21", sv, err)
	}
	_, r = e.apply(cfgID, strings.Replace(spec, "Java 21", "Java 25", 1))
	if got := e.wait(r.ID); got.Status != runs.Succeeded || got.Summary.Update != 1 {
		t.Fatalf("image change = %s %q %+v", got.Status, got.Error, got.Summary)
	}
	if now, _ := e.srv.FindOwned(t.Context(), e.teamID, o); now.ID != sv.ID || now.Image != "ghcr.io/kiln/java:25" {
		t.Errorf("after the change = %s %q; want the same server on ghcr.io/kiln/java:25", now.ID, now.Image)
	}
}

// TestProxyPort: a proxy's requested port is the port it gets; a new one
// moves the same proxy there; one outside the node's range is refused.
func TestProxyPort(t *testing.T) {
	e := newEnv(t, storetest.SQLite(t))
	e.start("inst_port")
	r0 := e.srvEnv.Node.Ports()
	spec := func(port int) string {
		return "version: 1\nservers:\n  lobby: {software: kiln-test, memory: 256M, disk: 1G}\n" +
			"proxies:\n  edge: {software: kiln-test-proxy, memory: 256M, disk: 1G, servers: [lobby], forwarding: none, port: " + strconv.Itoa(port) + "}\n"
	}
	cfgID, r := e.apply("", spec(r0.Last))
	if got := e.wait(r.ID); got.Status != runs.Succeeded {
		t.Fatalf("create = %s %s %q", got.Status, got.FailureClass, got.Error)
	}
	o := servers.Owner{ConfigurationID: cfgID, ResourceKey: "proxy/edge"}
	edge, _ := e.srv.FindOwned(t.Context(), e.teamID, o)
	if edge.Port != r0.Last {
		t.Fatalf("edge's port = %d, want %d (asked for)", edge.Port, r0.Last)
	}
	_, r = e.apply(cfgID, spec(r0.Last-1))
	if got := e.wait(r.ID); got.Status != runs.Succeeded || got.Summary.Update != 1 {
		t.Fatalf("port change = %s %q %+v", got.Status, got.Error, got.Summary)
	}
	if now, _ := e.srv.FindOwned(t.Context(), e.teamID, o); now.ID != edge.ID || now.Port != r0.Last-1 || now.Status != servers.StatusRunning {
		t.Errorf("edge after the change = %s port %d %s; want the same proxy on %d, running", now.ID, now.Port, now.Status, r0.Last-1)
	}
	// Outside the range: refused when the YAML is set (internal/deploy);
	// a version another process pushed with another range fails its run.
	outside := spec(r0.Last + 100)
	if _, err := e.dep.Update(t.Context(), e.teamID, cfgID, deploy.Patch{YAML: &outside}); err == nil || !strings.Contains(err.Error(), "proxies.edge.port: must be within the node's port range") {
		t.Fatalf("Update with a port outside the range = %v, want refused at proxies.edge.port", err)
	}
	e.dep = deploy.New(e.db, e.srvEnv.Catalog, node.PortRange{})
	_, r = e.apply(cfgID, outside)
	if got := e.wait(r.ID); got.Status != runs.Failed || got.FailureClass != runs.FailValidation || !strings.Contains(got.Error, "port range") {
		t.Errorf("a port outside the range = %s %s %q; want failed validation", got.Status, got.FailureClass, got.Error)
	}
}

// TestPropertiesDocumented: the properties keys docs/deployments.md and
// docs/operations.md say a spec cannot set are those the run refuses
// (install.ManagedProperties of every server profile, env unset), so the
// documents and the code cannot drift apart.
func TestPropertiesDocumented(t *testing.T) {
	cat, err := catalog.Load(true)
	if err != nil {
		t.Fatal(err)
	}
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join("..", "..", "..", "docs", name))
		if err != nil {
			t.Fatal(err)
		}
		return strings.Join(strings.Fields(string(b)), " ")
	}
	deployments, operations := read("deployments.md"), read("operations.md")
	const always = "`motd`, `max-players`, `online-mode` and `enable-rcon`"
	for _, doc := range []struct{ name, text, want string }{
		{"deployments.md", deployments, "For every game-server profile that is " + always + " always"},
		{"deployments.md", deployments, "`server-ip` and `server-port`"},
		{"deployments.md", deployments, "for `kiln-test`, `motd`."},
		{"operations.md", operations, "(" + always + " always come from the variables)"},
	} {
		if !strings.Contains(doc.text, doc.want) {
			t.Errorf("docs/%s does not say %q", doc.name, doc.want)
		}
	}
	for _, p := range cat.List() {
		if p.Category != catalog.Server {
			continue
		}
		want := []string{"enable-rcon", "max-players", "motd", "online-mode", "server-ip", "server-port"}
		if p.Type == "kiln-test" {
			want = []string{"motd", "server-ip", "server-port"}
		}
		if got := install.ManagedProperties(p, nil); !slices.Equal(got, want) {
			t.Errorf("ManagedProperties(%s) = %v, the documents say %v", p.Type, got, want)
		}
	}
}
