package servers_test

import (
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"

	"github.com/kilnhq/kiln/internal/nodes"
	"github.com/kilnhq/kiln/internal/servers"
	"github.com/kilnhq/kiln/internal/servers/serverstest"
	"github.com/kilnhq/kiln/internal/store"
	"github.com/kilnhq/kiln/internal/store/storetest"
)

// TestTeamLimits: each operator-set limit refuses the server that would
// pass it with a *TeamLimitError naming it, also when many creates race;
// limits of one team do not touch another's.
func TestTeamLimits(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		ctx := t.Context()
		teamID := team(t, db)
		env := serverstest.New(t, db, serverstest.Options{})
		svc := env.Service
		if l, err := servers.GetTeamLimits(ctx, db, teamID); err != nil || l != (servers.TeamLimits{}) {
			t.Fatalf("GetTeamLimits before any = %+v, %v; want none", l, err)
		}
		set := servers.TeamLimits{Servers: 3, MemoryMB: 2048, DiskMB: 4096, Snapshots: 7}
		if err := servers.SetTeamLimits(ctx, db, teamID, set); err != nil {
			t.Fatal(err)
		}
		if l, err := servers.GetTeamLimits(ctx, db, teamID); err != nil || l != set {
			t.Fatalf("GetTeamLimits = %+v, %v; want %+v", l, err, set)
		}
		create := func(mem, disk int) error {
			_, err := svc.Create(ctx, teamID, servers.NewServer{Name: "s", Software: "kiln-test", MemoryMB: mem, DiskMB: disk})
			return err
		}
		wantLimit := func(err error, limit string) {
			t.Helper()
			le, ok := errors.AsType[*servers.TeamLimitError](err)
			if !ok || le.Limit != limit {
				t.Fatalf("Create = %v, want a team limit error on %s", err, limit)
			}
		}
		if err := create(1024, 1024); err != nil {
			t.Fatal(err)
		}
		wantLimit(create(1536, 1024), "memory") // 1024 + 1536 > 2048
		wantLimit(create(512, 3200), "disk")    // 1024 + 3200 > 4096
		// Ten creates race for the two servers left: exactly two win.
		var wg sync.WaitGroup
		var mu sync.Mutex
		won, refused := 0, 0
		for range 10 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				err := create(256, 1024)
				mu.Lock()
				defer mu.Unlock()
				if err == nil {
					won++
				} else if _, ok := errors.AsType[*servers.TeamLimitError](err); ok {
					refused++
				} else {
					t.Errorf("racing Create = %v", err)
				}
			}()
		}
		wg.Wait()
		if won != 2 || refused != 8 {
			t.Errorf("10 racing creates with 2 servers left: %d created, %d refused; want 2 and 8", won, refused)
		}
		wantLimit(create(256, 1024), "servers")
		if err := create(256, 1024); err == nil || err.Error() != "the team may have at most 3 servers and has 3 (team limit: servers)" {
			t.Errorf("message = %v", err)
		}
		// Lifting a limit (0) allows the next one.
		if err := servers.SetTeamLimits(ctx, db, teamID, servers.TeamLimits{MemoryMB: 2048}); err != nil {
			t.Fatal(err)
		}
		wantLimit(create(1024, 1024), "memory") // 1536 + 1024 > 2048
		if err := servers.SetTeamLimits(ctx, db, teamID, servers.TeamLimits{}); err != nil {
			t.Fatal(err)
		}
		if err := create(256, 1024); err != nil {
			t.Errorf("Create without limits = %v", err)
		}
	})
}

// TestCreatePortsUnderConcurrency: creates racing for ports get distinct
// ones (the host is probed outside the transaction; the unique index
// settles the race).
func TestCreatePortsUnderConcurrency(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		teamID := team(t, db)
		svc := serverstest.New(t, db, serverstest.Options{}).Service
		var wg sync.WaitGroup
		var mu sync.Mutex
		ports := map[string]bool{}
		for range 12 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				sv, err := svc.Create(t.Context(), teamID, servers.NewServer{Name: "p", Software: "kiln-test", MemoryMB: 256, DiskMB: 1024})
				if err != nil {
					t.Errorf("Create = %v", err)
					return
				}
				mu.Lock()
				defer mu.Unlock()
				if ports[sv.Address] {
					t.Errorf("address %s handed out twice", sv.Address)
				}
				ports[sv.Address] = true
			}()
		}
		wg.Wait()
	})
}

// TestDiskLimitWithinNode: a disk_mb the node's disk cannot hold finds
// no node, and the refusal names what the disk holds.
func TestDiskLimitWithinNode(t *testing.T) {
	db := storetest.SQLite(t)
	teamID := team(t, db)
	env := serverstest.New(t, db, serverstest.Options{})
	c, err := env.Node.Capacity(t.Context())
	if err != nil || c.DiskBytes <= 0 {
		t.Fatalf("the node's capacity = %+v, %v: want its disk's size", c, err)
	}
	holds := c.DiskBytes >> 20
	if holds >= servers.MaxDiskMB {
		t.Skipf("SKIP DISK LIMIT: this host's disk holds %d MB, at least MaxDiskMB (%d): no disk_mb the API takes is too large for it", holds, servers.MaxDiskMB)
	}
	_, err = env.Service.Create(t.Context(), teamID, servers.NewServer{Name: "big", Software: "kiln-test", MemoryMB: 256, DiskMB: int(holds) + 1})
	want := &nodes.NoCapacityError{Refusals: []nodes.Refusal{{Node: "local", Reason: fmt.Sprintf("a disk of %d MiB, %d asked", holds, holds+1)}}}
	if !reflect.DeepEqual(err, want) {
		t.Fatalf("Create with disk_mb %d on a %d MB disk = %v, want %v", holds+1, holds, err, want)
	}
	if _, err := env.Service.Create(t.Context(), teamID, servers.NewServer{Name: "fits", Software: "kiln-test", MemoryMB: 256, DiskMB: servers.MinDiskMB}); err != nil {
		t.Errorf("Create with disk_mb %d = %v, want it made", servers.MinDiskMB, err)
	}
}
