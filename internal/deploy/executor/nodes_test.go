package executor_test

import (
	"testing"
	"time"

	"github.com/kilnhq/kiln/internal/cluster"
	"github.com/kilnhq/kiln/internal/deploy/runs"
	"github.com/kilnhq/kiln/internal/nodes"
	"github.com/kilnhq/kiln/internal/store/storetest"
)

// TestSpecNodeApplied: a server whose spec names its node is made there;
// naming another node for it later fails the run (validation) with a
// sentence saying a move needs a transfer, the server left where it is;
// a new server naming a node this control plane cannot place on fails
// with capacity and that node's reason.
func TestSpecNodeApplied(t *testing.T) {
	db := storetest.SQLite(t)
	e := newEnv(t, db)
	ctx := t.Context()
	// Another kiln serve's local node: it exists, but this one does not
	// create servers on it.
	if err := nodes.New(db, time.Now).RegisterLocal(ctx, "other", cluster.Hello{PortFirst: 30000, PortLast: 30009, Runtime: "process"}); err != nil {
		t.Fatal(err)
	}
	e.start("inst_one")
	local := e.srvEnv.Node.Name()
	cfgID, r := e.apply("", "version: 1\nservers:\n  lobby: {software: kiln-test, memory: 512M, disk: 1G, state: stopped, node: "+local+"}\n")
	if got := e.wait(r.ID); got.Status != runs.Succeeded {
		t.Fatalf("run naming the local node = %s %s %q, want succeeded", got.Status, got.FailureClass, got.Error)
	}
	owned, err := e.srv.OwnedBy(ctx, e.teamID, cfgID)
	if err != nil || owned["server/lobby"].Node != local {
		t.Fatalf("lobby after the run: %+v, %v; want it on node %s", owned["server/lobby"], err, local)
	}
	lobby := owned["server/lobby"]

	_, r = e.apply(cfgID, "version: 1\nservers:\n  lobby: {software: kiln-test, memory: 512M, disk: 1G, state: stopped, node: other}\n")
	got := e.wait(r.ID)
	want := "server/lobby: it runs on node " + local + ": moving it to node other needs a transfer, which this version does not do; name node " + local + " or none"
	if got.Status != runs.Failed || got.FailureClass != runs.FailValidation || got.Error != want {
		t.Errorf("run moving lobby = %s %s %q\nwant failed validation %q", got.Status, got.FailureClass, got.Error, want)
	}
	if owned, _ := e.srv.OwnedBy(ctx, e.teamID, cfgID); owned["server/lobby"].ID != lobby.ID || owned["server/lobby"].Node != local {
		t.Errorf("lobby after the refused move: %+v; want %s on %s", owned["server/lobby"], lobby.ID, local)
	}

	_, r = e.apply(cfgID, "version: 1\nservers:\n  lobby: {software: kiln-test, memory: 512M, disk: 1G, state: stopped, node: "+local+"}\n"+
		"  hub: {software: kiln-test, memory: 512M, disk: 1G, state: stopped, node: other}\n")
	got = e.wait(r.ID)
	want = "server/hub: no node can take the server: node other: the local node of another kiln serve, which alone creates servers on it in this version"
	if got.Status != runs.Failed || got.FailureClass != runs.FailCapacity || got.Error != want {
		t.Errorf("run placing hub on another kiln serve's node = %s %s %q\nwant failed capacity %q", got.Status, got.FailureClass, got.Error, want)
	}
}
