package servers_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/kilnhq/kiln/internal/files"
	"github.com/kilnhq/kiln/internal/quota"
	"github.com/kilnhq/kiln/internal/runtime"
	"github.com/kilnhq/kiln/internal/servers"
	"github.com/kilnhq/kiln/internal/servers/serverstest"
	"github.com/kilnhq/kiln/internal/store/storetest"
)

// TestHold: while a restore holds a server, every writer but the holder
// is refused (ErrRestoring), and so are start, restart, reinstall and a
// second hold; reads, stop and kill go on. Release lets them all through
// again, once, and another team's server cannot be held (ErrNotFound).
func TestHold(t *testing.T) {
	db := storetest.SQLite(t)
	teamID := team(t, db)
	otherTeam := "team_0000000000000000" // no such team: another team's view
	env := serverstest.New(t, db, serverstest.Options{})
	svc := env.Service
	ctx := t.Context()
	var hooked []string // OnHold's calls
	svc.OnHold(func(id string) { hooked = append(hooked, id) })
	sv := newTestServer(t, svc, teamID)
	if _, err := svc.Hold(ctx, otherTeam, sv.ID); !errors.Is(err, servers.ErrNotFound) {
		t.Fatalf("Hold of another team's server = %v, want ErrNotFound", err)
	}
	early, err := svc.Access(ctx, teamID, sv.ID, true) // a writer's access before the hold
	if err != nil {
		t.Fatal(err)
	}
	held, err := svc.Hold(ctx, teamID, sv.ID)
	if err != nil {
		t.Fatal(err)
	}
	// That writer reserves no more (its later writes are refused as new
	// ones are); the holder does, through its hold.
	if _, err := early.Disk.Reserve(0); !errors.Is(err, quota.ErrHeld) {
		t.Errorf("Reserve with an access from before the hold = %v, want quota.ErrHeld", err)
	}
	if err := files.Writing(early, func(*files.Root, *quota.Reservation) error { return nil }); !errors.Is(err, servers.ErrRestoring) {
		t.Errorf("files.Writing with an access from before the hold = %v, want ErrRestoring", err)
	}
	ha, err := held.Access(ctx)
	if err != nil || ha.Hold == nil {
		t.Fatalf("the holder's Access = %+v, %v, want its hold", ha, err)
	}
	if err := files.Writing(ha, func(*files.Root, *quota.Reservation) error { return nil }); err != nil {
		t.Errorf("files.Writing as the holder = %v", err)
	}
	refused := map[string]error{}
	_, refused["Access for writing"] = svc.Access(ctx, teamID, sv.ID, true)
	refused["start"] = svc.Power(ctx, teamID, sv.ID, "start")
	refused["restart"] = svc.Power(ctx, teamID, sv.ID, "restart")
	refused["Reinstall"] = svc.Reinstall(ctx, teamID, sv.ID, "", "")
	_, refused["a second Hold"] = svc.Hold(ctx, teamID, sv.ID)
	for what, err := range refused {
		if !errors.Is(err, servers.ErrRestoring) {
			t.Errorf("%s while held = %v, want ErrRestoring", what, err)
		}
	}
	if a, err := svc.Access(ctx, teamID, sv.ID, false); err != nil || a.Root == "" {
		t.Errorf("Access for reading while held = %+v, %v, want the root", a, err)
	}
	if a, err := held.Access(ctx); err != nil || a.Root == "" || a.Disk == nil {
		t.Errorf("the holder's Access = %+v, %v, want the root and its ledger", a, err)
	}
	for _, action := range []string{"stop", "kill"} {
		if err := svc.Power(ctx, teamID, sv.ID, action); err != nil {
			t.Errorf("%s while held = %v, want nil", action, err)
		}
	}
	if len(hooked) != 1 || hooked[0] != sv.ID {
		t.Errorf("OnHold ran for %q, want once for the held server (not for the refused holds)", hooked)
	}
	held.Release()
	held.Release() // once is enough; twice changes nothing
	if _, err := svc.Access(ctx, teamID, sv.ID, true); err != nil {
		t.Errorf("Access for writing after Release = %v", err)
	}
	if err := files.Writing(early, func(*files.Root, *quota.Reservation) error { return nil }); err != nil {
		t.Errorf("files.Writing with the early access after Release = %v", err)
	}
	again, err := svc.Hold(ctx, teamID, sv.ID)
	if err != nil {
		t.Fatalf("Hold after Release = %v", err)
	}
	again.Release()
	// Accepted (the stop and kill sent above run in the background too,
	// in any order with it: what the server ends up doing is not this
	// test's business).
	if err := svc.Power(ctx, teamID, sv.ID, "start"); err != nil {
		t.Errorf("start after Release = %v", err)
	}
}

// TestReadingRefusesReinstall: while a snapshot reads a server's root
// whole (Reading), a reinstall is refused (ErrSnapshotting), with one
// reader or two; once every reader released, it goes ahead, and a reading
// asked for while it runs is refused (ErrInstalling) — or, when the
// reinstall already ended, allowed. Another team's server is not found.
func TestReadingRefusesReinstall(t *testing.T) {
	db := storetest.SQLite(t)
	teamID := team(t, db)
	env := serverstest.New(t, db, serverstest.Options{})
	svc := env.Service
	ctx := t.Context()
	sv := newTestServer(t, svc, teamID)
	if _, err := svc.Reading(ctx, "team_0000000000000000", sv.ID); !errors.Is(err, servers.ErrNotFound) {
		t.Fatalf("Reading of another team's server = %v, want ErrNotFound", err)
	}
	one, err := svc.Reading(ctx, teamID, sv.ID)
	if err != nil {
		t.Fatal(err)
	}
	two, err := svc.Reading(ctx, teamID, sv.ID)
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Reinstall(ctx, teamID, sv.ID, "", ""); !errors.Is(err, servers.ErrSnapshotting) {
		t.Fatalf("Reinstall while two read = %v, want ErrSnapshotting", err)
	}
	one.Release()
	one.Release() // a second release gives back nothing more
	if err := svc.Reinstall(ctx, teamID, sv.ID, "", ""); !errors.Is(err, servers.ErrSnapshotting) {
		t.Fatalf("Reinstall while one reads = %v, want ErrSnapshotting", err)
	}
	two.Release()
	if err := svc.Reinstall(ctx, teamID, sv.ID, "", ""); err != nil {
		t.Fatalf("Reinstall once no one reads: %v", err)
	}
	if r, err := svc.Reading(ctx, teamID, sv.ID); err == nil {
		r.Release()
		if got, _ := svc.Get(ctx, teamID, sv.ID); got.Status == servers.StatusInstalling {
			t.Errorf("Reading during a reinstall (status %s) was allowed", got.Status)
		}
	} else if !errors.Is(err, servers.ErrInstalling) {
		t.Errorf("Reading during a reinstall = %v, want ErrInstalling", err)
	}
	waitStatus(t, svc, teamID, sv.ID, servers.StatusOffline)
	deadline := time.Now().Add(30 * time.Second)
	for {
		r, err := svc.Reading(ctx, teamID, sv.ID)
		if err == nil {
			r.Release()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Reading after the reinstall ended = %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestHeldServerStopsAndStaysDown: Held.Stop stops a running server and
// says it ran; while held, no process of the server starts — neither an
// automatic restart after a crash (refused by the start, said in the
// console) nor a start asked for just before the hold, whichever way it
// interleaves with the hold (its process is stopped, or it never
// begins): Stop reports it as asked to run, so the holder starts it
// again. A crashed server is not reported as running.
func TestHeldServerStopsAndStaysDown(t *testing.T) {
	db := storetest.SQLite(t)
	teamID := team(t, db)
	// Every process start goes through the runtime: one begun while the
	// test says the server must stay down (from the point the hold is
	// sure to refuse starts until its release) is recorded, whenever it
	// happens; the service's stop at the end waits for every start still
	// pending, so the record is whole when it is read.
	rt := &startWatch{Runtime: runtime.NewProcess(slog.New(slog.NewTextHandler(t.Output(), nil)))}
	env := serverstest.New(t, db, serverstest.Options{Runtime: rt, Servers: servers.Options{RestartBackoff: 50 * time.Millisecond}})
	svc := env.Service
	ctx := t.Context()
	sv := newTestServer(t, svc, teamID)
	defer func() {
		env.Stop()
		if got := rt.during.Load(); got != 0 {
			t.Errorf("%d process(es) started while the server was held and stopped (last: %s)", got, rt.last.Load())
		}
	}()
	stillDown := func(what string) {
		t.Helper()
		rt.down.Store(&what)
		got, err := svc.Get(ctx, teamID, sv.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.Status == servers.StatusStarting || got.Status == servers.StatusRunning || runtimeRef(t, db, sv.ID) != "" {
			t.Fatalf("%s: the held server is %s (runtime_ref %q), want no process", what, got.Status, runtimeRef(t, db, sv.ID))
		}
	}
	release := func(h *servers.Held) {
		rt.down.Store(nil)
		h.Release()
	}

	// A crash while held: the automatic restart does not start it.
	if err := svc.Power(ctx, teamID, sv.ID, "start"); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, svc, teamID, sv.ID, servers.StatusRunning)
	held, err := svc.Hold(ctx, teamID, sv.ID)
	if err != nil {
		t.Fatal(err)
	}
	ref := runtimeRef(t, db, sv.ID)
	pid, err := strconv.Atoi(strings.Split(ref, ":")[0])
	if err != nil {
		t.Fatalf("runtime_ref %q of a running server", ref)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitConsole(t, svc, teamID, sv.ID, "[kiln] not started: the server is being restored", 1)
	stillDown("after a crash")
	if was, err := held.Stop(ctx); err != nil || was {
		t.Errorf("Stop of a crashed server = %v, %v; want false (it is not started again)", was, err)
	}
	release(held)

	// A running server: stopped, reported running.
	if err := svc.Power(ctx, teamID, sv.ID, "start"); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, svc, teamID, sv.ID, servers.StatusRunning)
	held, err = svc.Hold(ctx, teamID, sv.ID)
	if err != nil {
		t.Fatal(err)
	}
	if was, err := held.Stop(ctx); err != nil || !was {
		t.Fatalf("Stop of a running server = %v, %v; want true", was, err)
	}
	stillDown("after Stop")
	release(held)
	waitStatus(t, svc, teamID, sv.ID, servers.StatusOffline)

	// A start asked for just before the hold, in rounds (its process may
	// begin before the hold or be refused by it).
	for round := range 5 {
		if err := svc.Power(ctx, teamID, sv.ID, "start"); err != nil {
			t.Fatal(err)
		}
		held, err := svc.Hold(ctx, teamID, sv.ID)
		if err != nil {
			t.Fatal(err)
		}
		if was, err := held.Stop(ctx); err != nil || !was {
			t.Fatalf("round %d: Stop after a start = %v, %v; want true (it was asked to run)", round, was, err)
		}
		stillDown(fmt.Sprintf("round %d", round))
		release(held)
		waitFor(t, svc, teamID, sv.ID, "offline or crashed", func(s servers.Server) bool {
			return s.Status == servers.StatusOffline || s.Status == servers.StatusCrashed
		})
	}

	// A restart asked for just before the hold: reported running too,
	// wherever the hold caught it (before its stop, between its stop and
	// its start, after).
	for round := range 3 {
		if err := svc.Power(ctx, teamID, sv.ID, "start"); err != nil {
			t.Fatal(err)
		}
		waitStatus(t, svc, teamID, sv.ID, servers.StatusRunning)
		if err := svc.Power(ctx, teamID, sv.ID, "restart"); err != nil {
			t.Fatal(err)
		}
		held, err := svc.Hold(ctx, teamID, sv.ID)
		if err != nil {
			t.Fatal(err)
		}
		if was, err := held.Stop(ctx); err != nil || !was {
			t.Fatalf("restart round %d: Stop after a restart = %v, %v; want true", round, was, err)
		}
		stillDown(fmt.Sprintf("restart round %d", round))
		release(held)
		waitFor(t, svc, teamID, sv.ID, "offline", func(s servers.Server) bool { return s.Status == servers.StatusOffline })
	}
}

// newReading returns a service (SQLite) with one kiln-test server of a
// team, and a Reader of its root, released at the test's end.
func newReading(t *testing.T) (*servers.Service, string, servers.Server, *servers.Reader) {
	t.Helper()
	db := storetest.SQLite(t)
	teamID := team(t, db)
	svc := serverstest.New(t, db, serverstest.Options{}).Service
	sv := newTestServer(t, svc, teamID)
	// The install's status change is recorded, then announced: its
	// console line comes after both, so the reading begins after it.
	waitConsole(t, svc, teamID, sv.ID, "[kiln] installed", 1)
	r, err := svc.Reading(t.Context(), teamID, sv.ID)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Release)
	return svc, teamID, sv, r
}

// TestReaderChanged: a Reader tells whether the server's status changed
// since the reading began or since Again — a start (starting, then
// running) and a stop each do.
func TestReaderChanged(t *testing.T) {
	svc, teamID, sv, r := newReading(t)
	ctx := t.Context()
	if c := r.Changed(); c != servers.Unchanged {
		t.Fatalf("Changed at once = %v", c)
	}
	if err := svc.Power(ctx, teamID, sv.ID, "start"); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, svc, teamID, sv.ID, servers.StatusRunning)
	if c := r.Changed(); c != servers.StatusChanged {
		t.Fatalf("Changed after a start = %v", c)
	}
	r.Again()
	if c := r.Changed(); c != servers.Unchanged {
		t.Fatalf("Changed after Again = %v", c)
	}
	if err := svc.Command(ctx, teamID, sv.ID, "list"); err != nil {
		t.Fatal(err)
	}
	if c := r.Changed(); c != servers.Unchanged {
		t.Errorf("Changed after a console command = %v", c)
	}
	if err := svc.Power(ctx, teamID, sv.ID, "stop"); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, svc, teamID, sv.ID, servers.StatusOffline)
	if c := r.Changed(); c != servers.StatusChanged {
		t.Errorf("Changed after a stop = %v", c)
	}
}

// TestReaderSeesBatches: a staged tree committed into the root (more
// than one move: a modpack, an extracted archive) is a change to a
// Reader, seen while it is moved (Batching) and after; one file staged
// and moved (one rename) is not.
func TestReaderSeesBatches(t *testing.T) {
	svc, teamID, sv, r := newReading(t)
	ctx := t.Context()
	commit := func(names ...string) {
		t.Helper()
		a, err := svc.Access(ctx, teamID, sv.ID, true)
		if err != nil {
			t.Fatal(err)
		}
		root, err := files.Open(a.Root)
		if err != nil {
			t.Fatal(err)
		}
		defer root.Close()
		res, err := a.Disk.Reserve(0)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Commit()
		st, err := root.Stage(".", res)
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		for _, n := range names {
			if _, err := st.Create(n, strings.NewReader(n), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if err := st.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	commit("one.txt")
	if c := r.Changed(); c != servers.Unchanged {
		t.Fatalf("Changed after one file = %v", c)
	}
	commit("mods/a.jar", "mods/b.jar", "config/c.toml")
	if c := r.Changed(); c != servers.FilesMoved {
		t.Fatalf("Changed after a staged tree = %v", c)
	}
	if r.Batching() {
		t.Fatal("Batching after the commit = true")
	}
	r.Again()
	if c := r.Changed(); c != servers.Unchanged {
		t.Fatalf("Changed after Again = %v", c)
	}
	// While a batch is under way.
	a, err := svc.Access(ctx, teamID, sv.ID, true)
	if err != nil {
		t.Fatal(err)
	}
	res, err := a.Disk.Reserve(0)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Release()
	end := res.Batch()
	if c := r.Changed(); c != servers.FilesMoved || !r.Batching() {
		t.Fatalf("during a batch: Changed = %v, Batching = %v", c, r.Batching())
	}
	r.Again()
	if c := r.Changed(); c != servers.FilesMoved {
		t.Fatalf("Again during a batch: Changed = %v (a reading begun during a batch may hold part of it)", c)
	}
	end()
	end()
	if r.Batching() {
		t.Fatal("Batching after its end = true")
	}
	r.Again()
	if c := r.Changed(); c != servers.Unchanged {
		t.Fatalf("Changed after the batch and Again = %v", c)
	}
}

// startWatch is a runtime that counts the starts begun while down names
// a phase in which the server must stay down.
type startWatch struct {
	runtime.Runtime
	down   atomic.Pointer[string]
	during atomic.Int32
	last   atomic.Value // string
}

func (w *startWatch) Start(ctx context.Context, spec runtime.Spec, console func(string)) (runtime.Instance, error) {
	if phase := w.down.Load(); phase != nil {
		w.during.Add(1)
		w.last.Store(*phase)
	}
	return w.Runtime.Start(ctx, spec, console)
}
