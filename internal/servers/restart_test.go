package servers_test

import (
	"strings"
	"testing"

	"github.com/kilnhq/kiln/internal/servers"
	"github.com/kilnhq/kiln/internal/servers/serverstest"
	"github.com/kilnhq/kiln/internal/store/storetest"
)

// TestRestartIsNotACrash: the end of the instance a restart stopped is
// not taken for a crash of the next one (its supervisor could run after
// the next start had reset the stop request: the server was marked
// crashed while it ran).
func TestRestartIsNotACrash(t *testing.T) {
	db := storetest.SQLite(t)
	teamID := team(t, db)
	svc := serverstest.New(t, db, serverstest.Options{}).Service
	sv := newTestServer(t, svc, teamID)
	if err := svc.Power(t.Context(), teamID, sv.ID, "start"); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, svc, teamID, sv.ID, servers.StatusRunning)
	for range 5 {
		if err := svc.Power(t.Context(), teamID, sv.ID, "restart"); err != nil {
			t.Fatal(err)
		}
		waitFor(t, svc, teamID, sv.ID, "running again after the restart", func(s servers.Server) bool {
			return s.Status == servers.StatusRunning || s.Status == servers.StatusCrashed
		})
	}
	lines, err := svc.Console(t.Context(), teamID, sv.ID, 2000)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range lines {
		if strings.Contains(l, "exited unexpectedly") {
			t.Errorf("a restart was taken for a crash: %q", l)
		}
	}
	if got, _ := svc.Get(t.Context(), teamID, sv.ID); got.Status != servers.StatusRunning {
		t.Errorf("status after 5 restarts = %s, want running", got.Status)
	}
}
