package executor_test

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/kilnhq/kiln/internal/deploy/runs"
	"github.com/kilnhq/kiln/internal/servers/serverstest"
	"github.com/kilnhq/kiln/internal/store/storetest"
)

// paperUpstream stands in for PaperMC's download API (through
// --installer-mirror-url): one build of 1.21.4 whose jar is jar and whose
// published sha256 is sum ("" for the right one).
func paperUpstream(t *testing.T, jar []byte, sum string) *httptest.Server {
	if sum == "" {
		h := sha256.Sum256(jar)
		sum = hex.EncodeToString(h[:])
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /fill.papermc.io/v3/projects/paper/versions", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `{"versions":[{"version":{"id":"1.21.4","java":{"version":{"minimum":21}}},"builds":[232]}]}`)
	})
	mux.HandleFunc("GET /fill.papermc.io/v3/projects/paper/versions/1.21.4/builds", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, `[{"id":232,"channel":"STABLE","downloads":{"server:default":{"name":"paper-1.21.4-232.jar","size":%d,
			"url":"https://fill-data.papermc.io/v1/objects/abc/paper-1.21.4-232.jar","checksums":{"sha256":%q}}}}]`,
			len(jar), sum)
	})
	mux.HandleFunc("GET /fill-data.papermc.io/v1/objects/abc/paper-1.21.4-232.jar", func(w http.ResponseWriter, r *http.Request) {
		w.Write(jar)
	})
	up := httptest.NewServer(mux)
	t.Cleanup(up.Close)
	return up
}

// TestRunFailsOnBadChecksum: PaperMC's API (a local stand-in, through
// --installer-mirror-url) publishes a sha256 the jar does not have. The
// server's step fails with class install and a sentence naming the
// checksum, the run fails, and the proxy of the next tier is skipped.
func TestRunFailsOnBadChecksum(t *testing.T) {
	up := paperUpstream(t, []byte("PK\x03\x04 not really a paper jar"), strings.Repeat("ab", 32))
	e := newEnvWith(t, storetest.SQLite(t), serverstest.Options{MirrorURL: up.URL})
	e.start("inst_install")
	_, r := e.apply("", `version: 1
servers:
  survival: {software: paper, version: 1.21.4, memory: 1G, disk: 2G, env: {EULA: "true"}}
proxies:
  edge: {software: kiln-test-proxy, memory: 256M, disk: 1G, servers: [survival], forwarding: none}
`)
	got := e.wait(r.ID)
	if got.Status != runs.Failed || got.FailureClass != runs.FailInstall || !strings.HasPrefix(got.Error, "server/survival: the install failed") || !strings.Contains(got.Error, "sha256") {
		t.Fatalf("run = %s %s %q; want failed, install, naming server/survival and the sha256", got.Status, got.FailureClass, got.Error)
	}
	res, err := e.q.Resources(t.Context(), e.teamID, r.ID)
	if err != nil {
		t.Fatal(err)
	}
	status := map[string]runs.ResourceStatus{}
	for _, rs := range res {
		status[rs.Key] = rs.Status
	}
	if status["server/survival"] != runs.ResourceFailed || status["proxy/edge"] != runs.ResourceSkipped {
		t.Errorf("resources = %v; want survival failed, edge skipped", status)
	}
	if got.Summary.Failed != 1 || got.Summary.Succeeded != 0 {
		t.Errorf("summary = %+v", got.Summary)
	}
	// Not retried: an install failure is not transient.
	for _, rs := range res {
		if rs.Key == "server/survival" && rs.Attempt != 1 {
			t.Errorf("survival attempts = %d, want 1", rs.Attempt)
		}
	}
}

// TestRunRefusesWithoutEULA: a spec whose running game server does not
// accept the Minecraft EULA fails before anything is made, with a
// sentence naming the server and where to read the EULA; the same
// server with state: stopped, or with EULA accepted, is applied.
func TestRunRefusesWithoutEULA(t *testing.T) {
	up := paperUpstream(t, []byte("PK\x03\x04 not really a paper jar"), "")
	e := newEnvWith(t, storetest.SQLite(t), serverstest.Options{MirrorURL: up.URL})
	e.start("inst_eula")
	cfgID, r := e.apply("", "version: 1\nservers:\n  survival: {software: paper, version: 1.21.4, memory: 1G, disk: 2G, env: {EULA: \"false\"}}\n")
	got := e.wait(r.ID)
	want := `servers.survival.env.EULA: paper needs the Minecraft EULA accepted before it can run, and Kiln never accepts it for you: read it at https://aka.ms/MinecraftEULA, then set EULA: "true" in the server's env (or state: stopped). Nothing was changed.`
	if got.Status != runs.Failed || got.FailureClass != runs.FailValidation || got.Error != want {
		t.Fatalf("run = %s %s %q\nwant failed, validation, %q", got.Status, got.FailureClass, got.Error, want)
	}
	if owned, err := e.srv.OwnedBy(t.Context(), e.teamID, cfgID); err != nil || len(owned) != 0 {
		t.Fatalf("servers made by the refused run: %v, %v", owned, err)
	}
	_, r = e.apply(cfgID, "version: 1\nservers:\n  survival: {software: paper, version: 1.21.4, memory: 1G, disk: 2G, state: stopped}\n")
	if got := e.wait(r.ID); got.Status != runs.Succeeded {
		t.Fatalf("stopped server without EULA: run %s %s %q, want succeeded", got.Status, got.FailureClass, got.Error)
	}
}
