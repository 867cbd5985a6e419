package executor_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/kilnhq/kiln/internal/auth"
	"github.com/kilnhq/kiln/internal/deploy/executor"
	"github.com/kilnhq/kiln/internal/deploy/runs"
	"github.com/kilnhq/kiln/internal/store"
	"github.com/kilnhq/kiln/internal/store/storetest"
)

// gateQueue is the real queue with gates in front of SetStatus: a run
// whose id has a gate waits there, planned, before it executes, until the
// gate is opened (or the run's context ends). It records what the
// executor claimed, in order, and how many runs it held at once, in all
// and per configuration (from Claim to Finish).
type gateQueue struct {
	*runs.Queue
	gates map[string]chan struct{} // written before the executor starts

	mu           sync.Mutex
	claimed      []string
	log          []string // "claim <run id>" and "finish <run id>", in order
	holding      int
	maxHolding   int
	perConfig    map[string]int
	maxPerConfig int
	configOf     map[string]string
}

func newGateQueue(q *runs.Queue) *gateQueue {
	return &gateQueue{Queue: q, gates: map[string]chan struct{}{}, perConfig: map[string]int{}, configOf: map[string]string{}}
}

func (g *gateQueue) Claim(ctx context.Context, owner string, lease time.Duration) (runs.Run, bool, error) {
	r, ok, err := g.Queue.Claim(ctx, owner, lease)
	if ok && err == nil {
		g.mu.Lock()
		g.claimed = append(g.claimed, r.ID)
		g.log = append(g.log, "claim "+r.ID)
		g.configOf[r.ID] = r.ConfigurationID
		g.holding++
		g.maxHolding = max(g.maxHolding, g.holding)
		g.perConfig[r.ConfigurationID]++
		g.maxPerConfig = max(g.maxPerConfig, g.perConfig[r.ConfigurationID])
		g.mu.Unlock()
	}
	return r, ok, err
}

func (g *gateQueue) SetStatus(ctx context.Context, runID, owner string, st runs.Status) error {
	if gate := g.gates[runID]; gate != nil && st == runs.Executing {
		select {
		case <-gate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return g.Queue.SetStatus(ctx, runID, owner, st)
}

func (g *gateQueue) Finish(ctx context.Context, runID, owner string, st runs.Status, sum runs.Summary, msg string, class runs.FailureClass) error {
	err := g.Queue.Finish(ctx, runID, owner, st, sum, msg, class)
	if err == nil {
		g.mu.Lock()
		g.holding--
		g.perConfig[g.configOf[runID]]--
		g.log = append(g.log, "finish "+runID)
		g.mu.Unlock()
	}
	return err
}

func (g *gateQueue) snapshot() (claimed, log []string, maxHolding, maxPerConfig int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.claimed), slices.Clone(g.log), g.maxHolding, g.maxPerConfig
}

// TestRunsConcurrentFairAcrossTeams: team A queues runs of three
// configurations (two runs of the first) that cannot finish until the
// test lets them, then team B queues one. With two slots, the executor
// claims A's oldest run, then B's (the team with no run executing here),
// and B's run succeeds while A's first run is still held, planned and
// waiting; then A's backlog runs, at most two runs at once and one per
// configuration. Before, one run executed at a time per process: B's run
// waited behind all of A's and never finished while A's first was held.
func TestRunsConcurrentFairAcrossTeams(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		e := newEnv(t, db)
		ctx := t.Context()
		a, err := auth.NewService(ctx, db)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { a.Close() })
		teamB, err := a.CreateTeam(ctx, "team-b")
		if err != nil {
			t.Fatal(err)
		}
		teamA := e.teamID

		const one = "version: 1\nservers:\n  s:\n    software: kiln-test\n    memory: 256M\n    disk: 1G\n    state: stopped\n"
		queue := func(team, cfgID, name string) (string, runs.Run) {
			t.Helper()
			if cfgID == "" {
				cfg, err := e.dep.Create(ctx, team, name, "", one)
				if err != nil {
					t.Fatal(err)
				}
				cfgID = cfg.ID
			}
			v, _, err := e.dep.Push(ctx, team, cfgID, "user:test", "")
			if err != nil {
				t.Fatal(err)
			}
			r, _, err := e.q.Enqueue(ctx, team, cfgID, v.ID, "user:test", "")
			if err != nil {
				t.Fatal(err)
			}
			return cfgID, r
		}
		cfgA1, a1 := queue(teamA, "", "a1")
		_, a1again := queue(teamA, cfgA1, "")
		_, a2 := queue(teamA, "", "a2")
		_, a3 := queue(teamA, "", "a3")
		_, b1 := queue(teamB.ID, "", "b1")

		g := newGateQueue(e.q)
		open := make(chan struct{})
		for _, r := range []runs.Run{a1, a1again, a2, a3} {
			g.gates[r.ID] = open
		}
		e.qx = g
		e.startOpts(executor.Options{Owner: "inst_one", Runs: 2})

		// B's run ends while A's first run is held before executing.
		if got := waitTeam(t, e.q, teamB.ID, b1.ID); got.Status != runs.Succeeded {
			t.Fatalf("team B's run = %s %q, want succeeded", got.Status, got.Error)
		}
		if got, _ := e.q.Get(ctx, teamA, a1.ID); got.Status != runs.Planning {
			t.Errorf("team A's first run when B's ended = %s, want planning (held at its gate)", got.Status)
		}
		claimed, _, _, _ := g.snapshot()
		if len(claimed) < 2 || claimed[0] != a1.ID || claimed[1] != b1.ID {
			t.Errorf("claim order = %v, want A's first run (%s) then B's (%s)", claimed, a1.ID, b1.ID)
		}

		close(open)
		for _, r := range []runs.Run{a1, a1again, a2, a3} {
			if got := e.wait(r.ID); got.Status != runs.Succeeded {
				t.Errorf("team A's run %s = %s %q, want succeeded", r.ID, got.Status, got.Error)
			}
		}
		claimed, log, maxHolding, maxPerConfig := g.snapshot()
		if len(claimed) != 5 || maxHolding != 2 || maxPerConfig != 1 {
			t.Errorf("claimed %v; at most %d runs at once and %d of one configuration; want 5 claimed, 2 at once, 1 per configuration",
				claimed, maxHolding, maxPerConfig)
		}
		// The second run of a1's configuration starts after the first ended.
		if i, j := slices.Index(log, "finish "+a1.ID), slices.Index(log, "claim "+a1again.ID); i < 0 || j < i {
			t.Errorf("executor's calls %v: want %s finished before %s was claimed", log, a1.ID, a1again.ID)
		}
	})
}

// waitTeam waits for a run of team to be final.
func waitTeam(t *testing.T, q *runs.Queue, team, id string) runs.Run {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		r, err := q.Get(t.Context(), team, id)
		if err != nil {
			t.Fatal(err)
		}
		if r.Status.Final() {
			return r
		}
		if time.Now().After(deadline) {
			t.Fatalf("run %s still %s after 90 s", id, r.Status)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
