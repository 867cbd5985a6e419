package servers_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kilnhq/kiln/internal/catalog"
	"github.com/kilnhq/kiln/internal/deploy"
	"github.com/kilnhq/kiln/internal/node"
	"github.com/kilnhq/kiln/internal/servers"
	"github.com/kilnhq/kiln/internal/servers/serverstest"
	"github.com/kilnhq/kiln/internal/slp"
	"github.com/kilnhq/kiln/internal/store"
	"github.com/kilnhq/kiln/internal/store/storetest"
)

// TestOwnedServers: the server of a configuration's resource key is made
// once, however many steps race to make it or resume after a crash; it is
// an ordinary server in the team's list, refuses a delete by hand naming
// its configuration, and goes only through DeleteOwned.
func TestOwnedServers(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		ctx := t.Context()
		teamID := team(t, db)
		env := serverstest.New(t, db, serverstest.Options{})
		svc := env.Service
		cat, err := catalog.Load(false)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := deploy.New(db, cat, node.PortRange{}).Create(ctx, teamID, "network", "", "version: 1\nservers:\n  lobby:\n    software: paper\n    memory: 1G\n")
		if err != nil {
			t.Fatal(err)
		}
		o := servers.Owner{ConfigurationID: cfg.ID, ResourceKey: "server/lobby"}
		ns := servers.NewServer{Name: "lobby", Software: "kiln-test", MemoryMB: 512, DiskMB: 1024}
		var wg sync.WaitGroup
		var mu sync.Mutex
		ids, made := map[string]bool{}, 0
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				sv, created, err := svc.CreateOwned(ctx, teamID, o, ns)
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					t.Errorf("CreateOwned = %v", err)
					return
				}
				ids[sv.ID] = true
				if created {
					made++
				}
			}()
		}
		wg.Wait()
		if len(ids) != 1 || made != 1 {
			t.Fatalf("8 racing CreateOwned of one key: %d servers, %d created; want 1 and 1", len(ids), made)
		}
		var id string
		for id = range ids {
		}
		sv := waitStatus(t, svc, teamID, id, servers.StatusOffline)
		if sv.Name != "lobby" || sv.Software != "kiln-test" || sv.ConfigurationID == nil || *sv.ConfigurationID != cfg.ID {
			t.Errorf("owned server = %+v, want name lobby, software kiln-test, configuration %s", sv, cfg.ID)
		}
		// A step resumed after a crash finds it.
		if again, created, err := svc.CreateOwned(ctx, teamID, o, ns); err != nil || created || again.ID != id {
			t.Errorf("CreateOwned again = %s, %v, %v; want %s, not created", again.ID, created, err, id)
		}
		if owned, err := svc.OwnedBy(ctx, teamID, cfg.ID); err != nil || len(owned) != 1 || owned["server/lobby"].ID != id {
			t.Errorf("OwnedBy = %v, %v", owned, err)
		}
		// By hand: refused, naming the configuration and the key.
		err = svc.Delete(ctx, teamID, id)
		oe, ok := errors.AsType[*servers.OwnedError](err)
		if !ok || !errors.Is(err, servers.ErrOwned) || oe.ConfigurationID != cfg.ID || !strings.Contains(err.Error(), cfg.ID+" as server/lobby") {
			t.Errorf("Delete of an owned server by hand = %v, want an OwnedError naming %s and server/lobby", err, cfg.ID)
		}
		motd := "changed by hand"
		_, err = svc.SetEnv(ctx, teamID, id, map[string]*string{"MOTD": &motd})
		if oe, ok := errors.AsType[*servers.OwnedError](err); !ok || oe.ResourceKey != "server/lobby" {
			t.Errorf("SetEnv of an owned server = %v, want an OwnedError naming server/lobby", err)
		}
		// Another team finds nothing and deletes nothing.
		if _, err := svc.FindOwned(ctx, "team_other", o); !errors.Is(err, servers.ErrNotFound) {
			t.Errorf("FindOwned by another team = %v, want ErrNotFound", err)
		}
		if err := svc.DeleteOwned(ctx, "team_other", o); err != nil {
			t.Errorf("DeleteOwned by another team = %v, want nothing done", err)
		}
		if _, err := svc.Get(ctx, teamID, id); err != nil {
			t.Fatalf("the server after another team's DeleteOwned: %v", err)
		}
		if err := svc.DeleteOwned(ctx, teamID, o); err != nil {
			t.Fatal(err)
		}
		if err := svc.DeleteOwned(ctx, teamID, o); err != nil {
			t.Errorf("DeleteOwned again (a resumed step) = %v", err)
		}
		if _, err := svc.Get(ctx, teamID, id); !errors.Is(err, servers.ErrNotFound) {
			t.Errorf("Get after DeleteOwned = %v", err)
		}
	})
}

// TestUpdateOwned: an update step changes an owned server in place — its
// files kept, a running server restarted with the new settings — and the
// team's limits bound only the growth.
func TestUpdateOwned(t *testing.T) {
	db := storetest.SQLite(t)
	ctx := t.Context()
	teamID := team(t, db)
	svc := serverstest.New(t, db, serverstest.Options{}).Service
	o := servers.Owner{ConfigurationID: "cfg_AAAAAAAAAAAAAAAAAAAA", ResourceKey: "server/lobby"}
	sv, _, err := svc.CreateOwned(ctx, teamID, o, servers.NewServer{Name: "lobby", Software: "kiln-test", MemoryMB: 512, DiskMB: 1024, Env: map[string]string{"MOTD": "old"}})
	if err != nil {
		t.Fatal(err)
	}
	sv = waitStatus(t, svc, teamID, sv.ID, servers.StatusOffline)
	if err := svc.Power(ctx, teamID, sv.ID, "start"); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, svc, teamID, sv.ID, servers.StatusRunning)
	mem, disk := 768, 2048
	got, err := svc.UpdateOwned(ctx, teamID, o, servers.Change{MemoryMB: &mem, DiskMB: &disk, Env: map[string]string{"MOTD": "new"}})
	if err != nil {
		t.Fatal(err)
	}
	if got.MemoryMB != 768 || got.DiskMB != 2048 || got.Env["MOTD"] != "new" || got.ID != sv.ID {
		t.Errorf("UpdateOwned = %+v, want memory 768, disk 2048, MOTD new, the same server", got)
	}
	// The running server was restarted with the new settings: its status
	// ping answers the new MOTD.
	deadline := time.Now().Add(30 * time.Second)
	for {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		st, err := slp.Ping(pctx, sv.Address)
		cancel()
		if err == nil && st.Description == "new" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the server never answered the new MOTD after the update: %+v, %v", st, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// Nothing changed: no restart asked.
	if _, err := svc.UpdateOwned(ctx, teamID, o, servers.Change{MemoryMB: &mem}); err != nil {
		t.Errorf("UpdateOwned without a change = %v", err)
	}
	// Team limits bound the growth only.
	if err := servers.SetTeamLimits(ctx, db, teamID, servers.TeamLimits{MemoryMB: 1024}); err != nil {
		t.Fatal(err)
	}
	big, small := 2048, 512
	if _, err := svc.UpdateOwned(ctx, teamID, o, servers.Change{MemoryMB: &big}); err == nil {
		t.Error("UpdateOwned past the team's memory succeeded")
	} else if le, ok := errors.AsType[*servers.TeamLimitError](err); !ok || le.Limit != "memory" || le.Asked != 2048-768 {
		t.Errorf("UpdateOwned past the team's memory = %v, want a memory limit error asking 1280 MB more", err)
	}
	if _, err := svc.UpdateOwned(ctx, teamID, o, servers.Change{MemoryMB: &small}); err != nil {
		t.Errorf("UpdateOwned shrinking under a limit = %v", err)
	}
	bad := 1
	if _, err := svc.UpdateOwned(ctx, teamID, o, servers.Change{MemoryMB: &bad}); err == nil {
		t.Error("UpdateOwned to 1 MB of memory succeeded")
	}
	if _, err := svc.UpdateOwned(ctx, teamID, servers.Owner{ConfigurationID: o.ConfigurationID, ResourceKey: "server/none"}, servers.Change{}); !errors.Is(err, servers.ErrNotFound) {
		t.Errorf("UpdateOwned of a missing key = %v, want ErrNotFound", err)
	}
}
