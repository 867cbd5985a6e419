package executor_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kilnhq/kiln/internal/blob"
	"github.com/kilnhq/kiln/internal/dbservice"
	"github.com/kilnhq/kiln/internal/deploy/executor"
	"github.com/kilnhq/kiln/internal/deploy/runs"
	"github.com/kilnhq/kiln/internal/secretbox"
	"github.com/kilnhq/kiln/internal/servers"
	"github.com/kilnhq/kiln/internal/servers/serverstest"
	"github.com/kilnhq/kiln/internal/slp"
	"github.com/kilnhq/kiln/internal/snapshot"
	"github.com/kilnhq/kiln/internal/store"
	"github.com/kilnhq/kiln/internal/store/storetest"
)

const fullNetwork = `version: 1
servers:
  lobby:
    software: kiln-test
    memory: 256M
    disk: 1G
    env: {MOTD: "The lobby"}
  survival:
    software: kiln-test
    memory: 256M
    disk: 1G
  creative:
    software: kiln-test
    memory: 256M
    disk: 1G
proxies:
  edge:
    software: kiln-test-proxy
    memory: 256M
    disk: 1G
    servers: [lobby, survival, creative]
    try: [lobby]
    forwarding: modern
dbservices:
  stats:
    engine: postgres
    attach: [lobby, survival]
`

// TestFullNetwork is the deployments issue's whole flow on both stores: a
// 3-server + 1-proxy + 1-dbservice network applied from empty (the
// proxy's status ping answered with the lobby's MOTD, the database made
// and its credentials given to the attached servers), then edited and
// re-applied — a memory change updated in place with the world kept, a
// server removed (snapshot first, then deleted, the proxy rewired), and a
// software change replaced (snapshot, then made anew) — with the live
// state and the applied-state table checked after each.
func TestFullNetwork(t *testing.T) {
	dsn := storetest.PostgresAdminURL(t)
	storetest.Each(t, func(t *testing.T, db *store.DB) { testFullNetwork(t, db, dsn) })
}

func testFullNetwork(t *testing.T, db *store.DB, dsn string) {
	ctx := t.Context()
	box, err := secretbox.Load(t.TempDir(), "")
	if err != nil {
		t.Fatal(err)
	}
	dbs := dbservice.NewService(db, box, nil)
	if _, err := dbs.AddHost(ctx, "main", dbservice.Postgres, dsn, ""); err != nil {
		t.Fatal(err)
	}
	up := paperUpstream(t, []byte("PK\x03\x04 a paper jar stand-in"), "")
	e := newEnvWith(t, db, serverstest.Options{MirrorURL: up.URL, Servers: servers.Options{Injected: dbs}})
	blobs, err := blob.Open(ctx, "file://"+t.TempDir(), blob.Options{})
	if err != nil {
		t.Fatal(err)
	}
	snaps := snapshot.New(db, blobs, e.srv, e.srvEnv.Catalog, snapshot.Options{Owner: "inst_net"}, nil)
	t.Cleanup(snaps.Close)
	e.startOpts(executor.Options{Owner: "inst_net", Secrets: box, Databases: dbs, Snapshots: snaps})

	cfgID, r := e.apply("", fullNetwork)
	t.Cleanup(func() {
		_ = dbs.Drop(context.Background(), e.teamID, dbservice.Owner{ConfigurationID: cfgID, ResourceKey: "dbservice/stats"})
	})
	got := e.wait(r.ID)
	if got.Status != runs.Succeeded || got.Summary.Create != 5 || got.Summary.Succeeded != 5 {
		t.Fatalf("apply from empty = %s %s %q, %+v; want 5 created", got.Status, got.FailureClass, got.Error, got.Summary)
	}
	owned, _ := e.srv.OwnedBy(ctx, e.teamID, cfgID)
	edge, lobby, creative := owned["proxy/edge"], owned["server/lobby"], owned["server/creative"]
	pctx, pcancel := context.WithTimeout(ctx, 30*time.Second)
	st, err := slp.Ping(pctx, edge.Address)
	pcancel()
	if err != nil || st.Description != "The lobby" {
		t.Errorf("ping of the proxy = %q, %v; want the lobby's MOTD", st.Description, err)
	}
	if env := processEnv(t, e.srvEnv.Node.Root(lobby.ID)); !strings.HasPrefix(env["DB_NAME"], "kiln_stats_") {
		t.Errorf("lobby's DB_NAME = %q", env["DB_NAME"])
	}
	wantLive(t, e, cfgID, "dbservice/stats", "proxy/edge", "server/creative", "server/lobby", "server/survival")

	// Memory of lobby changed: updated in place, its world kept.
	world := filepath.Join(e.srvEnv.Node.Root(lobby.ID), "world.dat")
	if err := os.WriteFile(world, []byte("lobby world"), 0o644); err != nil {
		t.Fatal(err)
	}
	edited := strings.Replace(fullNetwork, "memory: 256M\n    disk: 1G\n    env: {MOTD", "memory: 384M\n    disk: 1G\n    env: {MOTD", 1)
	_, r = e.apply(cfgID, edited)
	if got = e.wait(r.ID); got.Status != runs.Succeeded || got.Summary.Update != 1 || got.Summary.Noop != 4 {
		t.Fatalf("memory edit = %s %q, %+v; want 1 update, 4 unchanged", got.Status, got.Error, got.Summary)
	}
	if sv, _ := e.srv.FindOwned(ctx, e.teamID, servers.Owner{ConfigurationID: cfgID, ResourceKey: "server/lobby"}); sv.ID != lobby.ID || sv.MemoryMB != 384 {
		t.Errorf("lobby after the edit = %s %d MB; want the same server with 384 MB", sv.ID, sv.MemoryMB)
	}
	if b, _ := os.ReadFile(world); string(b) != "lobby world" {
		t.Errorf("lobby's world after the update = %q", b)
	}

	// creative removed: a snapshot of it is taken, then it is deleted; the
	// proxy no longer lists it.
	if err := os.WriteFile(filepath.Join(e.srvEnv.Node.Root(creative.ID), "build.dat"), []byte("castle"), 0o644); err != nil {
		t.Fatal(err)
	}
	removed := strings.Replace(strings.Replace(edited, "  creative:\n    software: kiln-test\n    memory: 256M\n    disk: 1G\n", "", 1),
		"servers: [lobby, survival, creative]", "servers: [lobby, survival]", 1)
	_, r = e.apply(cfgID, removed)
	if got = e.wait(r.ID); got.Status != runs.Succeeded || got.Summary.Delete != 1 || got.Summary.Update != 1 {
		t.Fatalf("server removed = %s %s %q, %+v; want 1 delete, 1 update (the proxy)", got.Status, got.FailureClass, got.Error, got.Summary)
	}
	if _, err := e.srv.Get(ctx, e.teamID, creative.ID); err == nil {
		t.Error("creative still exists after its delete")
	}
	list, _ := snaps.List(ctx, e.teamID, creative.ID)
	if len(list) != 1 || list[0].Status != snapshot.StatusReady || !strings.Contains(list[0].Name, "delete of server/creative") {
		t.Fatalf("snapshots of creative = %+v; want one ready, taken before the delete", list)
	}
	toml, _ := os.ReadFile(filepath.Join(e.srvEnv.Node.Root(edge.ID), "velocity.toml"))
	if strings.Contains(string(toml), creative.Address) {
		t.Errorf("velocity.toml still names creative:\n%s", toml)
	}
	wantLive(t, e, cfgID, "dbservice/stats", "proxy/edge", "server/lobby", "server/survival")
	// The snapshot holds creative's build: restored into survival.
	survival := owned["server/survival"]
	if err := snaps.RestoreNow(ctx, e.teamID, list[0].ID, survival.ID); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(e.srvEnv.Node.Root(survival.ID), "build.dat")); string(b) != "castle" {
		t.Errorf("creative's build restored into survival = %q", b)
	}

	// survival's software changed to Paper (kept stopped: no Java here):
	// replaced — a snapshot, then deleted and made anew — and detached
	// from the database and the proxy in the same run.
	survivalWorld := filepath.Join(e.srvEnv.Node.Root(survival.ID), "build.dat")
	replaced := strings.Replace(removed, "  survival:\n    software: kiln-test\n    memory: 256M\n    disk: 1G\n",
		"  survival:\n    software: paper\n    version: 1.21.4\n    memory: 1G\n    disk: 2G\n    state: stopped\n", 1)
	replaced = strings.Replace(replaced, "servers: [lobby, survival]", "servers: [lobby]", 1)
	replaced = strings.Replace(replaced, "attach: [lobby, survival]", "attach: [lobby]", 1)
	// The team's snapshot limit reached (creative's is its one): the
	// snapshot before the replace is refused, and survival is not
	// destroyed.
	if err := servers.SetTeamLimits(ctx, db, e.teamID, servers.TeamLimits{Snapshots: 1}); err != nil {
		t.Fatal(err)
	}
	_, r = e.apply(cfgID, replaced)
	if got = e.wait(r.ID); got.Status != runs.Failed || got.FailureClass != runs.FailCapacity ||
		!strings.Contains(got.Error, "the snapshot before the replace is refused: the team may keep at most 1 snapshot and has 1") ||
		!strings.Contains(got.Error, "nothing was destroyed") {
		t.Fatalf("replace past the snapshot limit = %s %s %q; want failed, capacity, naming the limit", got.Status, got.FailureClass, got.Error)
	}
	if sv, err := e.srv.Get(ctx, e.teamID, survival.ID); err != nil || sv.Software != "kiln-test" {
		t.Fatalf("survival after the refused replace = %+v, %v; want it as it was", sv, err)
	}
	if err := servers.SetTeamLimits(ctx, db, e.teamID, servers.TeamLimits{}); err != nil {
		t.Fatal(err)
	}
	_, r = e.apply(cfgID, replaced)
	if got = e.wait(r.ID); got.Status != runs.Succeeded || got.Summary.Replace != 1 {
		t.Fatalf("software change = %s %s %q, %+v; want succeeded with 1 replace", got.Status, got.FailureClass, got.Error, got.Summary)
	}
	now, err := e.srv.FindOwned(ctx, e.teamID, servers.Owner{ConfigurationID: cfgID, ResourceKey: "server/survival"})
	if err != nil || now.ID == survival.ID || now.Software != "paper" || now.Status != servers.StatusOffline {
		t.Fatalf("survival after the replace = %+v, %v; want a new offline paper server", now, err)
	}
	if _, err := os.Stat(survivalWorld); !os.IsNotExist(err) {
		t.Errorf("the old survival's files are still there: %v", err)
	}
	before, _ := snaps.List(ctx, e.teamID, survival.ID)
	if len(before) != 1 || before[0].Status != snapshot.StatusReady || !strings.Contains(before[0].Name, "replace of server/survival") {
		t.Errorf("snapshots of the old survival = %+v; want one ready, taken before the replace", before)
	}
	wantLive(t, e, cfgID, "dbservice/stats", "proxy/edge", "server/lobby", "server/survival")
	// Nothing left to do: a re-apply is all noops.
	_, r = e.apply(cfgID, replaced)
	if got = e.wait(r.ID); got.Status != runs.Succeeded || got.Summary.Noop != 4 {
		t.Errorf("re-apply = %s %q, %+v; want 4 unchanged", got.Status, got.Error, got.Summary)
	}
}

// wantLive checks the applied-state table holds exactly keys.
func wantLive(t *testing.T, e *env, cfgID string, keys ...string) {
	t.Helper()
	live, err := e.dep.Live(t.Context(), e.teamID, cfgID)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, l := range live {
		got = append(got, l.Key)
	}
	if strings.Join(got, " ") != strings.Join(keys, " ") {
		t.Errorf("applied state = %v, want %v", got, keys)
	}
}
