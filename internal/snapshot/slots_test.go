package snapshot

import (
	"context"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// TestSlotsInTurn: with 2 slots, a team alone takes both; while other
// teams wait, a team holding one gets no second, and the teams waiting
// are served in turn, each team's own in the order asked.
func TestSlotsInTurn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSlots(2)
		var mu sync.Mutex
		var got []string
		ask := func(name, team string) {
			go func() {
				if err := s.acquire(t.Context(), team); err == nil {
					mu.Lock()
					got = append(got, name)
					mu.Unlock()
				}
			}()
			synctest.Wait() // granted or waiting
		}
		for _, a := range [][2]string{{"a1", "A"}, {"a2", "A"}, {"a3", "A"}, {"a4", "A"}, {"b1", "B"}, {"b2", "B"}, {"c1", "C"}} {
			ask(a[0], a[1])
		}
		for _, team := range []string{"A", "A", "B", "C", "A"} {
			s.release(team)
			synctest.Wait()
		}
		want := []string{"a1", "a2", "b1", "a3", "c1", "b2", "a4"}
		if !slices.Equal(got, want) {
			t.Errorf("slots given in the order %v, want %v", got, want)
		}
	})
}

// TestSlotsWaiterLeaves: a waiter whose context ends holds no slot and
// is out of the line: the slot goes to the next one.
func TestSlotsWaiterLeaves(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSlots(1)
		if err := s.acquire(t.Context(), "A"); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		left := make(chan error, 1)
		go func() { left <- s.acquire(ctx, "B") }()
		synctest.Wait()
		cancel()
		if err := <-left; err != context.Canceled {
			t.Fatalf("acquire with its context canceled = %v, want context.Canceled", err)
		}
		got := make(chan error, 1)
		go func() { got <- s.acquire(t.Context(), "C") }()
		synctest.Wait()
		s.release("A")
		if err := <-got; err != nil {
			t.Fatalf("acquire after the release = %v", err)
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.free != 0 || len(s.queues) != 0 || len(s.order) != 0 || s.held["C"] != 1 || len(s.held) != 1 {
			t.Errorf("slots after: free %d, queues %v, order %v, held %v; want C holding the one slot, no one waiting",
				s.free, s.queues, s.order, s.held)
		}
	})
}

// TestSnapshotSlotsShared takes real snapshots with the service's 2
// slots: team A holds both (its snapshots held in their walk) and queues
// four more, then team B asks for one. When one of A's ends, the slot
// goes to B's snapshot, not to the next of A's queue. Before, the slots
// were one line for every team: B's snapshot waited for A's whole queue
// (a deployment's snapshot before a replace waited 24–70 s instead of
// 0.13 s).
func TestSnapshotSlotsShared(t *testing.T) {
	e, gate := newPutGateEnv(t)
	ctx := t.Context()
	sa := e.server("a", map[string]string{"world/level.dat": randomText(64 << 10)})
	e.team = "team_b"
	sb := e.server("b", map[string]string{"world/level.dat": randomText(64 << 10)})
	e.team = "team_a"
	status := func(id string) string {
		var st string
		if err := e.db.Read().QueryRowContext(ctx, `SELECT status FROM snapshots WHERE id = $1`, id).Scan(&st); err != nil {
			t.Fatal(err)
		}
		return st
	}
	until := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(60 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("60 s and still not: %s", what)
			}
		}
	}
	create := func(team, server, name string) string {
		t.Helper()
		snap, err := e.svc.Create(ctx, team, server, name, "")
		if err != nil {
			t.Fatal(err)
		}
		return snap.ID
	}

	close(gate.armed) // every chunk upload waits: a snapshot holds its slot
	a1, a2 := create("team_a", sa.ID, "a1"), create("team_a", sa.ID, "a2")
	until("a1 and a2 creating", func() bool { return status(a1) == StatusCreating && status(a2) == StatusCreating })
	var queued []string
	for _, name := range []string{"a3", "a4", "a5", "a6"} {
		queued = append(queued, create("team_a", sa.ID, name))
	}
	b1 := create("team_b", sb.ID, "b1")
	until("5 snapshots waiting for a slot", func() bool {
		e.svc.slots.mu.Lock()
		defer e.svc.slots.mu.Unlock()
		return len(e.svc.slots.queues["team_a"]) == 4 && len(e.svc.slots.queues["team_b"]) == 1
	})

	if _, err := e.svc.Delete(ctx, "team_a", a1); err != nil { // a1 ends: its slot is free
		t.Fatal(err)
	}
	waiting := append([]string{b1}, queued...)
	until("a waiting snapshot started", func() bool {
		return slices.ContainsFunc(waiting, func(id string) bool { return status(id) != StatusPending })
	})
	if st := status(b1); st != StatusCreating {
		t.Errorf("team B's snapshot is %s once a slot was free, want creating", st)
	}
	for i, id := range queued {
		if st := status(id); st != StatusPending {
			t.Errorf("team A's snapshot a%d is %s, want pending: team B's is served first", i+3, st)
		}
	}

	close(gate.release)
	for _, id := range append([]string{a2}, waiting...) {
		until("every snapshot ended", func() bool { st := status(id); return st == StatusReady || st == StatusFailed })
		if st := status(id); st != StatusReady {
			t.Errorf("snapshot %s: %s, want ready", id, st)
		}
	}
}
