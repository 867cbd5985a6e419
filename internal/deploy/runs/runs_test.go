package runs_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kilnhq/kiln/internal/catalog"
	"github.com/kilnhq/kiln/internal/deploy"
	"github.com/kilnhq/kiln/internal/deploy/plan"
	"github.com/kilnhq/kiln/internal/deploy/runs"
	"github.com/kilnhq/kiln/internal/node"
	"github.com/kilnhq/kiln/internal/store"
	"github.com/kilnhq/kiln/internal/store/storetest"
	"github.com/kilnhq/kiln/internal/validate"
)

const lease = time.Minute

// clock is the queue's clock in tests: it moves only when told.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// env is a queue on a database with teams team_a and team_b and a way to
// make pushed configurations.
type env struct {
	db    *store.DB
	q     *runs.Queue
	clock *clock
	cfgs  *deploy.Service
}

func newEnv(t *testing.T, db *store.DB) *env {
	t.Helper()
	for _, team := range []string{"team_a", "team_b"} {
		if _, err := db.Write().ExecContext(t.Context(), `INSERT INTO teams (id, name, created_at) VALUES ($1, $2, 1)`, team, team); err != nil {
			t.Fatal(err)
		}
	}
	cat, err := catalog.Load(false)
	if err != nil {
		t.Fatal(err)
	}
	c := &clock{t: time.UnixMilli(1_800_000_000_000)}
	return &env{db: db, q: runs.New(db, runs.Options{Now: c.Now}), clock: c, cfgs: deploy.New(db, cat, node.PortRange{})}
}

// config is a pushed configuration: its id and its latest version's.
type config struct{ id, version string }

func (e *env) config(t *testing.T, team, name string) config {
	t.Helper()
	yaml := "version: 1\nservers:\n  lobby:\n    software: paper\n    memory: 2G\n"
	c, err := e.cfgs.Create(t.Context(), team, name, "", yaml)
	if err != nil {
		t.Fatal(err)
	}
	v, _, err := e.cfgs.Push(t.Context(), team, c.ID, "user:a", "")
	if err != nil {
		t.Fatal(err)
	}
	return config{c.ID, v.ID}
}

func (e *env) enqueue(t *testing.T, team string, c config) runs.Run {
	t.Helper()
	r, created, err := e.q.Enqueue(t.Context(), team, c.id, c.version, "user:a", "")
	if err != nil || !created {
		t.Fatalf("Enqueue = %v, created %v", err, created)
	}
	return r
}

func (e *env) claim(t *testing.T, owner string) (runs.Run, bool) {
	t.Helper()
	r, ok, err := e.q.Claim(t.Context(), owner, lease)
	if err != nil {
		t.Fatalf("Claim(%s) = %v", owner, err)
	}
	return r, ok
}

func (e *env) mustClaim(t *testing.T, owner, want string) runs.Run {
	t.Helper()
	r, ok := e.claim(t, owner)
	if !ok || r.ID != want {
		t.Fatalf("Claim(%s) = %s (ok %v), want %s", owner, r.ID, ok, want)
	}
	return r
}

func (e *env) noClaim(t *testing.T, owner string) {
	t.Helper()
	if r, ok := e.claim(t, owner); ok {
		t.Fatalf("Claim(%s) = %s (%s), want nothing claimable", owner, r.ID, r.Status)
	}
}

func (e *env) get(t *testing.T, team, id string) runs.Run {
	t.Helper()
	r, err := e.q.Get(t.Context(), team, id)
	if err != nil {
		t.Fatalf("Get(%s) = %v", id, err)
	}
	return r
}

func (e *env) eventTypes(t *testing.T, team, id string) []runs.EventType {
	t.Helper()
	evs, err := e.q.Events(t.Context(), team, id)
	if err != nil {
		t.Fatalf("Events(%s) = %v", id, err)
	}
	var out []runs.EventType
	for i, ev := range evs {
		if ev.Seq != i+1 {
			t.Errorf("event %d of %s has seq %d", i, id, ev.Seq)
		}
		out = append(out, ev.Type)
	}
	return out
}

func (e *env) finish(t *testing.T, id, owner string) {
	t.Helper()
	if err := e.q.Finish(t.Context(), id, owner, runs.Succeeded, runs.Summary{}, "", ""); err != nil {
		t.Fatalf("Finish(%s) = %v", id, err)
	}
}

func TestEnqueue(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		e := newEnv(t, db)
		ctx := t.Context()
		a, b := e.config(t, "team_a", "a"), e.config(t, "team_b", "b")

		r, created, err := e.q.Enqueue(ctx, "team_a", a.id, a.version, "user:alice", "")
		if err != nil || !created {
			t.Fatalf("Enqueue = %v, created %v", err, created)
		}
		now := e.clock.Now().UnixMilli()
		want := runs.Run{
			ID: r.ID, TeamID: "team_a", ConfigurationID: a.id, VersionID: a.version, VersionNumber: 1,
			SpecHash: r.SpecHash, ResourceCount: 1, Status: runs.Queued, CreatedBy: "user:alice",
			CreatedAt: now, UpdatedAt: now,
		}
		if !reflect.DeepEqual(r, want) || !strings.HasPrefix(r.ID, "run_") || !strings.HasPrefix(r.SpecHash, "sha256:") {
			t.Fatalf("Enqueue = %+v, want %+v", r, want)
		}
		if got := e.get(t, "team_a", r.ID); !reflect.DeepEqual(got, r) {
			t.Fatalf("Get = %+v, want %+v", got, r)
		}
		evs, err := e.q.Events(ctx, "team_a", r.ID)
		if err != nil || len(evs) != 1 || evs[0].Type != runs.EventQueued || evs[0].Stage != "" ||
			evs[0].Message != "Queued by user:alice." || evs[0].CreatedAt != now {
			t.Fatalf("Events = %+v, %v", evs, err)
		}

		// Another team's run, configuration or version is not there.
		if _, err := e.q.Get(ctx, "team_b", r.ID); !errors.Is(err, runs.ErrNotFound) {
			t.Errorf("Get of another team's run = %v, want ErrNotFound", err)
		}
		if _, err := e.q.Events(ctx, "team_b", r.ID); !errors.Is(err, runs.ErrNotFound) {
			t.Errorf("Events of another team's run = %v, want ErrNotFound", err)
		}
		if _, err := e.q.Resources(ctx, "team_b", r.ID); !errors.Is(err, runs.ErrNotFound) {
			t.Errorf("Resources of another team's run = %v, want ErrNotFound", err)
		}
		for _, c := range []struct {
			name                  string
			team, config, version string
		}{
			{"another team's configuration", "team_a", b.id, b.version},
			{"a version of another configuration", "team_b", b.id, a.version},
			{"no such configuration", "team_a", "cfg_nope", a.version},
		} {
			if _, _, err := e.q.Enqueue(ctx, c.team, c.config, c.version, "user:a", ""); !errors.Is(err, runs.ErrConfigurationNotFound) {
				t.Errorf("Enqueue(%s) = %v, want ErrConfigurationNotFound", c.name, err)
			}
		}
		long := strings.Repeat("k", runs.MaxIdempotencyKey+1)
		if _, _, err := e.q.Enqueue(ctx, "team_a", a.id, a.version, "user:a", long); !isValidation(err, "idempotency_key") {
			t.Errorf("Enqueue(key of %d characters) = %v, want a validation error", len(long), err)
		}
		if n := count(t, db, `SELECT count(*) FROM runs`); n != 1 {
			t.Errorf("%d runs after refused enqueues, want 1", n)
		}
	})
}

func isValidation(err error, path string) bool {
	ve, ok := errors.AsType[*validate.Error](err)
	return ok && len(ve.Issues) == 1 && ve.Issues[0].Path == path
}

func count(t *testing.T, db *store.DB, query string, args ...any) int {
	t.Helper()
	var n int
	if err := db.Read().QueryRowContext(t.Context(), query, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}

// TestIdempotencyKey: 20 applies racing with one key make one run; the
// key for another configuration is refused; another team has its own
// keys; after 24 h the key is free again.
func TestIdempotencyKey(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		e := newEnv(t, db)
		ctx := t.Context()
		a, other := e.config(t, "team_a", "a"), e.config(t, "team_a", "other")

		type result struct {
			r       runs.Run
			created bool
			err     error
		}
		results := make(chan result, 20)
		var wg sync.WaitGroup
		for range 20 {
			wg.Go(func() {
				r, created, err := e.q.Enqueue(ctx, "team_a", a.id, a.version, "user:a", "deploy-1")
				results <- result{r, created, err}
			})
		}
		wg.Wait()
		close(results)
		ids, fresh := map[string]bool{}, 0
		for res := range results {
			if res.err != nil {
				t.Fatalf("Enqueue = %v", res.err)
			}
			ids[res.r.ID] = true
			if res.created {
				fresh++
			}
		}
		if len(ids) != 1 || fresh != 1 {
			t.Fatalf("20 concurrent Enqueue with one key: %d runs, %d created; want 1 and 1", len(ids), fresh)
		}
		if n := count(t, db, `SELECT count(*) FROM runs`); n != 1 {
			t.Fatalf("%d runs in the table, want 1", n)
		}
		var first string
		for id := range ids {
			first = id
		}
		if r := e.get(t, "team_a", first); r.IdempotencyKey != "deploy-1" {
			t.Errorf("IdempotencyKey = %q", r.IdempotencyKey)
		}

		if _, _, err := e.q.Enqueue(ctx, "team_a", other.id, other.version, "user:a", "deploy-1"); !errors.Is(err, runs.ErrIdempotencyKeyReused) {
			t.Fatalf("Enqueue(same key, other configuration) = %v, want ErrIdempotencyKeyReused", err)
		}
		b := e.config(t, "team_b", "b")
		if r, created, err := e.q.Enqueue(ctx, "team_b", b.id, b.version, "user:b", "deploy-1"); err != nil || !created || r.ID == first {
			t.Fatalf("Enqueue(same key, other team) = %s, %v, %v; want a new run", r.ID, created, err)
		}

		// Just before 24 h the key still names its run; at 24 h it is free.
		e.clock.Advance(runs.KeyLifetime - time.Millisecond)
		if r, created, err := e.q.Enqueue(ctx, "team_a", a.id, a.version, "user:a", "deploy-1"); err != nil || created || r.ID != first {
			t.Fatalf("Enqueue(key 24 h - 1 ms old) = %s, %v, %v; want %s, false", r.ID, created, err, first)
		}
		if n, err := e.q.Prune(ctx); err != nil || n != 0 {
			t.Fatalf("Prune before 24 h = %d, %v", n, err)
		}
		e.clock.Advance(time.Millisecond)
		again, created, err := e.q.Enqueue(ctx, "team_a", other.id, other.version, "user:a", "deploy-1")
		if err != nil || !created || again.ID == first {
			t.Fatalf("Enqueue(key 24 h old, other configuration) = %s, %v, %v; want a new run", again.ID, created, err)
		}
		if r, created, err := e.q.Enqueue(ctx, "team_a", other.id, other.version, "user:a", "deploy-1"); err != nil || created || r.ID != again.ID {
			t.Fatalf("Enqueue(reused key again) = %s, %v, %v; want %s, false", r.ID, created, err, again.ID)
		}
		// team_b's key is 24 h old too: Prune removes it, not team_a's new one.
		if n, err := e.q.Prune(ctx); err != nil || n != 1 {
			t.Fatalf("Prune = %d, %v; want 1", n, err)
		}
		if n := count(t, db, `SELECT count(*) FROM run_idempotency_keys`); n != 1 {
			t.Fatalf("%d keys left after Prune, want 1", n)
		}
	})
}

// TestClaimTwoConfigurations: two owners claim at once and get one run of
// each configuration; the second run of each waits for the first to end.
func TestClaimTwoConfigurations(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		e := newEnv(t, db)
		a, b := e.config(t, "team_a", "a"), e.config(t, "team_b", "b")
		a1, b1 := e.enqueue(t, "team_a", a), e.enqueue(t, "team_b", b)
		a2, b2 := e.enqueue(t, "team_a", a), e.enqueue(t, "team_b", b)

		got := make([]runs.Run, 2)
		var wg sync.WaitGroup
		for i, owner := range []string{"inst_one", "inst_two"} {
			wg.Go(func() {
				r, ok, err := e.q.Claim(t.Context(), owner, lease)
				if err != nil || !ok {
					t.Errorf("Claim(%s) = %v, %v", owner, ok, err)
				}
				got[i] = r
			})
		}
		wg.Wait()
		if t.Failed() {
			return
		}
		claimed := []string{got[0].ID, got[1].ID}
		slices.Sort(claimed)
		want := []string{a1.ID, b1.ID}
		slices.Sort(want)
		if !slices.Equal(claimed, want) {
			t.Fatalf("concurrent claims got %v, want the first run of each configuration %v", claimed, want)
		}
		now := e.clock.Now().UnixMilli()
		for i, owner := range []string{"inst_one", "inst_two"} {
			r := got[i]
			if r.Status != runs.Planning || r.Stage != runs.Planning || r.LeaseOwner != owner ||
				r.LeaseUntil != now+lease.Milliseconds() || r.StartedAt != now || r.QueuePosition != 0 {
				t.Errorf("claimed run = %+v", r)
			}
			if got := e.eventTypes(t, r.TeamID, r.ID); !slices.Equal(got, []runs.EventType{runs.EventQueued, runs.EventStarted}) {
				t.Errorf("events of a claimed run = %v", got)
			}
		}
		e.noClaim(t, "inst_three")

		// The second run of a is claimable once the first is final, not
		// before (whatever its status or lease).
		owner := map[string]string{got[0].ID: "inst_one", got[1].ID: "inst_two"}
		if err := e.q.SetStatus(t.Context(), a1.ID, owner[a1.ID], runs.Executing); err != nil {
			t.Fatal(err)
		}
		e.noClaim(t, "inst_three")
		e.finish(t, a1.ID, owner[a1.ID])
		e.mustClaim(t, "inst_three", a2.ID)
		e.noClaim(t, "inst_three")
		if err := e.q.Finish(t.Context(), b1.ID, owner[b1.ID], runs.Failed, runs.Summary{Failed: 1}, "The server did not start.", runs.FailRuntime); err != nil {
			t.Fatal(err)
		}
		e.mustClaim(t, "inst_one", b2.ID)
		e.noClaim(t, "inst_two")
	})
}

// TestClaimFairBetweenTeams: of the claimable runs, an owner takes one of
// the team with the fewest runs started under it first, then the oldest;
// runs another owner holds do not count. Before, the oldest came first,
// so a team that queued runs of many configurations took every slot of a
// process while another team's run waited behind them.
func TestClaimFairBetweenTeams(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		e := newEnv(t, db)
		a1 := e.enqueue(t, "team_a", e.config(t, "team_a", "a1"))
		a2 := e.enqueue(t, "team_a", e.config(t, "team_a", "a2"))
		a3 := e.enqueue(t, "team_a", e.config(t, "team_a", "a3"))
		b1 := e.enqueue(t, "team_b", e.config(t, "team_b", "b1"))
		b2 := e.enqueue(t, "team_b", e.config(t, "team_b", "b2"))

		e.mustClaim(t, "inst_one", a1.ID) // no team has a run: the oldest
		e.mustClaim(t, "inst_one", b1.ID) // team_a has one, team_b none
		e.mustClaim(t, "inst_one", a2.ID) // one each: the oldest
		// Another owner holds nothing: the oldest again.
		e.mustClaim(t, "inst_two", a3.ID)
		e.mustClaim(t, "inst_one", b2.ID)
		e.noClaim(t, "inst_one")
		// A finished run no longer counts.
		e.finish(t, a1.ID, "inst_one")
		a4 := e.enqueue(t, "team_a", e.config(t, "team_a", "a4"))
		b3 := e.enqueue(t, "team_b", e.config(t, "team_b", "b3"))
		e.mustClaim(t, "inst_one", a4.ID) // team_a has one started under inst_one, team_b two
		e.mustClaim(t, "inst_one", b3.ID)
	})
}

// TestLeaseExpiry: an owner that stops renewing loses the run once its
// lease expires; another takes it over with run.resumed, and every write
// of the first owner fails with ErrLeaseLost from then on.
func TestLeaseExpiry(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		e := newEnv(t, db)
		ctx := t.Context()
		a := e.config(t, "team_a", "a")
		r := e.enqueue(t, "team_a", a)
		e.mustClaim(t, "inst_one", r.ID)
		if err := e.q.SetStatus(ctx, r.ID, "inst_one", runs.Executing); err != nil {
			t.Fatal(err)
		}
		cp := runs.Checkpoint{Done: []string{"server/lobby"}, PlanHash: "sha256:plan"}
		if err := e.q.Checkpoint(ctx, r.ID, "inst_one", cp); err != nil {
			t.Fatal(err)
		}

		// Renewed in time, the lease holds.
		e.clock.Advance(lease - time.Millisecond)
		e.noClaim(t, "inst_two")
		if cancel, err := e.q.Renew(ctx, r.ID, "inst_one", lease); err != nil || cancel {
			t.Fatalf("Renew = %v, %v", cancel, err)
		}
		e.clock.Advance(lease - time.Millisecond)
		e.noClaim(t, "inst_two")

		// inst_one stops renewing: at lease_until the run is taken over,
		// as it was (executing, with its checkpoint).
		e.clock.Advance(time.Millisecond)
		got := e.mustClaim(t, "inst_two", r.ID)
		if got.Status != runs.Executing || got.LeaseOwner != "inst_two" || got.StartedAt != r.CreatedAt ||
			!reflect.DeepEqual(got.Checkpoint, &cp) {
			t.Fatalf("taken-over run = %+v", got)
		}
		evs, err := e.q.Events(ctx, "team_a", r.ID)
		if err != nil {
			t.Fatal(err)
		}
		last := evs[len(evs)-1]
		if last.Type != runs.EventResumed || last.Stage != runs.Executing ||
			string(last.Data) != `{"owner":"inst_two","previous_owner":"inst_one"}` {
			t.Fatalf("last event = %+v, want run.resumed", last)
		}
		e.noClaim(t, "inst_three")

		// Every write of the former owner is refused and changes nothing.
		res := []runs.Resource{{Key: "server/lobby", Type: plan.Server, Action: plan.Create, Status: runs.ResourceRunning}}
		for name, call := range map[string]func() error{
			"Renew":           func() error { _, err := e.q.Renew(ctx, r.ID, "inst_one", lease); return err },
			"SetStatus":       func() error { return e.q.SetStatus(ctx, r.ID, "inst_one", runs.Finalizing) },
			"Checkpoint":      func() error { return e.q.Checkpoint(ctx, r.ID, "inst_one", runs.Checkpoint{}) },
			"AddEvent":        func() error { return e.q.AddEvent(ctx, r.ID, "inst_one", runs.Event{Type: runs.EventResourceStarted}) },
			"UpsertResources": func() error { return e.q.UpsertResources(ctx, r.ID, "inst_one", res) },
			"Finish":          func() error { return e.q.Finish(ctx, r.ID, "inst_one", runs.Succeeded, runs.Summary{}, "", "") },
		} {
			if err := call(); !errors.Is(err, runs.ErrLeaseLost) {
				t.Errorf("%s by the former owner = %v, want ErrLeaseLost", name, err)
			}
		}
		after := e.get(t, "team_a", r.ID)
		if after.Status != runs.Executing || after.LeaseOwner != "inst_two" || !reflect.DeepEqual(after.Checkpoint, &cp) ||
			len(e.eventTypes(t, "team_a", r.ID)) != len(evs) {
			t.Fatalf("run after the former owner's writes = %+v", after)
		}
		if rs, err := e.q.Resources(ctx, "team_a", r.ID); err != nil || len(rs) != 0 {
			t.Fatalf("Resources = %+v, %v", rs, err)
		}

		// The new owner carries on; once final, the run is held by nobody.
		if _, err := e.q.Renew(ctx, r.ID, "inst_two", lease); err != nil {
			t.Fatal(err)
		}
		e.finish(t, r.ID, "inst_two")
		if _, err := e.q.Renew(ctx, r.ID, "inst_two", lease); !errors.Is(err, runs.ErrLeaseLost) {
			t.Fatalf("Renew of a finished run = %v, want ErrLeaseLost", err)
		}
		e.clock.Advance(10 * lease)
		e.noClaim(t, "inst_three")
	})
}

// TestExecutorWrites: the plan stored pending, resources updated in
// place in plan order, events with the run's stage, Finish's checks.
func TestExecutorWrites(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		e := newEnv(t, db)
		ctx := t.Context()
		r := e.enqueue(t, "team_a", e.config(t, "team_a", "a"))
		e.mustClaim(t, "inst_one", r.ID)

		steps := []runs.Resource{
			{Key: "dbservice/stats", Type: plan.DBService, Action: plan.Create, Status: runs.ResourcePending, Desired: json.RawMessage(`{"engine":"mysql"}`)},
			{Key: "server/lobby", Type: plan.Server, Action: plan.Update, Status: runs.ResourcePending,
				Desired: json.RawMessage(`{"memory":"4G"}`), Before: json.RawMessage(`{"memory":"2G"}`)},
			{Key: "proxy/edge", Type: plan.Proxy, Action: plan.Noop, Status: runs.ResourceSkipped},
		}
		if err := e.q.UpsertResources(ctx, r.ID, "inst_one", steps); err != nil {
			t.Fatal(err)
		}
		if err := e.q.AddEvent(ctx, r.ID, "inst_one", runs.Event{Type: runs.EventPlanComputed, Message: "3 steps.", Data: json.RawMessage(`{"create":1}`)}); err != nil {
			t.Fatal(err)
		}
		if err := e.q.SetStatus(ctx, r.ID, "inst_one", runs.Executing); err != nil {
			t.Fatal(err)
		}
		e.clock.Advance(time.Second)
		now := e.clock.Now().UnixMilli()
		lobby := steps[1]
		lobby.Status, lobby.Attempt, lobby.StartedAt = runs.ResourceRunning, 1, now
		lobby.Log = []string{"installing paper"}
		if err := e.q.UpsertResources(ctx, r.ID, "inst_one", []runs.Resource{lobby}); err != nil {
			t.Fatal(err)
		}
		if err := e.q.AddEvent(ctx, r.ID, "inst_one", runs.Event{Type: runs.EventResourceStarted, Message: "server/lobby"}); err != nil {
			t.Fatal(err)
		}

		got, err := e.q.Resources(ctx, "team_a", r.ID)
		if err != nil {
			t.Fatal(err)
		}
		start := now - 1000
		want := []runs.Resource{steps[0], lobby, steps[2]}
		want[0].Log, want[0].UpdatedAt = []string{}, start
		want[1].UpdatedAt = now
		want[2].Log, want[2].UpdatedAt = []string{}, start
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("Resources = %+v, want %+v", got, want)
		}
		evs, err := e.q.Events(ctx, "team_a", r.ID)
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) != 4 || evs[2].Type != runs.EventPlanComputed || evs[2].Stage != runs.Planning || string(evs[2].Data) != `{"create":1}` ||
			evs[3].Type != runs.EventResourceStarted || evs[3].Stage != runs.Executing || evs[3].CreatedAt != now {
			t.Fatalf("Events = %+v", evs)
		}

		// Bad input is refused before anything is written.
		for name, call := range map[string]func() error{
			"key of another kind": func() error {
				return e.q.UpsertResources(ctx, r.ID, "inst_one", []runs.Resource{{Key: "server/x", Type: plan.Proxy, Action: plan.Create, Status: runs.ResourcePending}})
			},
			"bad status": func() error {
				return e.q.UpsertResources(ctx, r.ID, "inst_one", []runs.Resource{{Key: "server/x", Type: plan.Server, Action: plan.Create, Status: "done"}})
			},
			"SetStatus(succeeded)": func() error { return e.q.SetStatus(ctx, r.ID, "inst_one", runs.Succeeded) },
			"Finish(failed) without a class": func() error {
				return e.q.Finish(ctx, r.ID, "inst_one", runs.Failed, runs.Summary{}, "It broke.", "")
			},
			"Finish(succeeded) with an error": func() error {
				return e.q.Finish(ctx, r.ID, "inst_one", runs.Succeeded, runs.Summary{}, "It broke.", runs.FailRuntime)
			},
			"Finish(executing)": func() error { return e.q.Finish(ctx, r.ID, "inst_one", runs.Executing, runs.Summary{}, "", "") },
		} {
			if err := call(); err == nil || errors.Is(err, runs.ErrLeaseLost) {
				t.Errorf("%s = %v, want an error", name, err)
			}
		}

		sum := runs.Summary{Create: 1, Update: 1, Noop: 1, Succeeded: 1, Failed: 1}
		if err := e.q.Finish(ctx, r.ID, "inst_one", runs.Failed, sum, "The server did not answer in time.", runs.FailHealthTimeout); err != nil {
			t.Fatal(err)
		}
		fin := e.get(t, "team_a", r.ID)
		if fin.Status != runs.Failed || fin.Stage != "" || fin.LeaseUntil != 0 || fin.LeaseOwner != "inst_one" ||
			fin.CompletedAt != now || !reflect.DeepEqual(fin.Summary, &sum) || fin.Error != "The server did not answer in time." ||
			fin.FailureClass != runs.FailHealthTimeout {
			t.Fatalf("finished run = %+v", fin)
		}
		evs, _ = e.q.Events(ctx, "team_a", r.ID)
		if last := evs[len(evs)-1]; last.Type != runs.EventFailed || last.Stage != runs.Executing ||
			last.Message != fin.Error || string(last.Data) != `{"failure_class":"health_timeout"}` {
			t.Fatalf("last event = %+v", last)
		}
	})
}

// TestCancel: a queued run is canceled at once; a claimed one is asked to
// stop and learns it at its next Renew; finished runs stay as they are.
func TestCancel(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		e := newEnv(t, db)
		ctx := t.Context()
		a := e.config(t, "team_a", "a")
		first, second, third := e.enqueue(t, "team_a", a), e.enqueue(t, "team_a", a), e.enqueue(t, "team_a", a)

		e.clock.Advance(time.Second)
		c, err := e.q.RequestCancel(ctx, "team_a", second.ID)
		now := e.clock.Now().UnixMilli()
		if err != nil || c.Status != runs.Canceled || c.FailureClass != runs.FailCanceled || c.Error == "" ||
			c.CompletedAt != now || c.StartedAt != 0 || c.CancelRequested {
			t.Fatalf("RequestCancel(queued) = %+v, %v", c, err)
		}
		if got := e.eventTypes(t, "team_a", second.ID); !slices.Equal(got, []runs.EventType{runs.EventQueued, runs.EventCanceled}) {
			t.Fatalf("events of a canceled queued run = %v", got)
		}
		if again, err := e.q.RequestCancel(ctx, "team_a", second.ID); err != nil || !reflect.DeepEqual(again, c) {
			t.Fatalf("RequestCancel(canceled) = %+v, %v; want it unchanged", again, err)
		}
		if _, err := e.q.RequestCancel(ctx, "team_b", first.ID); !errors.Is(err, runs.ErrNotFound) {
			t.Fatalf("RequestCancel of another team's run = %v, want ErrNotFound", err)
		}

		e.mustClaim(t, "inst_one", first.ID)
		if err := e.q.SetStatus(ctx, first.ID, "inst_one", runs.Executing); err != nil {
			t.Fatal(err)
		}
		for range 2 {
			c, err = e.q.RequestCancel(ctx, "team_a", first.ID)
			if err != nil || c.Status != runs.Executing || !c.CancelRequested {
				t.Fatalf("RequestCancel(executing) = %+v, %v", c, err)
			}
		}
		if got := e.eventTypes(t, "team_a", first.ID); !slices.Equal(got, []runs.EventType{runs.EventQueued, runs.EventStarted, runs.EventCancelRequested}) {
			t.Fatalf("events after two cancel requests = %v", got)
		}
		if cancel, err := e.q.Renew(ctx, first.ID, "inst_one", lease); err != nil || !cancel {
			t.Fatalf("Renew after a cancel request = %v, %v; want true", cancel, err)
		}
		if err := e.q.Finish(ctx, first.ID, "inst_one", runs.Canceled, runs.Summary{}, "", ""); err != nil {
			t.Fatal(err)
		}
		if r := e.get(t, "team_a", first.ID); r.Status != runs.Canceled || r.FailureClass != runs.FailCanceled || r.Error != "The run was canceled." {
			t.Fatalf("run finished as canceled = %+v", r)
		}

		// The canceled second run is skipped: the third is next.
		e.mustClaim(t, "inst_one", third.ID)
		e.finish(t, third.ID, "inst_one")
		if _, err := e.q.RequestCancel(ctx, "team_a", third.ID); !errors.Is(err, runs.ErrFinished) {
			t.Fatalf("RequestCancel(succeeded) = %v, want ErrFinished", err)
		}
		if r := e.get(t, "team_a", third.ID); r.Status != runs.Succeeded || r.CancelRequested {
			t.Fatalf("succeeded run after a cancel = %+v", r)
		}
	})
}

// TestQueuePositions: the runs ahead of a queued run are those of its
// configuration started or queued before it; 0 once started.
func TestQueuePositions(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		e := newEnv(t, db)
		a, b := e.config(t, "team_a", "a"), e.config(t, "team_a", "b")
		a1, a2, b1, a3 := e.enqueue(t, "team_a", a), e.enqueue(t, "team_a", a), e.enqueue(t, "team_a", b), e.enqueue(t, "team_a", a)
		positions := func() []int {
			t.Helper()
			var out []int
			for _, r := range []runs.Run{a1, a2, a3, b1} {
				n, err := e.q.QueuePosition(t.Context(), "team_a", r.ID)
				if err != nil {
					t.Fatal(err)
				}
				if got := e.get(t, "team_a", r.ID).QueuePosition; got != n {
					t.Fatalf("Get(%s).QueuePosition = %d, QueuePosition = %d", r.ID, got, n)
				}
				out = append(out, n)
			}
			return out
		}
		if a2.QueuePosition != 1 || a3.QueuePosition != 2 || b1.QueuePosition != 0 {
			t.Fatalf("positions at Enqueue: %d %d %d", a2.QueuePosition, a3.QueuePosition, b1.QueuePosition)
		}
		for _, step := range []struct {
			name string
			do   func()
			want []int // a1, a2, a3, b1
		}{
			{"enqueued", func() {}, []int{0, 1, 2, 0}},
			{"a1 and b1 claimed", func() { e.mustClaim(t, "inst_one", a1.ID); e.mustClaim(t, "inst_one", b1.ID) }, []int{0, 1, 2, 0}},
			{"a1 finished", func() { e.finish(t, a1.ID, "inst_one") }, []int{0, 0, 1, 0}},
			{"a2 canceled", func() {
				if _, err := e.q.RequestCancel(t.Context(), "team_a", a2.ID); err != nil {
					t.Fatal(err)
				}
			}, []int{0, 0, 0, 0}},
		} {
			step.do()
			if got := positions(); !slices.Equal(got, step.want) {
				t.Errorf("%s: positions of a1, a2, a3, b1 = %v, want %v", step.name, got, step.want)
			}
		}
		if _, err := e.q.QueuePosition(t.Context(), "team_b", a3.ID); !errors.Is(err, runs.ErrNotFound) {
			t.Errorf("QueuePosition of another team's run = %v", err)
		}
	})
}

func TestList(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		e := newEnv(t, db)
		ctx := t.Context()
		a, b, other := e.config(t, "team_a", "a"), e.config(t, "team_a", "b"), e.config(t, "team_b", "x")
		a1, b1, a2 := e.enqueue(t, "team_a", a), e.enqueue(t, "team_a", b), e.enqueue(t, "team_a", a)
		x1 := e.enqueue(t, "team_b", other)
		e.mustClaim(t, "inst_one", a1.ID)

		ids := func(rs []runs.Run) []string {
			var out []string
			for _, r := range rs {
				out = append(out, r.ID)
			}
			return out
		}
		for _, c := range []struct {
			name    string
			team    string
			config  string
			status  runs.Status
			limit   int
			want    []string
			wantErr string // the issue's path
		}{
			{name: "all, newest first", team: "team_a", want: []string{a2.ID, b1.ID, a1.ID}},
			{name: "one configuration", team: "team_a", config: a.id, want: []string{a2.ID, a1.ID}},
			{name: "queued", team: "team_a", status: runs.Queued, want: []string{a2.ID, b1.ID}},
			{name: "planning of a", team: "team_a", config: a.id, status: runs.Planning, want: []string{a1.ID}},
			{name: "limit", team: "team_a", limit: 2, want: []string{a2.ID, b1.ID}},
			{name: "another team", team: "team_b", want: []string{x1.ID}},
			{name: "another team's configuration", team: "team_b", config: a.id},
			{name: "no such status", team: "team_a", status: "done", wantErr: "status"},
			{name: "limit too high", team: "team_a", limit: runs.MaxPage + 1, wantErr: "limit"},
			{name: "negative limit", team: "team_a", limit: -1, wantErr: "limit"},
		} {
			t.Run(c.name, func(t *testing.T) {
				got, err := e.q.List(ctx, c.team, c.config, c.status, c.limit)
				if c.wantErr != "" {
					if !isValidation(err, c.wantErr) {
						t.Fatalf("List = %v, want a validation error at %s", err, c.wantErr)
					}
					return
				}
				if err != nil || !slices.Equal(ids(got), c.want) {
					t.Fatalf("List(%q, %q, %d) = %v, %v; want %v", c.config, c.status, c.limit, ids(got), err, c.want)
				}
			})
		}
		got, err := e.q.List(ctx, "team_a", "", "", 0)
		if err != nil || got[0].QueuePosition != 1 || got[0].VersionNumber != 1 || got[2].Status != runs.Planning {
			t.Fatalf("List items = %+v, %v", got, err)
		}
	})
}

// TestClaimRacing: claimers racing on one database handle (both engines).
func TestClaimRacing(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		e := newEnv(t, db)
		raceClaims(t, e, []*runs.Queue{e.q})
	})
}

// TestReplicasRacingClaim: two *store.DB handles on one PostgreSQL schema
// (two kiln serve replicas) racing Claim never both get a run, and never
// start two runs of one configuration.
func TestReplicasRacingClaim(t *testing.T) {
	u := storetest.PostgresURL(t)
	var queues []*runs.Queue
	var e *env
	for i := range 2 {
		db, err := store.Open(t.Context(), store.Options{URL: u})
		if err != nil {
			t.Fatalf("open replica %d: %v", i, err)
		}
		t.Cleanup(func() { db.Close() })
		if i == 0 {
			e = newEnv(t, db)
		}
		queues = append(queues, runs.New(db, runs.Options{Now: e.clock.Now}))
	}
	raceClaims(t, e, queues)
}

// raceClaims queues 5 runs of each of 4 configurations, then, round after
// round, lets 8 owners (spread over queues) claim at once and finishes
// what they got: no run is claimed twice, no round starts two runs of one
// configuration, runs of a configuration start in queue order, and every
// round starts at least one run until all are done.
func raceClaims(t *testing.T, e *env, queues []*runs.Queue) {
	t.Helper()
	const configs, perConfig, owners = 4, 5, 8
	order := map[string][]string{} // configuration → its runs in queue order
	for i := range configs {
		c := e.config(t, "team_a", fmt.Sprintf("c%d", i))
		for range perConfig {
			order[c.id] = append(order[c.id], e.enqueue(t, "team_a", c).ID)
		}
	}
	claimedEver := map[string]bool{}
	for round := 0; len(claimedEver) < configs*perConfig; round++ {
		if round > configs*perConfig {
			t.Fatalf("%d rounds and only %d of %d runs claimed", round, len(claimedEver), configs*perConfig)
		}
		type claim struct {
			r     runs.Run
			owner string
		}
		got := make(chan claim, owners)
		var wg sync.WaitGroup
		for i := range owners {
			q, owner := queues[i%len(queues)], fmt.Sprintf("inst_%d", i)
			wg.Go(func() {
				r, ok, err := q.Claim(t.Context(), owner, lease)
				if err != nil {
					t.Errorf("Claim(%s) = %v", owner, err)
				}
				if ok {
					got <- claim{r, owner}
				}
			})
		}
		wg.Wait()
		close(got)
		if t.Failed() {
			return
		}
		inRound := map[string]bool{}
		n := 0
		for c := range got {
			n++
			if claimedEver[c.r.ID] {
				t.Fatalf("round %d: run %s claimed twice", round, c.r.ID)
			}
			claimedEver[c.r.ID] = true
			if inRound[c.r.ConfigurationID] {
				t.Fatalf("round %d: two runs of configuration %s started", round, c.r.ConfigurationID)
			}
			inRound[c.r.ConfigurationID] = true
			if next := order[c.r.ConfigurationID][0]; c.r.ID != next || c.r.LeaseOwner != c.owner {
				t.Fatalf("round %d: %s claimed %s (owner %s), want %s next", round, c.owner, c.r.ID, c.r.LeaseOwner, next)
			}
			order[c.r.ConfigurationID] = order[c.r.ConfigurationID][1:]
			e.finish(t, c.r.ID, c.owner)
		}
		if n == 0 {
			t.Fatalf("round %d claimed nothing with %d runs left", round, configs*perConfig-len(claimedEver))
		}
	}
	if n := count(t, e.db, `SELECT count(*) FROM runs WHERE status = 'succeeded'`); n != configs*perConfig {
		t.Fatalf("%d runs succeeded, want %d", n, configs*perConfig)
	}
}

// TestConfigurationDelete: a deleted configuration's runs go with it; it
// is refused while one of them is queued or executing.
func TestConfigurationDelete(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		e := newEnv(t, db)
		a := e.config(t, "team_a", "a")
		r := e.enqueue(t, "team_a", a)
		queued, _, err := e.q.Enqueue(t.Context(), "team_a", a.id, a.version, "user:a", "key")
		if err != nil {
			t.Fatal(err)
		}
		e.mustClaim(t, "inst_one", r.ID)
		if err := e.q.UpsertResources(t.Context(), r.ID, "inst_one", []runs.Resource{
			{Key: "server/lobby", Type: plan.Server, Action: plan.Create, Status: runs.ResourcePending}}); err != nil {
			t.Fatal(err)
		}
		e.finish(t, r.ID, "inst_one")
		if err := e.cfgs.Delete(t.Context(), "team_a", a.id); !errors.Is(err, deploy.ErrBusy) {
			t.Fatalf("Delete with a queued run = %v, want deploy.ErrBusy", err)
		}
		if _, err := e.q.RequestCancel(t.Context(), "team_a", queued.ID); err != nil {
			t.Fatal(err)
		}
		if err := e.cfgs.Delete(t.Context(), "team_a", a.id); err != nil {
			t.Fatalf("Delete of a configuration with finished runs = %v", err)
		}
		for _, table := range []string{"runs", "run_resources", "run_events", "run_idempotency_keys"} {
			if n := count(t, db, `SELECT count(*) FROM `+table); n != 0 {
				t.Errorf("%d rows left in %s", n, table)
			}
		}
	})
}
