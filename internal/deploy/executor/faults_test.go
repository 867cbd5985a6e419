package executor_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kilnhq/kiln/internal/deploy/executor"
	"github.com/kilnhq/kiln/internal/deploy/runs"
	"github.com/kilnhq/kiln/internal/servers"
	"github.com/kilnhq/kiln/internal/store/storetest"
)

// faultyQueue is the real queue with faults put in front of Renew: fail
// says what the n-th call (from 1) answers instead of renewing (nil: the
// queue's own answer). Everything else is the queue's.
type faultyQueue struct {
	*runs.Queue
	mu     sync.Mutex
	renews int
	fail   func(n int) error
}

func (f *faultyQueue) Renew(ctx context.Context, runID, owner string, lease time.Duration) (bool, error) {
	f.mu.Lock()
	f.renews++
	n := f.renews
	f.mu.Unlock()
	if err := f.fail(n); err != nil {
		return false, err
	}
	return f.Queue.Renew(ctx, runID, owner, lease)
}

var errTransient = errors.New("database connection reset (injected)")

// syncBuffer is a log the executor writes while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// resourceCounts counts a run's resources by status.
func (e *env) resourceCounts(runID string) map[runs.ResourceStatus]int {
	e.t.Helper()
	rs, err := e.q.Resources(e.t.Context(), e.teamID, runID)
	if err != nil {
		e.t.Fatal(err)
	}
	out := map[runs.ResourceStatus]int{}
	for _, r := range rs {
		out[r.Status]++
	}
	return out
}

// TestTransientRenewBetweenSteps: a renewal that fails once between two
// steps (not a lost lease) does not end the tier: every step runs. Before,
// the tier stopped there and the run ended succeeded with its servers
// pending, never made.
func TestTransientRenewBetweenSteps(t *testing.T) {
	e := newEnv(t, storetest.SQLite(t))
	// Call 1 is the tier's, call 2 the look before its first step.
	e.qx = &faultyQueue{Queue: e.q, fail: func(n int) error {
		if n == 2 {
			return errTransient
		}
		return nil
	}}
	cfgID, r := e.apply("", network)
	e.startWith("inst_one", 1)
	got := e.wait(r.ID)
	counts := e.resourceCounts(r.ID)
	if got.Status != runs.Succeeded || got.Summary == nil || got.Summary.Succeeded != 3 || counts[runs.ResourcePending] != 0 {
		t.Fatalf("run = %s %q, summary %+v, resources %v; want succeeded with its 3 steps done", got.Status, got.Error, got.Summary, counts)
	}
	if owned, _ := e.srv.OwnedBy(t.Context(), e.teamID, cfgID); len(owned) != 3 {
		t.Errorf("%d servers made, want 3", len(owned))
	}
}

// TestLeaseFence: while the lease cannot be renewed (the database away),
// the run stops acting two thirds into its lease, before it can expire
// and another process claim it; claimed again (a claim is a lease of its
// own), it resumes, and it ends succeeded with every step done and each
// server made once. Before, failed renewals were ignored (the run went
// on past its lease) and the one between two steps ended the tier: the
// run succeeded with steps never run.
func TestLeaseFence(t *testing.T) {
	e := newEnv(t, storetest.SQLite(t))
	var faultsUntil time.Time
	var mu sync.Mutex
	e.qx = &faultyQueue{Queue: e.q, fail: func(n int) error {
		mu.Lock()
		defer mu.Unlock()
		if n == 3 { // from here on, renewals fail for 3 s
			faultsUntil = time.Now().Add(3 * time.Second)
		}
		if time.Now().Before(faultsUntil) {
			return errTransient
		}
		return nil
	}}
	logs := &syncBuffer{}
	cfgID, r := e.apply("", network)
	// A short lease: the fence falls within the second step.
	e.startOpts(executor.Options{Owner: "inst_one", Parallel: 1, Lease: 600 * time.Millisecond, Log: slog.New(slog.NewTextHandler(logs, nil))})
	got := e.wait(r.ID)
	if got.Status != runs.Succeeded || e.resourceCounts(r.ID)[runs.ResourcePending] != 0 {
		t.Fatalf("run after the faults = %s %q; want succeeded, nothing pending", got.Status, got.Error)
	}
	if !strings.Contains(logs.String(), "stopping the run before it expires") {
		t.Errorf("no fence in the log:\n%s", logs)
	}
	if ev := e.events(r.ID); !strings.Contains(ev, "run.resumed") {
		t.Errorf("events = %s, want run.resumed", ev)
	}
	if owned, _ := e.srv.OwnedBy(t.Context(), e.teamID, cfgID); len(owned) != 3 {
		t.Errorf("%d servers, want 3 (each made once)", len(owned))
	}
}

// TestParallelTier: a tier of more steps than may run at once; under
// -race this fails if the executor reads which steps are done while the
// steps running record theirs (a map read and written concurrently is a
// fatal error no recover contains).
func TestParallelTier(t *testing.T) {
	e := newEnv(t, storetest.SQLite(t))
	specOf := func(memoryMB int) string {
		var b strings.Builder
		b.WriteString("version: 1\nservers:\n")
		for i := range 6 {
			fmt.Fprintf(&b, "  s%d:\n    software: kiln-test\n    memory: %dM\n    disk: 1G\n    state: stopped\n", i, memoryMB)
		}
		return b.String()
	}
	cfgID, r := e.apply("", specOf(256))
	e.startWith("inst_one", 3)
	got := e.wait(r.ID)
	if got.Status != runs.Succeeded || got.Summary == nil || got.Summary.Succeeded != 6 {
		t.Fatalf("run = %s %q, summary %+v; want 6 steps succeeded", got.Status, got.Error, got.Summary)
	}
	// Updates of stopped servers: their steps end in milliseconds, so
	// the steps record theirs while the executor looks at the next ones.
	for i := range 10 {
		_, r := e.apply(cfgID, specOf(300+i))
		if got := e.wait(r.ID); got.Status != runs.Succeeded || got.Summary.Update != 6 {
			t.Fatalf("update run = %s %q %+v", got.Status, got.Error, got.Summary)
		}
	}
}

// TestResumedPlanDrift: a run that lost its lease after planning is
// resumed after the applied state changed meanwhile (lobby made and
// recorded with other settings, by hand or another process): the resumed
// run records the new plan (a second plan.computed saying why, lobby's
// step now an update) and applies it. Before, it compared nothing and
// ran the steps of its first plan as recorded.
func TestResumedPlanDrift(t *testing.T) {
	e := newEnv(t, storetest.SQLite(t))
	ctx := t.Context()
	// The lease is lost at the look before the first step: planned,
	// nothing done.
	e.qx = &faultyQueue{Queue: e.q, fail: func(n int) error {
		if n == 2 {
			return runs.ErrLeaseLost
		}
		return nil
	}}
	cfgID, r := e.apply("", network)
	e.startOpts(executor.Options{Owner: "inst_one", Parallel: 1})
	deadline := time.Now().Add(30 * time.Second)
	for e.resourceCounts(r.ID)[runs.ResourcePending] != 3 {
		if time.Now().After(deadline) {
			t.Fatal("the run never planned")
		}
		time.Sleep(10 * time.Millisecond)
	}
	lobby, _, err := e.srv.CreateOwned(ctx, e.teamID, servers.Owner{ConfigurationID: cfgID, ResourceKey: "server/lobby"},
		servers.NewServer{Name: "lobby", Software: "kiln-test", MemoryMB: 1024, DiskMB: 1024})
	if err != nil {
		t.Fatal(err)
	}
	rs, _ := e.q.Resources(ctx, e.teamID, r.ID)
	var applied []byte
	for _, res := range rs {
		if res.Key == "server/lobby" {
			applied = []byte(strings.Replace(string(res.Desired), `"memory":536870912`, `"memory":1073741824`, 1))
		}
	}
	if !strings.Contains(string(applied), `"memory":1073741824`) {
		t.Fatalf("lobby's desired state %s has no memory of 512 MiB to change", applied)
	}
	if err := e.dep.RecordApplied(ctx, e.teamID, cfgID, "server/lobby", lobby.ID, applied, "run_by_hand"); err != nil {
		t.Fatal(err)
	}
	got := e.wait(r.ID)
	if got.Status != runs.Succeeded {
		t.Fatalf("resumed run = %s %q", got.Status, got.Error)
	}
	evs, _ := e.q.Events(ctx, e.teamID, r.ID)
	planned := 0
	for _, ev := range evs {
		if ev.Type == runs.EventPlanComputed {
			planned++
			if planned == 2 && !strings.Contains(ev.Message, "plan changed while the run was paused") {
				t.Errorf("second plan event: %q", ev.Message)
			}
		}
	}
	if planned != 2 {
		t.Errorf("%d plan.computed events, want 2 (the plan, then the changed one): %s", planned, e.events(r.ID))
	}
	rs, _ = e.q.Resources(ctx, e.teamID, r.ID)
	for _, res := range rs {
		if res.Key == "server/lobby" && (res.Action != "update" || res.Status != runs.ResourceSucceeded) {
			t.Errorf("lobby's resource = %s %s, want an update that succeeded", res.Action, res.Status)
		}
	}
	after, err := e.srv.FindOwned(ctx, e.teamID, servers.Owner{ConfigurationID: cfgID, ResourceKey: "server/lobby"})
	if err != nil || after.ID != lobby.ID || after.MemoryMB != 512 {
		t.Errorf("lobby after the run = %+v, %v; want the server made meanwhile, back to 512 MB", after, err)
	}
}

// TestCancelDuringLastTier: a cancel asked while every step of the last
// tier already runs (nothing left to stop between steps) ends the run
// canceled, its steps' outcomes listed. Before, it ended succeeded.
func TestCancelDuringLastTier(t *testing.T) {
	e := newEnv(t, storetest.SQLite(t))
	ctx := t.Context()
	_, r := e.apply("", network)
	e.startWith("inst_one", 4) // the three steps at once
	deadline := time.Now().Add(60 * time.Second)
	for e.resourceCounts(r.ID)[runs.ResourceRunning] != 3 {
		if time.Now().After(deadline) {
			t.Fatal("the three steps never ran at once")
		}
		time.Sleep(2 * time.Millisecond)
	}
	if _, err := e.q.RequestCancel(ctx, e.teamID, r.ID); err != nil {
		t.Fatal(err)
	}
	got := e.wait(r.ID)
	if got.Status != runs.Canceled || got.FailureClass != runs.FailCanceled {
		t.Fatalf("run = %s %s %q, want canceled", got.Status, got.FailureClass, got.Error)
	}
	if c := e.resourceCounts(r.ID); c[runs.ResourceSucceeded] != 3 {
		t.Errorf("resources = %v, want the three steps that ran listed as succeeded", c)
	}
}
