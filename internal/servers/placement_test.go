package servers_test

import (
	"errors"
	"net"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/kilnhq/kiln/internal/cluster"
	"github.com/kilnhq/kiln/internal/nodes"
	"github.com/kilnhq/kiln/internal/servers"
	"github.com/kilnhq/kiln/internal/servers/serverstest"
	"github.com/kilnhq/kiln/internal/store"
	"github.com/kilnhq/kiln/internal/store/storetest"
	"github.com/kilnhq/kiln/internal/validate"
)

// TestCreatePlaced: Create and CreateOwned take the node and port
// placement chooses, within the memory the node offers times the
// overcommit; past it, and on a node asked that does not fit or does
// not exist, nothing is made.
func TestCreatePlaced(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		teamID := team(t, db)
		// 1 GiB × 1.5: 1536 MiB for servers.
		env := serverstest.New(t, db, serverstest.Options{NodeName: "n1", NodeMemory: 1 << 30, Overcommit: 1.5})
		svc := env.Service
		ctx := t.Context()
		ns := func(name string, mem int) servers.NewServer {
			return servers.NewServer{Name: name, Software: "kiln-test", MemoryMB: mem, DiskMB: 1024}
		}
		first, err := svc.Create(ctx, teamID, ns("a", 1024))
		if err != nil || first.Node != "n1" || first.Port != env.Node.Ports().First {
			t.Fatalf("Create = %+v, %v; want it on n1, port %d", first, err, env.Node.Ports().First)
		}
		asked := ns("b", 256)
		asked.Node = "n1"
		if sv, err := svc.Create(ctx, teamID, asked); err != nil || sv.Node != "n1" || sv.Port != env.Node.Ports().First+1 {
			t.Fatalf("Create on n1 = %+v, %v; want it on n1, the next port", sv, err)
		}
		full := &nodes.NoCapacityError{Refusals: []nodes.Refusal{{Node: "n1", Reason: "256 MiB of memory free, 512 asked"}}}
		if _, err := svc.Create(ctx, teamID, ns("c", 512)); !reflect.DeepEqual(err, full) {
			t.Errorf("Create past 1.5 × 1 GiB = %v, want %v", err, full)
		}
		o := servers.Owner{ConfigurationID: "cfg_placed", ResourceKey: "server/c"}
		if _, _, err := svc.CreateOwned(ctx, teamID, o, ns("c", 512)); !reflect.DeepEqual(err, full) {
			t.Errorf("CreateOwned past 1.5 × 1 GiB = %v, want %v", err, full)
		}
		if sv, created, err := svc.CreateOwned(ctx, teamID, o, ns("c", 256)); err != nil || !created || sv.Node != "n1" {
			t.Errorf("CreateOwned of the last 256 MiB = %+v, %v, %v; want it made on n1", sv, created, err)
		}
		asked.Node = "nope"
		if _, err := svc.Create(ctx, teamID, asked); !reflect.DeepEqual(err, &nodes.UnknownNodeError{Name: "nope"}) {
			t.Errorf("Create on an unknown node = %v, want *nodes.UnknownNodeError", err)
		}
		asked.Node = "not a name!"
		ve, ok := errors.AsType[*validate.Error](func() error { _, err := svc.Create(ctx, teamID, asked); return err }())
		if want := []validate.Issue{{Path: "node", Message: "must be a node's name: 1-63 letters, digits, '.', '_' or '-', starting with a letter or digit"}}; !ok ||
			!reflect.DeepEqual(ve.Issues, want) {
			t.Errorf("Create on a malformed node name = %v, want %v", ve, want)
		}
		l, err := svc.Listing(ctx, teamID)
		if err != nil || len(l.Servers) != 3 {
			t.Errorf("servers = %v, %v; want the 3 made", l, err)
		}
	})
}

// TestCreateSkipsBusyPorts: ports of the node's range something else
// on the host listens on are skipped, whether the node's last report
// says so or only a probe finds it.
func TestCreateSkipsBusyPorts(t *testing.T) {
	db := storetest.SQLite(t)
	teamID := team(t, db)
	env := serverstest.New(t, db, serverstest.Options{})
	first := env.Node.Ports().First
	c, err := env.Node.Capacity(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	// The report calls first+1 busy (a program that since ended); first
	// is busy, unreported yet.
	err = nodes.New(db, nil).BeatLocal(t.Context(), "local", cluster.Heartbeat{MemoryTotal: 1 << 40, DiskTotal: c.DiskBytes, PortsBusy: []int{first + 1}}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", ":"+strconv.Itoa(first))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	sv, err := env.Service.Create(t.Context(), teamID, servers.NewServer{Name: "a", Software: "kiln-test", MemoryMB: 256, DiskMB: 1024})
	if err != nil || sv.Port != first+2 {
		t.Fatalf("Create = port %d, %v; want %d (%d is busy, %d reported busy)", sv.Port, err, first+2, first, first+1)
	}
}
