package nodes

import (
	"database/sql"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/kilnhq/kiln/internal/cluster"
	"github.com/kilnhq/kiln/internal/store"
	"github.com/kilnhq/kiln/internal/store/storetest"
)

// within is the silence allowed after the reports of these tests.
const within = 30 * time.Second

// local lists a local node with a report (none when hb is nil).
func (f *fixture) local(t *testing.T, name, runtime string, first, last int, hb *cluster.Heartbeat) {
	t.Helper()
	if err := f.svc.RegisterLocal(t.Context(), name, cluster.Hello{PortFirst: first, PortLast: last, Runtime: runtime}); err != nil {
		t.Fatal(err)
	}
	if hb != nil {
		if err := f.svc.BeatLocal(t.Context(), name, *hb, within); err != nil {
			t.Fatal(err)
		}
	}
}

// server records a server of memoryMB on node's port, as servers does.
func (f *fixture) server(t *testing.T, node string, port, memoryMB int) {
	t.Helper()
	ctx := t.Context()
	if _, err := f.db.Write().ExecContext(ctx, `INSERT INTO teams (id, name, created_at) VALUES ('team_a', 'a', 1) ON CONFLICT (id) DO NOTHING`); err != nil {
		t.Fatal(err)
	}
	if _, err := f.db.Write().ExecContext(ctx, `INSERT INTO servers (id, team_id, name, software, version, status, node, port, memory_mb, disk_mb, cpu_percent, created_at, updated_at)
VALUES ($1, 'team_a', $1, 'paper', '1.21.4', 'offline', $2, $3, $4, 1024, 100, 1, 1)`, fmt.Sprintf("%s-%d", node, port), node, port, memoryMB); err != nil {
		t.Fatal(err)
	}
}

func gib(n int64) int64 { return n << 30 }

// cluster7 is a cluster of every kind of node: this process's candidates
// a, b, c, d and g, another kiln serve's local node z, an agent e
// (ready) and a pending agent f.
//
//	a  process, ready, 8 GiB (2048 MiB taken), disk 100 GiB, ports 25565-25566 (25565 taken)
//	b  docker, ready, 4 GiB, disk 20 GiB, ports 30000-30009
//	c  draining, 64 GiB
//	d  never reported: unreachable
//	g  ready, 16 GiB, ports 31000-31001: one a server's, one busy on the host
func cluster7(t *testing.T, db *store.DB) *fixture {
	t.Helper()
	f := newFixture(t, db)
	big := &cluster.Heartbeat{MemoryTotal: gib(64), DiskTotal: gib(500)}
	f.local(t, "a", "process", 25565, 25566, &cluster.Heartbeat{MemoryTotal: gib(8), MemoryFree: gib(1), DiskTotal: gib(100), DiskFree: gib(1)})
	f.server(t, "a", 25565, 2048)
	f.local(t, "b", "docker", 30000, 30009, &cluster.Heartbeat{MemoryTotal: gib(4), DiskTotal: gib(20)})
	f.local(t, "c", "process", 25565, 25664, big)
	if err := f.svc.SetDraining(t.Context(), "c", true); err != nil {
		t.Fatal(err)
	}
	f.local(t, "d", "process", 25565, 25664, nil)
	serial := f.enroll(t, "e")
	if err := f.svc.Hello(t.Context(), "e", serial, "192.0.2.1:4000", cluster.Hello{PortFirst: 25565, PortLast: 25664, Runtime: "process"}); err != nil {
		t.Fatal(err)
	}
	if err := f.svc.Beat(t.Context(), "e", serial, *big, within); err != nil {
		t.Fatal(err)
	}
	if _, _, err := f.svc.Add(t.Context(), "f", f.ca.Certificate()); err != nil {
		t.Fatal(err)
	}
	f.local(t, "g", "process", 31000, 31001, &cluster.Heartbeat{MemoryTotal: gib(16), DiskTotal: gib(100), PortsBusy: []int{31001, 25565}})
	f.server(t, "g", 31000, 1024)
	f.local(t, "z", "process", 25565, 25664, big)
	return f
}

var candidates7 = []string{"a", "b", "c", "d", "g"}

func TestPlace(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		f := cluster7(t, db)
		p := NewPlacer(f.svc, candidates7, 1)
		agent := "game servers on agents need kiln serve --cluster-addr"
		replica := "the local node of another kiln serve, which alone creates servers on it in this version"
		for _, tc := range []struct {
			name string
			r    Request
			want Placement
			err  error
		}{
			{"the most memory free", Request{MemoryMB: 1024, DiskMB: 1024}, Placement{Node: "a", Port: 25566}, nil},
			{"memory to the last MiB", Request{MemoryMB: 6144, DiskMB: 1024}, Placement{Node: "a", Port: 25566}, nil},
			{"too big for every node", Request{MemoryMB: 6145, DiskMB: 1024}, Placement{}, &NoCapacityError{Refusals: []Refusal{
				{"a", "6144 MiB of memory free, 6145 asked"},
				{"b", "4096 MiB of memory free, 6145 asked"},
				{"c", "draining"},
				{"d", "unreachable"},
				{"e", agent},
				{"f", "not joined yet"},
				{"g", "no free game port in 31000-31001"},
				{"z", replica},
			}}},
			{"runtime docker", Request{MemoryMB: 1024, DiskMB: 1024, Runtime: "docker"}, Placement{Node: "b", Port: 30000}, nil},
			{"runtime process", Request{MemoryMB: 1024, DiskMB: 1024, Runtime: "process"}, Placement{Node: "a", Port: 25566}, nil},
			{"a disk only one holds", Request{MemoryMB: 1024, DiskMB: 30000}, Placement{Node: "a", Port: 25566}, nil},
			{"ports found taken since", Request{MemoryMB: 1024, DiskMB: 1024, Taken: map[string]map[int]bool{"a": {25566: true}}},
				Placement{Node: "b", Port: 30000}, nil},
			{"a port asked", Request{MemoryMB: 1024, DiskMB: 1024, Port: 30005}, Placement{Node: "b", Port: 30005}, nil},
			{"a port asked taken or outside", Request{MemoryMB: 1024, DiskMB: 1024, Port: 25565}, Placement{}, &NoCapacityError{Refusals: []Refusal{
				{"a", "port 25565 is taken"},
				{"b", "port 25565 is outside its range 30000-30009"},
				{"c", "draining"},
				{"d", "unreachable"},
				{"e", agent},
				{"f", "not joined yet"},
				{"g", "port 25565 is outside its range 31000-31001"},
				{"z", replica},
			}}},
			{"node asked", Request{MemoryMB: 1024, DiskMB: 1024, Node: "b"}, Placement{Node: "b", Port: 30000}, nil},
			{"node asked though another has more free", Request{MemoryMB: 2048, DiskMB: 1024, Node: "b"}, Placement{Node: "b", Port: 30000}, nil},
			{"node asked too small", Request{MemoryMB: 5000, DiskMB: 30000, Runtime: "process", Node: "b"}, Placement{}, &NoCapacityError{Refusals: []Refusal{
				{"b", "it runs docker servers, process needed and 4096 MiB of memory free, 5000 asked and a disk of 20480 MiB, 30000 asked"},
			}}},
			{"node asked draining", Request{MemoryMB: 1024, DiskMB: 1024, Node: "c"}, Placement{}, &NoCapacityError{Refusals: []Refusal{{"c", "draining"}}}},
			{"node asked unreachable", Request{MemoryMB: 1024, DiskMB: 1024, Node: "d"}, Placement{}, &NoCapacityError{Refusals: []Refusal{{"d", "unreachable"}}}},
			{"node asked an agent", Request{MemoryMB: 1024, DiskMB: 1024, Node: "e"}, Placement{}, &NoCapacityError{Refusals: []Refusal{{"e", agent}}}},
			{"node asked pending", Request{MemoryMB: 1024, DiskMB: 1024, Node: "f"}, Placement{}, &NoCapacityError{Refusals: []Refusal{{"f", "not joined yet"}}}},
			{"node asked another replica's", Request{MemoryMB: 1024, DiskMB: 1024, Node: "z"}, Placement{}, &NoCapacityError{Refusals: []Refusal{{"z", replica}}}},
			{"node asked unknown", Request{MemoryMB: 1024, DiskMB: 1024, Node: "nope"}, Placement{}, &UnknownNodeError{Name: "nope"}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				got, err := p.Place(t.Context(), tc.r)
				if got != tc.want || !reflect.DeepEqual(err, tc.err) {
					t.Errorf("Place(%+v) = %+v, %#v; want %+v, %#v", tc.r, got, err, tc.want, tc.err)
				}
			})
		}
		_, err := p.Place(t.Context(), Request{MemoryMB: 1024, DiskMB: 1024, Node: "c"})
		if want := "no node can take the server: node c: draining"; err == nil || err.Error() != want {
			t.Errorf("the error's sentence = %v, want %q", err, want)
		}
		_, err = NewPlacer(f.svc, nil, 1).Place(t.Context(), Request{MemoryMB: 256, DiskMB: 1024, Node: "a"})
		if want := "no node can take the server: node a: " + replica; err == nil || err.Error() != want {
			t.Errorf("with no candidates = %v, want %q", err, want)
		}
	})
}

// TestPlaceOvercommit: the memory of a node's servers may reach its total
// times the overcommit; below 1, less than its total.
func TestPlaceOvercommit(t *testing.T) {
	f := cluster7(t, storetest.SQLite(t))
	// a: 8192 × 1.5 = 12288, 2048 taken; b: 4096 × 1.5 = 6144.
	over := NewPlacer(f.svc, candidates7, 1.5)
	if got, err := over.Place(t.Context(), Request{MemoryMB: 10240, DiskMB: 1024}); err != nil || got != (Placement{Node: "a", Port: 25566}) {
		t.Errorf("overcommit 1.5: Place(10240 MiB) = %+v, %v; want a:25566", got, err)
	}
	_, err := over.Place(t.Context(), Request{MemoryMB: 10241, DiskMB: 1024, Node: "a"})
	if want := (&NoCapacityError{Refusals: []Refusal{{"a", "10240 MiB of memory free, 10241 asked"}}}); !reflect.DeepEqual(err, want) {
		t.Errorf("overcommit 1.5: Place(10241 MiB on a) = %v, want %v", err, want)
	}
	// 0.5: a 4096 - 2048 = 2048, b 2048: equals, the first by name.
	under := NewPlacer(f.svc, candidates7, 0.5)
	if got, err := under.Place(t.Context(), Request{MemoryMB: 2048, DiskMB: 1024}); err != nil || got != (Placement{Node: "a", Port: 25566}) {
		t.Errorf("overcommit 0.5: Place(2048 MiB) = %+v, %v; want a (as free as b, first by name)", got, err)
	}
	// 0.2: a's servers have more than it may give now: 0 free.
	_, err = NewPlacer(f.svc, candidates7, 0.2).Place(t.Context(), Request{MemoryMB: 256, DiskMB: 1024, Node: "a"})
	if want := (&NoCapacityError{Refusals: []Refusal{{"a", "0 MiB of memory free, 256 asked"}}}); !reflect.DeepEqual(err, want) {
		t.Errorf("overcommit 0.2: Place(256 MiB on a) = %v, want %v", err, want)
	}
}

// TestPlaceTie: of nodes with as much memory free, the first by name.
func TestPlaceTie(t *testing.T) {
	f := newFixture(t, storetest.SQLite(t))
	hb := &cluster.Heartbeat{MemoryTotal: gib(4), DiskTotal: gib(10)}
	for _, n := range []string{"n3", "n1", "n2"} {
		f.local(t, n, "process", 25565, 25664, hb)
	}
	p := NewPlacer(f.svc, []string{"n3", "n2", "n1"}, 1)
	for _, want := range []Placement{{"n1", 25565}, {"n2", 25565}, {"n3", 25565}, {"n1", 25566}} {
		got, err := p.Place(t.Context(), Request{MemoryMB: 1024, DiskMB: 1024})
		if err != nil || got != want {
			t.Fatalf("Place = %+v, %v; want %+v", got, err, want)
		}
		f.server(t, got.Node, got.Port, 1024)
	}
}

// TestReserve: servers placed at once on one node never take together
// more than it has: each insert reserves in its transaction, and the
// ones that no longer fit are told to place again.
func TestReserve(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		f := newFixture(t, db)
		f.local(t, "n", "process", 25565, 25664, &cluster.Heartbeat{MemoryTotal: gib(4), DiskTotal: gib(10)})
		if _, err := db.Write().ExecContext(t.Context(), `INSERT INTO teams (id, name, created_at) VALUES ('team_a', 'a', 1)`); err != nil {
			t.Fatal(err)
		}
		p := NewPlacer(f.svc, []string{"n"}, 1)
		r := Request{MemoryMB: 1024, DiskMB: 1024}
		// Eight placements read before any insert: all choose n.
		var pls []Placement
		for i := range 8 {
			r.Taken = map[string]map[int]bool{"n": {}}
			for j := range i {
				r.Taken["n"][25565+j] = true
			}
			pl, err := p.Place(t.Context(), r)
			if err != nil || pl != (Placement{Node: "n", Port: 25565 + i}) {
				t.Fatalf("Place #%d = %+v, %v", i, pl, err)
			}
			pls = append(pls, pl)
		}
		var wg sync.WaitGroup
		errs := make([]error, len(pls))
		for i, pl := range pls {
			wg.Go(func() {
				errs[i] = db.Tx(t.Context(), func(tx *sql.Tx) error {
					if err := p.Reserve(t.Context(), tx, pl, r); err != nil {
						return err
					}
					_, err := tx.ExecContext(t.Context(), `INSERT INTO servers (id, team_id, name, software, version, status, node, port, memory_mb, disk_mb, cpu_percent, created_at, updated_at)
VALUES ($1, 'team_a', $1, 'paper', '1.21.4', 'offline', $2, $3, $4, 1024, 100, 1, 1)`, fmt.Sprint("s", i), pl.Node, pl.Port, r.MemoryMB)
					return err
				})
			})
		}
		wg.Wait()
		made, lost := 0, 0
		for i, err := range errs {
			switch {
			case err == nil:
				made++
			case errors.Is(err, ErrNoLongerFits):
				lost++
				if want := "the node chosen can no longer take the server: node n: 0 MiB of memory free, 1024 asked"; err.Error() != want {
					t.Errorf("insert #%d: %v, want %q", i, err, want)
				}
			default:
				t.Errorf("insert #%d: %v", i, err)
			}
		}
		if made != 4 || lost != 4 {
			t.Errorf("%d made, %d told to place again; want 4 and 4 (4 GiB of 1 GiB servers)", made, lost)
		}
		var sum int
		if err := db.Read().QueryRowContext(t.Context(), `SELECT coalesce(sum(memory_mb), 0) FROM servers WHERE node = 'n'`).Scan(&sum); err != nil || sum != 4096 {
			t.Errorf("memory on n = %d, %v; want 4096", sum, err)
		}
		if err := db.Tx(t.Context(), func(tx *sql.Tx) error {
			return p.Reserve(t.Context(), tx, Placement{Node: "gone", Port: 25565}, r)
		}); !errors.Is(err, ErrNoLongerFits) || err.Error() != "the node chosen can no longer take the server: node gone was removed" {
			t.Errorf("Reserve on a removed node = %v", err)
		}
		// Drained meanwhile.
		if err := f.svc.SetDraining(t.Context(), "n", true); err != nil {
			t.Fatal(err)
		}
		if err := db.Tx(t.Context(), func(tx *sql.Tx) error {
			return p.Reserve(t.Context(), tx, Placement{Node: "n", Port: 25600}, Request{MemoryMB: 256, DiskMB: 1024})
		}); err == nil || err.Error() != "the node chosen can no longer take the server: node n: draining" {
			t.Errorf("Reserve on a drained node = %v", err)
		}
	})
}

// TestPlaceSpread: the servers of one deployment configuration spread
// over the nodes that can take them — the node holding the fewest of its
// servers first, then the most memory free — while a server made by hand
// still goes where the most memory is free.
func TestPlaceSpread(t *testing.T) {
	f := newFixture(t, storetest.SQLite(t))
	f.local(t, "big", "process", 25565, 25664, &cluster.Heartbeat{MemoryTotal: gib(16), DiskTotal: gib(100)})
	f.local(t, "small", "process", 25565, 25664, &cluster.Heartbeat{MemoryTotal: gib(4), DiskTotal: gib(100)})
	p := NewPlacer(f.svc, []string{"big", "small"}, 1)
	owned := func(node string, port int, cfg string) {
		t.Helper()
		f.server(t, node, port, 1024)
		if _, err := f.db.Write().ExecContext(t.Context(), `UPDATE servers SET configuration_id = $1 WHERE node = $2 AND port = $3`,
			cfg, node, port); err != nil {
			t.Fatal(err)
		}
	}
	for i, want := range []string{"big", "small", "big", "small"} {
		got, err := p.Place(t.Context(), Request{MemoryMB: 1024, DiskMB: 1024, Spread: "cfg_1"})
		if err != nil || got.Node != want {
			t.Fatalf("server %d of the configuration: Place = %+v, %v; want node %s", i+1, got, err, want)
		}
		owned(got.Node, got.Port, "cfg_1")
	}
	// Another configuration's servers and servers made by hand do not
	// count: big has the most memory free.
	for _, r := range []Request{{MemoryMB: 1024, DiskMB: 1024, Spread: "cfg_2"}, {MemoryMB: 1024, DiskMB: 1024}} {
		if got, err := p.Place(t.Context(), r); err != nil || got.Node != "big" {
			t.Errorf("Place(%+v) = %+v, %v; want node big", r, got, err)
		}
	}
	// A node that cannot take the server is never chosen for spreading.
	if got, err := p.Place(t.Context(), Request{MemoryMB: 3072, DiskMB: 1024, Spread: "cfg_1"}); err != nil || got.Node != "big" {
		t.Errorf("a server too big for small: Place = %+v, %v; want node big", got, err)
	}
}
