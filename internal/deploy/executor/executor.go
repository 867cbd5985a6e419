package executor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/kilnhq/kiln/internal/catalog"
	"github.com/kilnhq/kiln/internal/catalog/install"
	"github.com/kilnhq/kiln/internal/dbservice"
	"github.com/kilnhq/kiln/internal/deploy"
	"github.com/kilnhq/kiln/internal/deploy/plan"
	"github.com/kilnhq/kiln/internal/deploy/runs"
	"github.com/kilnhq/kiln/internal/deploy/spec"
	"github.com/kilnhq/kiln/internal/files"
	"github.com/kilnhq/kiln/internal/nodes"
	"github.com/kilnhq/kiln/internal/panics"
	"github.com/kilnhq/kiln/internal/quota"
	"github.com/kilnhq/kiln/internal/servers"
	"github.com/kilnhq/kiln/internal/validate"
)

// Options tune an Executor; zero values take the defaults.
type Options struct {
	// Owner is this process's instance id (internal/instance): the lease
	// owner of the runs it executes. Required.
	Owner string
	// Lease is how long a claimed run is held without a renewal (30 s);
	// it is renewed every third of it.
	Lease time.Duration
	// Poll is how often the queue is asked for work when idle (1 s); Wake
	// asks at once.
	Poll time.Duration
	// Runs bounds the runs this process executes at once, across every
	// team and configuration (4); the queue gives a free slot to the team
	// with the fewest runs executing here, and keeps the runs of one
	// configuration one at a time.
	Runs int
	// Parallel bounds the steps of one tier run at once (4), per run.
	Parallel int
	// HealthTimeout bounds the wait for a server to answer (180 s).
	HealthTimeout time.Duration
	// InstallTimeout bounds the wait for an install (10 min).
	InstallTimeout time.Duration
	// RetryBackoff is the wait before the second attempt of a step (2 s),
	// doubled before the third.
	RetryBackoff time.Duration
	// Secrets seals the configurations' forwarding secrets (modern
	// forwarding fails without it).
	Secrets deploy.Sealer
	// Databases makes and drops the dbservices' databases
	// (*dbservice.Service); a version with dbservices fails without it.
	Databases Databases
	// TeamSecrets reads the values of the teams' secrets a spec
	// references (*secrets.Service); a spec referencing one is refused at
	// planning without it.
	TeamSecrets TeamSecrets
	// DigestKey keys the digests of the values a spec's references
	// resolve to (secretbox.Box.Derive(DigestPurpose)), which the applied
	// state records instead of the values; a spec with references is
	// refused at planning without it.
	DigestKey []byte
	// Snapshots takes the snapshot of a server before a replace or delete
	// destroys it (*snapshot.Service); without it those steps fail and
	// destroy nothing.
	Snapshots Snapshots
	Log       *slog.Logger
}

// Snapshots is what the executor needs of internal/snapshot.
type Snapshots interface {
	// Before snapshots the team's server, which is about to be destroyed,
	// and waits until the snapshot is ready; it returns its id.
	Before(ctx context.Context, teamID, serverID, reason string) (string, error)
}

// TeamSecrets is what the executor needs of internal/secrets.
type TeamSecrets interface {
	// Values returns the values of the team's secrets among names, by
	// name; a name without one is left out.
	Values(ctx context.Context, teamID string, names []string) (map[string]string, error)
}

// Databases is what the executor needs of internal/dbservice.
type Databases interface {
	Ensure(ctx context.Context, teamID string, o dbservice.Owner, engine string, attach []string, maxConnections int) (dbservice.Database, error)
	Detach(ctx context.Context, teamID string, o dbservice.Owner) error
	Drop(ctx context.Context, teamID string, o dbservice.Owner) error
	// Credentials are the values of a spec's ${dbservices.…} references.
	Credentials(ctx context.Context, teamID string, o dbservice.Owner) (dbservice.Credentials, error)
}

func (o *Options) defaults() {
	if o.Lease <= 0 {
		o.Lease = 30 * time.Second
	}
	if o.Poll <= 0 {
		o.Poll = time.Second
	}
	if o.Runs <= 0 {
		o.Runs = 4
	}
	if o.Parallel <= 0 {
		o.Parallel = 4
	}
	if o.HealthTimeout <= 0 {
		o.HealthTimeout = 180 * time.Second
	}
	if o.InstallTimeout <= 0 {
		o.InstallTimeout = 10 * time.Minute
	}
	if o.RetryBackoff <= 0 {
		o.RetryBackoff = 2 * time.Second
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
}

// maxAttempts is how many times a step is tried when it fails for a
// transient reason.
const maxAttempts = 3

// Queue is what the executor needs of the runs queue (*runs.Queue):
// claiming runs, holding their lease, recording their progress. An
// interface so that tests can put faults between the executor and the
// real queue (a Renew that fails once, or keeps failing).
type Queue interface {
	Claim(ctx context.Context, owner string, leaseFor time.Duration) (runs.Run, bool, error)
	Renew(ctx context.Context, runID, owner string, leaseFor time.Duration) (cancelRequested bool, err error)
	SetStatus(ctx context.Context, runID, owner string, st runs.Status) error
	Checkpoint(ctx context.Context, runID, owner string, cp runs.Checkpoint) error
	AddEvent(ctx context.Context, runID, owner string, e runs.Event) error
	UpsertResources(ctx context.Context, runID, owner string, rs []runs.Resource) error
	Finish(ctx context.Context, runID, owner string, st runs.Status, summary runs.Summary, msg string, class runs.FailureClass) error
	Resources(ctx context.Context, teamID, runID string) ([]runs.Resource, error)
	Prune(ctx context.Context) (int64, error)
}

// Executor executes the queued runs of every configuration: up to
// Options.Runs at once, one run of a configuration at a time (the queue
// sees to it, and to fairness between teams).
type Executor struct {
	q       Queue
	deploy  *deploy.Service
	servers *servers.Service
	cat     spec.Catalog
	opts    Options
	wake    chan struct{}
}

// New returns an Executor; call Run to start it.
func New(q Queue, d *deploy.Service, s *servers.Service, cat spec.Catalog, opts Options) *Executor {
	opts.defaults()
	return &Executor{q: q, deploy: d, servers: s, cat: cat, opts: opts, wake: make(chan struct{}, 1)}
}

// Wake makes Run look for work now (a run was just queued, or a slot
// freed).
func (e *Executor) Wake() {
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

// Run claims and executes runs until ctx ends, each in a goroutine of its
// own, at most Options.Runs at once; it returns nil once ctx has ended and
// every run it started has stopped. A run in progress at that moment
// stops between steps and keeps its lease until it expires: the next
// start, or another replica, resumes it.
func (e *Executor) Run(ctx context.Context) error {
	var running sync.WaitGroup
	defer running.Wait()
	slots := make(chan struct{}, e.opts.Runs)
	t := time.NewTicker(e.opts.Poll)
	defer t.Stop()
	prune := time.NewTicker(time.Hour)
	defer prune.Stop()
	for {
	claim:
		for ctx.Err() == nil {
			select {
			case slots <- struct{}{}:
			default:
				break claim // every slot busy: a run that ends wakes the loop
			}
			r, ok, err := e.q.Claim(ctx, e.opts.Owner, e.opts.Lease)
			if err != nil || !ok {
				<-slots
				if err != nil && ctx.Err() == nil {
					e.opts.Log.Warn("claim a run", "err", err)
				}
				break
			}
			running.Go(func() {
				defer func() {
					<-slots
					e.Wake()
				}()
				// A panic fails nothing but this run's process of it:
				// logged, the lease expires and the run is resumed.
				if err := panics.Catch(func() error { e.execute(ctx, r); return nil }); err != nil {
					pe, _ := errors.AsType[*panics.Error](err)
					e.opts.Log.Error("run panicked", "run_id", r.ID, "err", err, "stack", string(pe.Stack))
				}
			})
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-e.wake:
		case <-prune.C:
			// Idempotency keys older than a day (any replica may do it).
			if _, err := e.q.Prune(ctx); err != nil && ctx.Err() == nil {
				e.opts.Log.Warn("prune idempotency keys", "err", err)
			}
		}
	}
}

// stepError is a step's failure with its class; transient ones are tried
// again.
type stepError struct {
	class     runs.FailureClass
	msg       string // what the team reads (the resource's error, the run's)
	transient bool
	detail    error // when set, what only the log may hold (step logs it)
}

func (s *stepError) Error() string { return s.msg }

func fail(class runs.FailureClass, format string, args ...any) *stepError {
	return &stepError{class: class, msg: fmt.Sprintf(format, args...)}
}

// exec is one run being executed: its lease is renewed in the background.
type exec struct {
	e      *Executor
	run    runs.Run
	log    *slog.Logger    // with the run's id
	ctx    context.Context // ends when the lease is lost or the process stops
	mu     sync.Mutex
	cancel bool      // a cancel was requested
	held   time.Time // when the lease was last renewed (or claimed)
}

func (x *exec) owner() string { return x.e.opts.Owner }

// renew keeps the lease until stop, every third of it. A lost lease
// cancels x.ctx at once. A renewal that fails otherwise (the database
// away for a moment) is logged and tried again at the next tick; but
// once two thirds of the lease have passed since the last renewal, x.ctx
// is canceled: another process may claim the run when the lease expires,
// and this one must have stopped acting on servers by then (the lease
// fences every side effect, and a step stops at its next look at ctx).
func (x *exec) renew(stopCtx context.CancelFunc) (stop func()) {
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(x.e.opts.Lease / 3)
		defer t.Stop()
		for {
			select {
			case <-quit:
				return
			case <-x.ctx.Done():
				return
			case <-t.C:
				_, err := x.renewNow()
				switch {
				case err == nil:
				case errors.Is(err, runs.ErrLeaseLost):
					stopCtx()
					return
				case x.ctx.Err() != nil:
					return
				default:
					since := x.sinceRenewed()
					x.log.Warn("renew the run's lease", "err", err, "since_renewed", since.Round(time.Millisecond))
					if since >= x.e.opts.Lease*2/3 {
						x.log.Error("the run's lease could not be renewed; stopping the run before it expires (it resumes once the lease expires)",
							"lease", x.e.opts.Lease)
						stopCtx()
						return
					}
				}
			}
		}
	}()
	return func() { close(quit); <-done }
}

// renewNow renews the lease, records when and a requested cancel.
func (x *exec) renewNow() (bool, error) {
	c, err := x.e.q.Renew(x.ctx, x.run.ID, x.owner(), x.e.opts.Lease)
	x.mu.Lock()
	defer x.mu.Unlock()
	if err == nil {
		x.held = time.Now()
	}
	if c {
		x.cancel = true
	}
	return x.cancel, err
}

// sinceRenewed is how long ago the lease was last renewed.
func (x *exec) sinceRenewed() time.Duration {
	x.mu.Lock()
	defer x.mu.Unlock()
	return time.Since(x.held)
}

// canceled renews the lease now and reports whether a cancel was
// requested (asked between steps). A lost lease is an error; any other
// failure to renew is not (the background renewal fences the lease),
// and the cancel flag is then the one last seen.
func (x *exec) canceled() (bool, error) {
	c, err := x.renewNow()
	if err != nil && !errors.Is(err, runs.ErrLeaseLost) && x.ctx.Err() == nil {
		x.log.Warn("renew the run's lease between steps", "err", err)
		return c, nil
	}
	return c, err
}

func (e *Executor) execute(parent context.Context, r runs.Run) {
	log := e.opts.Log.With("run_id", r.ID, "configuration_id", r.ConfigurationID)
	ctx, stop := context.WithCancel(parent)
	defer stop()
	x := &exec{e: e, run: r, ctx: ctx, log: log, held: time.Now()}
	stopRenew := x.renew(stop)
	defer stopRenew()
	err := x.do()
	switch {
	case err == nil:
	case errors.Is(err, runs.ErrLeaseLost):
		log.Warn("run lease lost to another instance; stopped", "err", err)
	case parent.Err() != nil:
		log.Info("run paused by shutdown; it resumes at the next start", "err", err)
	default:
		log.Error("run failed to record its outcome", "err", err)
	}
}

// do executes x.run and records its outcome.
func (x *exec) do() error {
	e, r, ctx := x.e, x.run, x.ctx
	q, owner := e.q, x.owner()
	resumed := r.Checkpoint != nil && r.Checkpoint.PlanHash != ""
	v, err := e.deploy.Version(ctx, r.TeamID, r.ConfigurationID, r.VersionNumber)
	if err != nil {
		return q.Finish(ctx, r.ID, owner, runs.Failed, runs.Summary{}, "The version to apply cannot be read: "+err.Error()+".", runs.FailInternal)
	}
	sp, refusal := parseSpec(v.YAML, e.cat)
	if refusal != "" {
		return q.Finish(ctx, r.ID, owner, runs.Failed, runs.Summary{}, refusal, runs.FailValidation)
	}
	planned, err := e.planSpec(ctx, r.TeamID, r.ConfigurationID, sp)
	if err != nil {
		return err
	}
	if planned.Refusal != "" {
		return q.Finish(ctx, r.ID, owner, runs.Failed, runs.Summary{}, planned.Refusal, planned.Class)
	}
	p := *planned.Plan
	// A dbservice about to be deleted is attached to nothing from now on:
	// the servers updated before its delete step must not get its
	// credentials again.
	for _, st := range p.Steps {
		if st.Kind == plan.DBService && st.Action == plan.Delete && e.opts.Databases != nil {
			if err := e.opts.Databases.Detach(ctx, r.TeamID, dbservice.Owner{ConfigurationID: r.ConfigurationID, ResourceKey: st.Key}); err != nil {
				return err
			}
		}
	}
	done := map[string]bool{}
	if resumed {
		for _, k := range r.Checkpoint.Done {
			done[k] = true
		}
		if err := x.drift(p, done); err != nil {
			return err
		}
		r.Checkpoint = x.run.Checkpoint // the new plan's hash, if it changed
	} else {
		pending := make([]runs.Resource, len(p.Steps))
		for i, st := range p.Steps {
			status := runs.ResourcePending
			if st.Action == plan.Noop {
				status = runs.ResourceSucceeded
			}
			pending[i] = runs.Resource{Key: st.Key, Type: st.Kind, Action: st.Action, Status: status,
				Desired: st.Desired, Before: st.Before}
		}
		if err := q.UpsertResources(ctx, r.ID, owner, pending); err != nil {
			return err
		}
		hash, _ := p.Hash()
		data, _ := json.Marshal(p.Summary)
		if err := q.AddEvent(ctx, r.ID, owner, runs.Event{Type: runs.EventPlanComputed, Data: data,
			Message: fmt.Sprintf("%d to create, %d to update, %d to replace, %d to delete, %d unchanged.",
				p.Summary.Create, p.Summary.Update, p.Summary.Replace, p.Summary.Delete, p.Summary.Noop)}); err != nil {
			return err
		}
		if err := q.Checkpoint(ctx, r.ID, owner, runs.Checkpoint{Done: []string{}, PlanHash: hash}); err != nil {
			return err
		}
		r.Checkpoint = &runs.Checkpoint{Done: []string{}, PlanHash: hash}
	}
	if err := q.SetStatus(ctx, r.ID, owner, runs.Executing); err != nil {
		return err
	}
	var doneMu sync.Mutex
	cp := *r.Checkpoint
	for _, tier := range p.Tiers {
		canceled, err := x.canceled()
		if err != nil {
			return err
		}
		if canceled {
			x.skipRest()
			return q.Finish(ctx, r.ID, owner, runs.Canceled, x.summaryNow(), "The run was canceled; the steps done before stay done.", runs.FailCanceled)
		}
		var failed *stepError
		var failedKey string
		var failMu sync.Mutex
		g, gctx := errgroup.WithContext(ctx)
		g.SetLimit(e.opts.Parallel)
		stopped := false
		for _, i := range tier {
			st := p.Steps[i]
			doneMu.Lock()
			skip := done[st.Key]
			doneMu.Unlock()
			if skip {
				continue
			}
			// Between steps: a requested cancel starts nothing more (the
			// steps running finish).
			if c, err := x.canceled(); err != nil {
				stopped = true
				break
			} else if c {
				stopped = true
				break
			}
			g.Go(func() error {
				serr, err := x.step(gctx, st)
				if err != nil {
					return err // the lease or the process: stop everything
				}
				if serr != nil {
					failMu.Lock()
					if failed == nil {
						failed, failedKey = serr, st.Key
					}
					failMu.Unlock()
					return nil
				}
				doneMu.Lock()
				done[st.Key] = true
				cp.Done = append(cp.Done, st.Key)
				slices.Sort(cp.Done)
				snapshot := runs.Checkpoint{Done: slices.Clone(cp.Done), PlanHash: cp.PlanHash}
				doneMu.Unlock()
				return q.Checkpoint(ctx, r.ID, owner, snapshot)
			})
		}
		if err := g.Wait(); err != nil {
			return err
		}
		if stopped && failed == nil {
			canceled, err := x.canceled()
			if err != nil {
				return err
			}
			if canceled {
				x.skipRest()
				return q.Finish(ctx, r.ID, owner, runs.Canceled, x.summaryNow(), "The run was canceled; the steps done before stay done.", runs.FailCanceled)
			}
		}
		if failed != nil {
			x.skipRest()
			return q.Finish(ctx, r.ID, owner, runs.Failed, x.summaryNow(), failedKey+": "+failed.msg, failed.class)
		}
	}
	// A cancel asked while the last steps ran: the run ends canceled,
	// what it did listed (its resources), as a cancel between steps does.
	if canceled, err := x.canceled(); err != nil {
		return err
	} else if canceled {
		x.skipRest()
		return q.Finish(ctx, r.ID, owner, runs.Canceled, x.summaryNow(), "The run was canceled; the steps done before stay done.", runs.FailCanceled)
	}
	// Every step of the plan is done: a run never says it succeeded with
	// a step not run.
	for _, st := range p.Steps {
		if st.Action != plan.Noop && !done[st.Key] {
			return fmt.Errorf("step %s of the plan was not run; the run stays leased and resumes", st.Key)
		}
	}
	if err := q.SetStatus(ctx, r.ID, owner, runs.Finalizing); err != nil {
		return err
	}
	return q.Finish(ctx, r.ID, owner, runs.Succeeded, x.summaryNow(), "", "")
}

// drift compares, on a resumed run, the steps left of the plan made now
// with those the run recorded (its resources not done): the applied
// state may have changed while the run was paused (a server deleted or
// changed by hand, another process's step). When they differ the new
// plan is what runs, and it is recorded first: a plan.computed event
// saying so, the resources of the new plan's steps (pending), those no
// longer in it skipped, and the checkpoint's plan hash. The steps done
// stay done (the plan made now already counts with them).
func (x *exec) drift(p plan.Plan, done map[string]bool) error {
	ctx, q, r := x.ctx, x.e.q, x.run
	stored, err := q.Resources(ctx, r.TeamID, r.ID)
	if err != nil {
		return err
	}
	left := map[string]runs.Resource{}
	for _, res := range stored {
		if !done[res.Key] && (res.Status == runs.ResourcePending || res.Status == runs.ResourceRunning) {
			left[res.Key] = res
		}
	}
	var now []plan.Step
	for _, st := range p.Steps {
		if st.Action != plan.Noop && !done[st.Key] {
			now = append(now, st)
		}
	}
	same := len(now) == len(left)
	for _, st := range now {
		res, ok := left[st.Key]
		same = same && ok && res.Action == st.Action && bytes.Equal(compactJSON(res.Desired), compactJSON(st.Desired))
	}
	if same {
		return nil
	}
	var upsert []runs.Resource
	inPlan := map[string]bool{}
	for _, st := range now {
		inPlan[st.Key] = true
		upsert = append(upsert, runs.Resource{Key: st.Key, Type: st.Kind, Action: st.Action, Status: runs.ResourcePending,
			Desired: st.Desired, Before: st.Before})
	}
	for key, res := range left {
		if !inPlan[key] {
			res.Status, res.Error = runs.ResourceSkipped, "No longer in the plan: the applied state changed while the run was paused."
			upsert = append(upsert, res)
		}
	}
	if err := q.UpsertResources(ctx, r.ID, x.owner(), upsert); err != nil {
		return err
	}
	hash, _ := p.Hash()
	data, _ := json.Marshal(p.Summary)
	msg := fmt.Sprintf("The plan changed while the run was paused (the applied state changed): %d steps left, %d of them no longer in the plan. The steps done stay done.", len(now), len(upsert)-len(now))
	if err := q.AddEvent(ctx, r.ID, x.owner(), runs.Event{Type: runs.EventPlanComputed, Data: data, Message: msg}); err != nil {
		return err
	}
	x.log.Info("resumed run's plan changed", "steps_left", len(now), "plan_hash", hash)
	cp := runs.Checkpoint{Done: slices.Sorted(maps.Keys(done)), PlanHash: hash}
	if err := q.Checkpoint(ctx, r.ID, x.owner(), cp); err != nil {
		return err
	}
	x.run.Checkpoint = &cp
	return nil
}

// compactJSON is raw without insignificant spaces (nil if it is not JSON).
func compactJSON(raw json.RawMessage) []byte {
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return nil
	}
	return b.Bytes()
}

// summaryNow counts the run's resources as stored (the plan's actions
// and how their steps ended), for Finish.
func (x *exec) summaryNow() runs.Summary {
	stored, err := x.e.q.Resources(x.ctx, x.run.TeamID, x.run.ID)
	if err != nil {
		return runs.Summary{}
	}
	return summaryOf(stored)
}

func summaryOf(rs []runs.Resource) runs.Summary {
	var s runs.Summary
	for _, r := range rs {
		switch r.Action {
		case plan.Create:
			s.Create++
		case plan.Update:
			s.Update++
		case plan.Replace:
			s.Replace++
		case plan.Delete:
			s.Delete++
		case plan.Noop:
			s.Noop++
		}
		switch {
		case r.Status == runs.ResourceSucceeded && r.Action != plan.Noop:
			s.Succeeded++
		case r.Status == runs.ResourceFailed:
			s.Failed++
		}
	}
	return s
}

// skipRest marks every step not done and not failed as skipped.
func (x *exec) skipRest() {
	stored, err := x.e.q.Resources(x.ctx, x.run.TeamID, x.run.ID)
	if err != nil {
		return
	}
	var skip []runs.Resource
	for _, r := range stored {
		if r.Status == runs.ResourcePending {
			r.Status = runs.ResourceSkipped
			skip = append(skip, r)
		}
	}
	_ = x.e.q.UpsertResources(x.ctx, x.run.ID, x.owner(), skip)
}

// unsupported says why this layer cannot apply sp, or "".
func unsupported(sp *spec.Spec, databases bool, cat spec.Catalog) string {
	if len(sp.DBServices) > 0 && !databases {
		return "This Kiln process was started without database support: dbservices cannot be applied; nothing was changed."
	}
	for _, name := range slices.Sorted(maps.Keys(sp.Servers)) {
		s := sp.Servers[name]
		p, _ := cat.Get(s.Software)
		if s.State == spec.StateRunning && !p.EULAAccepted(s.Env) {
			return fmt.Sprintf("servers.%s.env.EULA: %s needs the Minecraft EULA accepted before it can run, and Kiln never accepts it for you: read it at %s, then set EULA: \"true\" in the server's env (or state: stopped). Nothing was changed.", name, s.Software, catalog.EULAURL)
		}
		for _, k := range install.ManagedProperties(p, s.Env) {
			if _, ok := s.Properties[k]; ok {
				return fmt.Sprintf("servers.%s.properties.%s: Kiln sets this key itself before every start (the listen address, or a setting of the software's env); set it through env, or leave it to Kiln. Nothing was changed.", name, k)
			}
		}
	}
	return ""
}

// step executes one step with its retries and records it. A *stepError
// is the step's failure (recorded); an error is the lease or the
// process ending (nothing more may be written).
func (x *exec) step(ctx context.Context, st plan.Step) (*stepError, error) {
	q, r, owner := x.e.q, x.run, x.owner()
	res := runs.Resource{Key: st.Key, Type: st.Kind, Action: st.Action, Desired: st.Desired, Before: st.Before,
		StartedAt: time.Now().UnixMilli()}
	var serr *stepError
	for attempt := 1; attempt <= maxAttempts; attempt++ {
		res.Status, res.Attempt = runs.ResourceRunning, attempt
		if err := q.UpsertResources(ctx, r.ID, owner, []runs.Resource{res}); err != nil {
			return nil, err
		}
		if attempt == 1 {
			if err := q.AddEvent(ctx, r.ID, owner, runs.Event{Type: runs.EventResourceStarted, Message: fmt.Sprintf("%s %s.", actionWord(st.Action), st.Key)}); err != nil {
				return nil, err
			}
		}
		var objectID string
		var applied json.RawMessage
		objectID, applied, serr = x.apply(ctx, st, &res)
		if ctx.Err() != nil {
			return nil, context.Cause(ctx)
		}
		if serr != nil && serr.detail != nil {
			x.log.WarnContext(ctx, "step attempt failed", "resource_key", st.Key, "attempt", attempt, "err", serr.detail)
		}
		if serr == nil {
			if st.Action == plan.Delete {
				if err := x.e.deploy.ForgetApplied(ctx, r.TeamID, r.ConfigurationID, st.Key); err != nil {
					serr = &stepError{class: runs.FailInternal, msg: err.Error(), transient: true}
				}
			} else if err := x.e.deploy.RecordApplied(ctx, r.TeamID, r.ConfigurationID, st.Key, objectID, applied, r.ID); err != nil {
				serr = &stepError{class: runs.FailInternal, msg: err.Error(), transient: true}
			}
		}
		if serr == nil {
			res.Status, res.After, res.CompletedAt, res.Error = runs.ResourceSucceeded, applied, time.Now().UnixMilli(), ""
			if err := q.UpsertResources(ctx, r.ID, owner, []runs.Resource{res}); err != nil {
				return nil, err
			}
			return nil, q.AddEvent(ctx, r.ID, owner, runs.Event{Type: runs.EventResourceSucceeded, Message: fmt.Sprintf("%s done.", st.Key)})
		}
		if !serr.transient || attempt == maxAttempts {
			break
		}
		res.Log = append(res.Log, fmt.Sprintf("attempt %d failed: %s", attempt, serr.msg))
		if err := q.AddEvent(ctx, r.ID, owner, runs.Event{Type: runs.EventResourceRetrying, Message: fmt.Sprintf("%s: %s; trying again.", st.Key, serr.msg)}); err != nil {
			return nil, err
		}
		select {
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		case <-time.After(x.e.opts.RetryBackoff << (attempt - 1)):
		}
	}
	res.Status, res.Error, res.CompletedAt = runs.ResourceFailed, serr.msg, time.Now().UnixMilli()
	if err := q.UpsertResources(ctx, r.ID, owner, []runs.Resource{res}); err != nil {
		return nil, err
	}
	if err := q.AddEvent(ctx, r.ID, owner, runs.Event{Type: runs.EventResourceFailed, Message: fmt.Sprintf("%s: %s", st.Key, serr.msg)}); err != nil {
		return nil, err
	}
	return serr, nil
}

// actionWord is "Creating", "Updating", … for an event's message.
func actionWord(a plan.Action) string {
	w := strings.TrimSuffix(string(a), "e")
	return strings.ToUpper(w[:1]) + w[1:] + "ing"
}

// apply does one attempt of a step; it returns the object's id and the
// state to record as applied (st.Desired, its references' digest that of
// the values written).
func (x *exec) apply(ctx context.Context, st plan.Step, res *runs.Resource) (string, json.RawMessage, *stepError) {
	if st.Kind == plan.DBService {
		id, serr := x.applyDatabase(ctx, st, res)
		return id, st.Desired, serr
	}
	switch st.Action {
	case plan.Replace, plan.Delete:
		if serr := x.destroy(ctx, st, res); serr != nil || st.Action == plan.Delete {
			return "", nil, serr
		}
		// A replace goes on as a create of the new software.
	case plan.Noop:
		return "", st.Desired, nil
	}
	var want spec.Server
	var proxy *spec.Proxy
	switch st.Kind {
	case plan.Server:
		if err := json.Unmarshal(st.Desired, &want); err != nil {
			return "", nil, fail(runs.FailInternal, "the desired state cannot be read: %v", err)
		}
	case plan.Proxy:
		var p spec.Proxy
		if err := json.Unmarshal(st.Desired, &p); err != nil {
			return "", nil, fail(runs.FailInternal, "the desired state cannot be read: %v", err)
		}
		want, proxy = p.Server, &p
	default:
		return "", nil, fail(runs.FailValidation, "%s resources are not supported yet", st.Kind)
	}
	r := x.run
	o := servers.Owner{ConfigurationID: r.ConfigurationID, ResourceKey: st.Key}
	mem, disk := int(want.Memory>>20), int(want.Disk>>20)
	port := 0 // a proxy's requested public port; 0 for any
	if proxy != nil {
		port = proxy.Port
	}
	// The variables with the secrets they reference (never recorded but
	// with the server, whose secret variables it seals).
	ew, serr := x.wire(ctx, spec.Server{Env: want.Env})
	if serr != nil {
		return "", nil, serr
	}
	env := ew.server.Env
	var sv servers.Server
	var err error
	var applied json.RawMessage // st.Desired with the digest of the values written
	written := false            // the files and properties were written
	switch st.Action {
	case plan.Create, plan.Replace:
		sv, _, err = x.e.servers.CreateOwned(ctx, r.TeamID, o, servers.NewServer{Name: st.Name, Software: want.Software,
			Version: want.Version, MemoryMB: mem, DiskMB: disk, CPUPercent: want.CPU, Env: env, Image: want.Image, Port: port,
			Node: want.Node})
	case plan.Update:
		var before spec.Server
		_ = json.Unmarshal(st.Before, &before)
		// Files and properties are written before the update, so the one
		// restart it makes reads them; an attachment made or undone
		// changes what the server gets in its environment at start.
		if cur, ferr := x.e.servers.FindOwned(ctx, r.TeamID, o); ferr == nil {
			if want.Node != "" && cur.Node != want.Node {
				// Naming the node a server already runs on changes
				// nothing; another one would move it, which needs a
				// transfer of its files (issue 32), not an update.
				return cur.ID, nil, fail(runs.FailValidation, "it runs on node %s: moving it to node %s needs a transfer, which this version does not do; name node %s or none",
					cur.Node, want.Node, cur.Node)
			}
			if cur.Status == servers.StatusInstalling {
				return cur.ID, nil, classify(servers.ErrInstalling)
			}
			w, serr := x.wire(ctx, want)
			if serr != nil {
				return cur.ID, nil, serr
			}
			if serr := x.writeConfig(ctx, cur, w, before); serr != nil {
				return cur.ID, nil, serr
			}
			if applied, serr = appliedOf(st.Desired, w); serr != nil {
				return cur.ID, nil, serr
			}
			written = true
		}
		restart := slices.ContainsFunc(st.Changes, func(c string) bool {
			return c == "databases" || c == "files" || c == "properties" || c == "references"
		})
		c := servers.Change{MemoryMB: &mem, DiskMB: &disk, CPUPercent: &want.CPU, Env: env, Restart: restart, Image: &want.Image, Port: &port}
		if c.Env == nil {
			c.Env = map[string]string{}
		}
		if want.Version != before.Version && want.Version != "latest" {
			c.Version = want.Version
		}
		sv, err = x.e.servers.UpdateOwned(ctx, r.TeamID, o, c)
		if errors.Is(err, servers.ErrNotFound) {
			// Deleted by hand meanwhile (it cannot be through the API):
			// make it again.
			sv, _, err = x.e.servers.CreateOwned(ctx, r.TeamID, o, servers.NewServer{Name: st.Name, Software: want.Software,
				Version: want.Version, MemoryMB: mem, DiskMB: disk, CPUPercent: want.CPU, Env: env, Image: want.Image, Port: port,
				Node: want.Node})
		}
	}
	if serr := classify(err); serr != nil {
		return "", nil, serr
	}
	res.Log = append(res.Log, fmt.Sprintf("server %s (%s)", sv.ID, sv.Address))
	if sv, err = x.waitInstalled(ctx, o); err != nil {
		return sv.ID, nil, classify(err)
	}
	if sv.InstallError != nil {
		return sv.ID, nil, fail(runs.FailInstall, "the install failed: %s", *sv.InstallError)
	}
	if !written {
		// Made now: its own address, and those of the servers made
		// before it, are known.
		w, serr := x.wire(ctx, want)
		if serr != nil {
			return sv.ID, nil, serr
		}
		if serr := x.writeConfig(ctx, sv, w, spec.Server{}); serr != nil {
			return sv.ID, nil, serr
		}
		if applied, serr = appliedOf(st.Desired, w); serr != nil {
			return sv.ID, nil, serr
		}
	}
	if proxy != nil {
		if serr := x.wireProxy(ctx, *proxy, sv); serr != nil {
			return sv.ID, nil, serr
		}
		if sv.Status == servers.StatusRunning {
			// A running proxy reads its configuration at start only.
			if err := x.e.servers.Power(ctx, r.TeamID, sv.ID, "restart"); err != nil {
				return sv.ID, nil, classify(err)
			}
			sv.Status = servers.StatusStarting
		}
	}
	return sv.ID, applied, x.converge(ctx, o, sv, want.State)
}

// destroy snapshots the server or proxy of a replace or delete step, then
// deletes it. A server already gone (a resumed step) is not snapshotted
// again; a failed snapshot fails the step with nothing destroyed.
func (x *exec) destroy(ctx context.Context, st plan.Step, res *runs.Resource) *stepError {
	r := x.run
	o := servers.Owner{ConfigurationID: r.ConfigurationID, ResourceKey: st.Key}
	sv, err := x.e.servers.FindOwned(ctx, r.TeamID, o)
	if errors.Is(err, servers.ErrNotFound) {
		return nil
	}
	if err != nil {
		return classify(err)
	}
	if x.e.opts.Snapshots == nil {
		return fail(runs.FailInternal, "it needs a snapshot of the server first, and this Kiln process has no snapshot storage; nothing was destroyed")
	}
	id, err := x.e.opts.Snapshots.Before(ctx, r.TeamID, sv.ID, fmt.Sprintf("before %s of %s by run %s", st.Action, st.Key, r.ID))
	if err != nil {
		if ctx.Err() != nil {
			return classify(context.Cause(ctx))
		}
		if le, ok := errors.AsType[*servers.TeamLimitError](err); ok {
			return fail(runs.FailCapacity, "the snapshot before the %s is refused: %v; nothing was destroyed", st.Action, le)
		}
		return fail(runs.FailInternal, "the snapshot before the %s failed (%v); nothing was destroyed", st.Action, err)
	}
	res.Log = append(res.Log, fmt.Sprintf("snapshot %s taken of server %s", id, sv.ID))
	if err := x.e.servers.DeleteOwned(ctx, r.TeamID, o); err != nil {
		return classify(err)
	}
	res.Log = append(res.Log, fmt.Sprintf("server %s deleted", sv.ID))
	return nil
}

// classify turns a domain error into a step failure.
func classify(err error) *stepError {
	if err == nil {
		return nil
	}
	if ve, ok := errors.AsType[*validate.Error](err); ok {
		return fail(runs.FailValidation, "%s", ve.Error())
	}
	if le, ok := errors.AsType[*servers.TeamLimitError](err); ok {
		return fail(runs.FailCapacity, "%s", le.Error())
	}
	if oe, ok := errors.AsType[*servers.OtherNodeError](err); ok {
		return fail(runs.FailInternal, "%v", oe)
	}
	if pe, ok := errors.AsType[*servers.PortTakenError](err); ok {
		return fail(runs.FailCapacity, "%v", pe)
	}
	if ne, ok := errors.AsType[*nodes.NoCapacityError](err); ok {
		return fail(runs.FailCapacity, "%v", ne)
	}
	if ue, ok := errors.AsType[*nodes.UnknownNodeError](err); ok {
		return fail(runs.FailValidation, "%v", ue)
	}
	if ue, ok := errors.AsType[*nodes.UnavailableError](err); ok {
		// The agent of the server's node is away: retried as transient,
		// then the run fails naming the node (the transport's error is
		// the log's).
		return &stepError{class: runs.FailDependency, msg: fmt.Sprintf("node %q is unavailable: %s", ue.Node, ue.Reason), transient: true, detail: err}
	}
	if he, ok := errors.AsType[*dbservice.HostError](err); ok {
		// The team reads the sentence; the driver's message (the admin
		// role, the maintenance database, the address) is the log's.
		return &stepError{class: runs.FailDependency, msg: he.Public(), transient: true, detail: err}
	}
	switch {
	case errors.Is(err, quota.ErrQuota), quota.IsDiskFull(err):
		return fail(runs.FailCapacity, "%v", err)
	case errors.Is(err, servers.ErrInstalling):
		return &stepError{class: runs.FailInternal, msg: "the server is still installing", transient: true}
	case errors.Is(err, servers.ErrRestoring):
		return &stepError{class: runs.FailInternal, msg: "a snapshot is being restored into the server", transient: true}
	case errors.Is(err, errHealth):
		return fail(runs.FailHealthTimeout, "%v", err)
	case errors.Is(err, errCrashed):
		return fail(runs.FailRuntime, "%v", err)
	case errors.Is(err, servers.ErrInstallFailed):
		return fail(runs.FailInstall, "%v", err)
	case errors.Is(err, servers.ErrEULANotAccepted):
		return fail(runs.FailValidation, "%v", err)
	}
	if pe, ok := errors.AsType[publicError](err); ok {
		// A runtime's, an object store's: a sentence for the team, the
		// detail (engine socket, endpoint, host paths) for the log.
		return &stepError{class: runs.FailInternal, msg: pe.Public(), transient: true, detail: err}
	}
	// Anything else may name what a team must not read (a host path, a
	// query, a driver's message): the team reads that it failed, the log
	// has the error.
	return &stepError{class: runs.FailInternal, msg: "Kiln failed to do this step (an internal error; the operator's log has the detail)", transient: true, detail: err}
}

// publicError is an error that carries a sentence a team may read
// (runtime.Error, blob.Error) besides its detail.
type publicError interface {
	error
	Public() string
}

var (
	errHealth  = errors.New("the server did not answer a status ping in time")
	errCrashed = errors.New("the server crashed while starting")
)

// waitInstalled waits until the server's install has ended.
func (x *exec) waitInstalled(ctx context.Context, o servers.Owner) (servers.Server, error) {
	return x.waitFor(ctx, o, x.e.opts.InstallTimeout, func(sv servers.Server) (bool, error) {
		return sv.Status != servers.StatusInstalling, nil
	}, errors.New("the install did not end in time"))
}

// waitFor polls the owned server until cond, or timeout (then errTimeout).
func (x *exec) waitFor(ctx context.Context, o servers.Owner, timeout time.Duration, cond func(servers.Server) (bool, error), errTimeout error) (servers.Server, error) {
	deadline := time.Now().Add(timeout)
	for {
		sv, err := x.e.servers.FindOwned(ctx, x.run.TeamID, o)
		if err != nil {
			return sv, err
		}
		ok, err := cond(sv)
		if ok || err != nil {
			return sv, err
		}
		if time.Now().After(deadline) {
			return sv, errTimeout
		}
		select {
		case <-ctx.Done():
			return sv, context.Cause(ctx)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// writeConfig writes the spec's files and properties into the server's
// root, through its disk ledger: the files with their references'
// values (w: 0600 those holding a password), the properties into
// server.properties (keys set, keys the previous spec had and this one
// has not removed, every other line kept).
func (x *exec) writeConfig(ctx context.Context, sv servers.Server, w wiring, before spec.Server) *stepError {
	want := w.server
	var removed []string
	for k := range before.Properties {
		if _, ok := want.Properties[k]; !ok {
			removed = append(removed, k)
		}
	}
	if len(want.Files) == 0 && len(want.Properties) == 0 && len(removed) == 0 {
		return nil
	}
	a, err := x.e.servers.Access(ctx, x.run.TeamID, sv.ID, true)
	if err != nil {
		return classify(err)
	}
	err = files.Writing(a, func(r *files.Root, res *quota.Reservation) error {
		for _, f := range want.Files {
			write := r.WriteFile
			if w.private[f.Path] {
				write = r.WriteFilePrivate
			}
			if _, err := write(f.Path, strings.NewReader(f.Content), res); err != nil {
				return fmt.Errorf("write %s: %w", f.Path, err)
			}
		}
		if len(want.Properties) == 0 && len(removed) == 0 {
			return nil
		}
		old, err := r.ReadFile("server.properties", 1<<20)
		if err != nil && !errors.Is(err, files.ErrNotFound) {
			return fmt.Errorf("read server.properties: %w", err)
		}
		edited := install.EditProperties(old, want.Properties, removed)
		if _, err := r.WriteFile("server.properties", bytes.NewReader(edited), res); err != nil {
			return fmt.Errorf("write server.properties: %w", err)
		}
		return nil
	})
	return classify(err)
}

// converge brings the server to the spec's state and waits for it.
func (x *exec) converge(ctx context.Context, o servers.Owner, sv servers.Server, state string) *stepError {
	t := x.run.TeamID
	if state == spec.StateStopped {
		if sv.Status == servers.StatusOffline || sv.Status == servers.StatusCrashed {
			return nil
		}
		if err := x.e.servers.Power(ctx, t, sv.ID, "stop"); err != nil {
			return classify(err)
		}
		_, err := x.waitFor(ctx, o, x.e.opts.HealthTimeout, func(s servers.Server) (bool, error) {
			return s.Status == servers.StatusOffline || s.Status == servers.StatusCrashed, nil
		}, errors.New("the server did not stop in time"))
		return classify(err)
	}
	if sv.Status != servers.StatusRunning && sv.Status != servers.StatusStarting {
		if err := x.e.servers.Power(ctx, t, sv.ID, "start"); err != nil {
			return classify(err)
		}
	}
	_, err := x.waitFor(ctx, o, x.e.opts.HealthTimeout, func(s servers.Server) (bool, error) {
		if s.Status == servers.StatusCrashed {
			return false, errCrashed
		}
		return s.Status == servers.StatusRunning, nil
	}, errHealth)
	return classify(err)
}
