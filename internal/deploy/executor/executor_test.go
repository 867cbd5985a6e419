package executor_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kilnhq/kiln/internal/auth"
	"github.com/kilnhq/kiln/internal/deploy"
	"github.com/kilnhq/kiln/internal/deploy/executor"
	"github.com/kilnhq/kiln/internal/deploy/runs"
	"github.com/kilnhq/kiln/internal/secretbox"
	"github.com/kilnhq/kiln/internal/servers"
	"github.com/kilnhq/kiln/internal/servers/serverstest"
	"github.com/kilnhq/kiln/internal/slp"
	"github.com/kilnhq/kiln/internal/store"
	"github.com/kilnhq/kiln/internal/store/storetest"
)

// testDigestKey keys the references' digests of the tests' executors
// (kiln serve derives its own from the secret key).
var testDigestKey = []byte("0123456789abcdef0123456789abcdef")

type env struct {
	t      *testing.T
	teamID string
	db     *store.DB
	srv    *servers.Service
	srvEnv *serverstest.Env
	dep    *deploy.Service
	q      *runs.Queue
	qx     executor.Queue // what executors use, e.q unless a test puts faults in between
}

func newEnv(t *testing.T, db *store.DB) *env {
	t.Helper()
	return newEnvWith(t, db, serverstest.Options{})
}

// newEnvWith is newEnv with the servers' test options so.
func newEnvWith(t *testing.T, db *store.DB, so serverstest.Options) *env {
	t.Helper()
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
	so.Ports = 10
	se := serverstest.New(t, db, so)
	return &env{t: t, teamID: tm.ID, db: db, srv: se.Service, srvEnv: se, dep: deploy.New(db, se.Catalog, se.Node.Ports()), q: runs.New(db, runs.Options{})}
}

// start runs an executor as owner until the test ends.
func (e *env) start(owner string) *executor.Executor { return e.startWith(owner, 0) }

// startWith is start with at most parallel steps at once (0: the default).
func (e *env) startWith(owner string, parallel int) *executor.Executor {
	return e.startOpts(executor.Options{Owner: owner, Parallel: parallel})
}

// startOpts runs an executor with o — the tests' short poll, lease,
// backoff and health timeout filled in — until the test ends.
func (e *env) startOpts(o executor.Options) *executor.Executor {
	lease := o.Lease
	o.Poll, o.Lease, o.RetryBackoff, o.HealthTimeout = 20*time.Millisecond, 3*time.Second, 10*time.Millisecond, 30*time.Second
	if o.DigestKey == nil {
		o.DigestKey = testDigestKey
	}
	if lease > 0 {
		o.Lease = lease
	}
	var q executor.Queue = e.q
	if e.qx != nil {
		q = e.qx
	}
	x := executor.New(q, e.dep, e.srv, e.srvEnv.Catalog, o)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- x.Run(ctx) }()
	e.t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			e.t.Errorf("executor Run = %v", err)
		}
	})
	return x
}

// apply pushes yaml into the configuration (creating it first) and queues
// a run of it.
func (e *env) apply(cfgID, yaml string) (string, runs.Run) {
	e.t.Helper()
	ctx := e.t.Context()
	if cfgID == "" {
		cfg, err := e.dep.Create(ctx, e.teamID, "network", "", yaml)
		if err != nil {
			e.t.Fatal(err)
		}
		cfgID = cfg.ID
	} else if _, err := e.dep.Update(ctx, e.teamID, cfgID, deploy.Patch{YAML: &yaml}); err != nil {
		e.t.Fatal(err)
	}
	v, _, err := e.dep.Push(ctx, e.teamID, cfgID, "user:test", "")
	if err != nil {
		e.t.Fatal(err)
	}
	r, _, err := e.q.Enqueue(ctx, e.teamID, cfgID, v.ID, "user:test", "")
	if err != nil {
		e.t.Fatal(err)
	}
	return cfgID, r
}

// wait waits for a run's final status.
func (e *env) wait(id string) runs.Run {
	e.t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		r, err := e.q.Get(e.t.Context(), e.teamID, id)
		if err != nil {
			e.t.Fatal(err)
		}
		if r.Status.Final() {
			return r
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("run %s still %s after 90 s", id, r.Status)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (e *env) events(id string) string {
	evs, err := e.q.Events(e.t.Context(), e.teamID, id)
	if err != nil {
		e.t.Fatal(err)
	}
	var types []string
	for _, ev := range evs {
		types = append(types, string(ev.Type))
	}
	return strings.Join(types, " ")
}

const network = `version: 1
servers:
  lobby:
    software: kiln-test
    memory: 512M
    disk: 1G
    env: {MOTD: "Welcome"}
    files:
      - path: plugins/Hello/config.yml
        content: "greeting: hi\n"
  survival:
    software: kiln-test
    memory: 512M
    disk: 1G
  build:
    software: kiln-test
    memory: 256M
    disk: 1G
    state: stopped
`

// TestApplyNetwork applies a three-server network from empty, then an
// edit in place, then edits the executor must refuse without destroying
// anything; on both engines.
func TestApplyNetwork(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		e := newEnv(t, db)
		ctx := t.Context()
		e.start("inst_one")
		cfgID, r := e.apply("", network)
		got := e.wait(r.ID)
		if got.Status != runs.Succeeded || got.Summary == nil || got.Summary.Create != 3 || got.Summary.Succeeded != 3 {
			t.Fatalf("first run = %s %q (%v), summary %+v; want succeeded creating 3", got.Status, got.Error, got.FailureClass, got.Summary)
		}
		if ev := e.events(r.ID); !strings.HasPrefix(ev, "run.queued run.started plan.computed") || !strings.HasSuffix(ev, "run.succeeded") {
			t.Errorf("events = %s", ev)
		}
		owned, err := e.srv.OwnedBy(ctx, e.teamID, cfgID)
		if err != nil || len(owned) != 3 {
			t.Fatalf("owned servers = %v, %v; want 3", owned, err)
		}
		for key, want := range map[string]string{"server/lobby": "running", "server/survival": "running", "server/build": "offline"} {
			if sv := owned[key]; sv.Status != want || sv.Name != strings.TrimPrefix(key, "server/") || sv.Software != "kiln-test" {
				t.Errorf("%s = %s %s %s, want %s named by its key", key, sv.Name, sv.Software, sv.Status, want)
			}
		}
		lobby := owned["server/lobby"]
		root := e.srvEnv.Node.Root(lobby.ID)
		if b, err := os.ReadFile(filepath.Join(root, "plugins/Hello/config.yml")); err != nil || string(b) != "greeting: hi\n" {
			t.Errorf("spec file in lobby = %q, %v", b, err)
		}
		if live, _ := e.dep.Live(ctx, e.teamID, cfgID); len(live) != 3 {
			t.Errorf("applied state = %v, want 3 keys", live)
		}
		// The world the game server wrote stays through an update in place.
		if err := os.WriteFile(filepath.Join(root, "world.dat"), []byte("world"), 0o644); err != nil {
			t.Fatal(err)
		}
		_, r2 := e.apply(cfgID, strings.Replace(network, "memory: 512M\n    disk: 1G\n    env", "memory: 768M\n    disk: 1G\n    env", 1))
		got = e.wait(r2.ID)
		if got.Status != runs.Succeeded || got.Summary.Update != 1 || got.Summary.Noop != 2 {
			t.Fatalf("update run = %s %q, summary %+v; want succeeded, 1 update, 2 unchanged", got.Status, got.Error, got.Summary)
		}
		after, err := e.srv.FindOwned(ctx, e.teamID, servers.Owner{ConfigurationID: cfgID, ResourceKey: "server/lobby"})
		if err != nil || after.ID != lobby.ID || after.MemoryMB != 768 || after.Status != servers.StatusRunning {
			t.Errorf("lobby after the update = %+v, %v; want the same server, 768 MB, running", after, err)
		}
		if b, _ := os.ReadFile(filepath.Join(root, "world.dat")); string(b) != "world" {
			t.Errorf("world.dat after the update = %q, want kept", b)
		}
		// A delete needs a snapshot, which this version lacks: refused,
		// nothing destroyed.
		_, r3 := e.apply(cfgID, strings.Split(network, "  build:")[0])
		got = e.wait(r3.ID)
		if got.Status != runs.Failed || got.FailureClass != runs.FailInternal || !strings.Contains(got.Error, "snapshot") {
			t.Errorf("delete run = %s %s %q; want failed, internal, about snapshots", got.Status, got.FailureClass, got.Error)
		}
		if owned, _ := e.srv.OwnedBy(ctx, e.teamID, cfgID); len(owned) != 3 {
			t.Errorf("owned servers after a refused delete = %d, want 3", len(owned))
		}
	})
}

// TestResumeAfterOwnerDied: a run whose owner died after making one of
// its servers is taken over once its lease expires, resumed with
// run.resumed, and ends succeeded without a second server for that key.
func TestResumeAfterOwnerDied(t *testing.T) {
	db := storetest.SQLite(t)
	e := newEnv(t, db)
	ctx := t.Context()
	cfgID, r := e.apply("", network)
	// The dead owner: claimed the run with a lease that is already over,
	// and made lobby before dying.
	if _, ok, err := e.q.Claim(ctx, "inst_dead", time.Millisecond); err != nil || !ok {
		t.Fatalf("Claim = %v, %v", ok, err)
	}
	first, _, err := e.srv.CreateOwned(ctx, e.teamID, servers.Owner{ConfigurationID: cfgID, ResourceKey: "server/lobby"},
		servers.NewServer{Name: "lobby", Software: "kiln-test", MemoryMB: 512, DiskMB: 1024})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond) // past the dead owner's 1 ms lease: nothing to wait on but the clock
	e.start("inst_alive")
	got := e.wait(r.ID)
	if got.Status != runs.Succeeded || got.LeaseOwner != "inst_alive" {
		t.Fatalf("resumed run = %s %q by %s; want succeeded by inst_alive", got.Status, got.Error, got.LeaseOwner)
	}
	if ev := e.events(r.ID); !strings.Contains(ev, "run.resumed") {
		t.Errorf("events = %s, want run.resumed", ev)
	}
	owned, _ := e.srv.OwnedBy(ctx, e.teamID, cfgID)
	if len(owned) != 3 || owned["server/lobby"].ID != first.ID {
		t.Errorf("owned after the resume: %d servers, lobby %s; want 3 and the server made before the crash (%s)", len(owned), owned["server/lobby"].ID, first.ID)
	}
}

// TestCancelExecutingRun: a cancel of an executing run stops it between
// steps: what was done stays, the rest is skipped, the run is canceled.
func TestCancelExecutingRun(t *testing.T) {
	db := storetest.SQLite(t)
	e := newEnv(t, db)
	ctx := t.Context()
	_, r := e.apply("", network)
	e.startWith("inst_one", 1)
	deadline := time.Now().Add(60 * time.Second)
	for {
		rs, err := e.q.Resources(ctx, e.teamID, r.ID)
		if err != nil {
			t.Fatal(err)
		}
		running := false
		for _, res := range rs {
			running = running || res.Status == runs.ResourceRunning
		}
		if running {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no step started within 60 s")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if _, err := e.q.RequestCancel(ctx, e.teamID, r.ID); err != nil {
		t.Fatal(err)
	}
	got := e.wait(r.ID)
	if got.Status != runs.Canceled || got.FailureClass != runs.FailCanceled {
		t.Fatalf("run after cancel = %s %s %q, want canceled", got.Status, got.FailureClass, got.Error)
	}
	rs, _ := e.q.Resources(ctx, e.teamID, r.ID)
	counts := map[runs.ResourceStatus]int{}
	for _, res := range rs {
		counts[res.Status]++
	}
	if counts[runs.ResourceSucceeded] < 1 || counts[runs.ResourceSkipped] < 1 || counts[runs.ResourcePending]+counts[runs.ResourceRunning] != 0 {
		t.Errorf("resources after the cancel = %v, want the started step done and the others skipped", counts)
	}
	if ev := e.events(r.ID); !strings.HasSuffix(ev, "run.canceled") {
		t.Errorf("events = %s", ev)
	}
}

// TestProxyWiredToBackends: a proxy applied with two backends answers a
// status ping with its first try backend's MOTD (kiln-test-proxy forwards
// the ping through the velocity.toml Kiln wrote), its modern forwarding
// secret is in forwarding.secret (0600) and the same one every apply.
func TestProxyWiredToBackends(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		e := newEnv(t, db)
		ctx := t.Context()
		box, err := secretbox.Load(t.TempDir(), "")
		if err != nil {
			t.Fatal(err)
		}
		e.startOpts(executor.Options{Owner: "inst_proxy", Secrets: box})
		yaml := `version: 1
servers:
  lobby:
    software: kiln-test
    memory: 256M
    disk: 1G
    env: {MOTD: "Lobby behind the proxy"}
  survival:
    software: kiln-test
    memory: 256M
    disk: 1G
proxies:
  edge:
    software: kiln-test-proxy
    memory: 256M
    disk: 1G
    servers: [lobby, survival]
    try: [lobby, survival]
    forwarding: modern
`
		cfgID, r := e.apply("", yaml)
		got := e.wait(r.ID)
		if got.Status != runs.Succeeded || got.Summary.Create != 3 {
			t.Fatalf("run = %s %s %q, summary %+v; want succeeded creating 3", got.Status, got.FailureClass, got.Error, got.Summary)
		}
		edge, err := e.srv.FindOwned(ctx, e.teamID, servers.Owner{ConfigurationID: cfgID, ResourceKey: "proxy/edge"})
		if err != nil || edge.Status != servers.StatusRunning || edge.Software != "kiln-test-proxy" {
			t.Fatalf("edge = %+v, %v; want a running kiln-test-proxy", edge, err)
		}
		pctx, pcancel := context.WithTimeout(ctx, 30*time.Second)
		st, err := slp.Ping(pctx, edge.Address)
		pcancel()
		if err != nil || st.Description != "Lobby behind the proxy" {
			t.Errorf("ping of the proxy = %q, %v; want the lobby's MOTD", st.Description, err)
		}
		root := e.srvEnv.Node.Root(edge.ID)
		toml, _ := os.ReadFile(filepath.Join(root, "velocity.toml"))
		owned, _ := e.srv.OwnedBy(ctx, e.teamID, cfgID)
		for _, k := range []string{"server/lobby", "server/survival"} {
			if !strings.Contains(string(toml), owned[k].Address) {
				t.Errorf("velocity.toml does not name %s at %s:\n%s", k, owned[k].Address, toml)
			}
		}
		secret, err := os.ReadFile(filepath.Join(root, "forwarding.secret"))
		fi, _ := os.Stat(filepath.Join(root, "forwarding.secret"))
		if err != nil || len(secret) != 64 || fi.Mode().Perm() != 0o600 {
			t.Errorf("forwarding.secret = %d bytes, mode %v, %v; want 64 bytes, 0600", len(secret), fi.Mode().Perm(), err)
		}
		// The same secret on the next apply (made once per configuration).
		_, r2 := e.apply(cfgID, strings.Replace(yaml, "Lobby behind the proxy", "Lobby, again", 1))
		if got := e.wait(r2.ID); got.Status != runs.Succeeded {
			t.Fatalf("second run = %s %q", got.Status, got.Error)
		}
		if again, _ := os.ReadFile(filepath.Join(root, "forwarding.secret")); string(again) != string(secret) {
			t.Error("the forwarding secret changed between two applies")
		}
	})
}
