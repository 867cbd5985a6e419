package servers_test

import (
	"errors"
	"testing"

	"github.com/kilnhq/kiln/internal/servers"
	"github.com/kilnhq/kiln/internal/servers/serverstest"
	"github.com/kilnhq/kiln/internal/store/storetest"
)

// TestOtherNodesServer: two replicas share one PostgreSQL database, each
// managing its own node. Both see every server of the team, but only the
// server's own node acts on its processes and files: the other refuses
// with *OtherNodeError naming both nodes, and changes nothing.
func TestOtherNodesServer(t *testing.T) {
	db := storetest.Postgres(t)
	teamID := team(t, db)
	a := serverstest.New(t, db, serverstest.Options{NodeName: "node-a"}).Service
	b := serverstest.New(t, db, serverstest.Options{NodeName: "node-b"}).Service
	sv := newTestServer(t, a, teamID)
	if got, err := b.Get(t.Context(), teamID, sv.ID); err != nil || got.Node != "node-a" {
		t.Fatalf("node-b's Get = %+v, %v; want the server of node-a", got, err)
	}
	check := func(what string, err error) {
		t.Helper()
		oe, ok := errors.AsType[*servers.OtherNodeError](err)
		if !ok || oe.Node != "node-a" || oe.Here != "node-b" {
			t.Errorf("%s on node-b = %v, want *OtherNodeError (node-a, node-b)", what, err)
		}
	}
	check("Power", b.Power(t.Context(), teamID, sv.ID, "start"))
	check("Command", b.Command(t.Context(), teamID, sv.ID, "list"))
	_, err := b.Access(t.Context(), teamID, sv.ID, true)
	check("Access", err)
	_, err = b.Console(t.Context(), teamID, sv.ID, 10)
	check("Console", err)
	check("Reinstall", b.Reinstall(t.Context(), teamID, sv.ID, "", ""))
	check("Delete", b.Delete(t.Context(), teamID, sv.ID))
	if got, err := a.Get(t.Context(), teamID, sv.ID); err != nil || got.Status != servers.StatusOffline || got.DesiredState == "running" {
		t.Errorf("after node-b's refusals: %+v, %v; want the server unchanged", got, err)
	}
	if err := a.Power(t.Context(), teamID, sv.ID, "start"); err != nil {
		t.Errorf("Power on its own node = %v", err)
	}
}
