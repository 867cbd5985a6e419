package runs

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/kilnhq/kiln/internal/deploy/plan"
	"github.com/kilnhq/kiln/internal/store"
	"github.com/kilnhq/kiln/internal/validate"
)

// Errors of the queue; the API maps each to one code.
var (
	// ErrNotFound: no such run in the team (absent or another team's).
	ErrNotFound = errors.New("run not found")
	// ErrConfigurationNotFound: Enqueue's version is not a version of the
	// team's configuration (or either was deleted meanwhile).
	ErrConfigurationNotFound = errors.New("configuration or version not found")
	// ErrIdempotencyKeyReused: the team used the key in the last 24 h to
	// apply another configuration.
	ErrIdempotencyKeyReused = errors.New("the idempotency key was already used to apply another configuration")
	// ErrLeaseLost: the caller no longer holds the run: another instance
	// took it over after the lease expired, or it has finished.
	ErrLeaseLost = errors.New("the run's lease is held by another instance or the run has finished")
	// ErrFinished: a cancel of a run that succeeded or failed.
	ErrFinished = errors.New("the run has already finished")
)

// Limits (api.md §2).
const (
	MaxIdempotencyKey = 200 // characters
	MaxPage           = 200 // runs in one List answer
	DefaultPage       = 50
	// KeyLifetime is how long an idempotency key names its run.
	KeyLifetime = 24 * time.Hour
)

// Status is where a run is in its lifecycle (deployment-spec.md §5).
type Status string

// Statuses: queued → planning → executing → finalizing → succeeded |
// failed; canceled from any non-final status.
const (
	Queued     Status = "queued"
	Planning   Status = "planning"
	Executing  Status = "executing"
	Finalizing Status = "finalizing"
	Succeeded  Status = "succeeded"
	Failed     Status = "failed"
	Canceled   Status = "canceled"
)

var statuses = []Status{Queued, Planning, Executing, Finalizing, Succeeded, Failed, Canceled}

// Started reports whether s is a status of a run that is executing: one
// that holds its configuration (planning, executing, finalizing). It is
// also the run's stage.
func (s Status) Started() bool { return s == Planning || s == Executing || s == Finalizing }

// Final reports whether s is an end: succeeded, failed or canceled.
func (s Status) Final() bool { return s == Succeeded || s == Failed || s == Canceled }

// SQL lists of the statuses above, for queries.
const (
	startedSQL = `('planning', 'executing', 'finalizing')`
	openSQL    = `('queued', 'planning', 'executing', 'finalizing')`
)

// FailureClass says why a run did not succeed (deployment-spec.md §5).
type FailureClass string

// Failure classes.
const (
	FailValidation    FailureClass = "validation"
	FailCapacity      FailureClass = "capacity" // no node has room
	FailInstall       FailureClass = "install"  // download or checksum failed
	FailRuntime       FailureClass = "runtime"  // the container or process failed
	FailHealthTimeout FailureClass = "health_timeout"
	FailDependency    FailureClass = "dependency" // a database host unreachable
	FailCanceled      FailureClass = "canceled"
	FailInternal      FailureClass = "internal"
)

var failureClasses = []FailureClass{FailValidation, FailCapacity, FailInstall, FailRuntime,
	FailHealthTimeout, FailDependency, FailCanceled, FailInternal}

// ResourceStatus is where one resource of a run's plan is.
type ResourceStatus string

// Resource statuses.
const (
	ResourcePending   ResourceStatus = "pending"
	ResourceRunning   ResourceStatus = "running"
	ResourceSucceeded ResourceStatus = "succeeded"
	ResourceFailed    ResourceStatus = "failed"
	ResourceSkipped   ResourceStatus = "skipped"
)

var resourceStatuses = []ResourceStatus{ResourcePending, ResourceRunning, ResourceSucceeded, ResourceFailed, ResourceSkipped}

// EventType names an entry of a run's events.
type EventType string

// Event types: those of deployment-spec.md §5, and run.cancel_requested.
const (
	EventQueued            EventType = "run.queued"
	EventStarted           EventType = "run.started"
	EventPlanComputed      EventType = "plan.computed"
	EventResourceStarted   EventType = "resource.started"
	EventResourceRetrying  EventType = "resource.retrying"
	EventResourceSucceeded EventType = "resource.succeeded"
	EventResourceFailed    EventType = "resource.failed"
	EventResumed           EventType = "run.resumed"
	EventCancelRequested   EventType = "run.cancel_requested"
	EventSucceeded         EventType = "run.succeeded"
	EventFailed            EventType = "run.failed"
	EventCanceled          EventType = "run.canceled"
)

// Checkpoint is what a run has done so far: the keys whose step finished
// and the hash of the plan they belong to. A run resumed under another
// plan hash must not trust Done.
type Checkpoint struct {
	Done     []string `json:"done"`
	PlanHash string   `json:"plan_hash"`
}

// Summary counts a finished run's actions and results.
type Summary struct {
	Create    int `json:"create"`
	Update    int `json:"update"`
	Replace   int `json:"replace"`
	Delete    int `json:"delete"`
	Noop      int `json:"noop"`
	Succeeded int `json:"succeeded"`
	Failed    int `json:"failed"`
}

// Run is one apply of a configuration version. Zero values stand for
// what does not exist yet (null in the API): an empty string, a zero
// time, a nil pointer.
type Run struct {
	ID              string
	TeamID          string
	ConfigurationID string
	VersionID       string
	// Of the version (immutable, read with the run).
	VersionNumber int
	SpecHash      string
	ResourceCount int

	Status          Status
	Stage           Status // the status while started, else ""
	QueuePosition   int    // runs of the configuration ahead of it; 0 once started
	IdempotencyKey  string
	CreatedBy       string
	LeaseOwner      string // the instance holding the run, or that last held it
	LeaseUntil      int64  // Unix ms; 0 when not leased
	CancelRequested bool
	Checkpoint      *Checkpoint
	Summary         *Summary
	Error           string
	FailureClass    FailureClass
	CreatedAt       int64
	StartedAt       int64
	CompletedAt     int64
	UpdatedAt       int64
}

// Resource is one step of a run's plan and how far it got.
type Resource struct {
	Key     string // <kind>/<name>
	Type    plan.Kind
	Action  plan.Action
	Status  ResourceStatus
	Attempt int
	// Desired, Before and After are JSON (nil for none): what the spec
	// wants, what was applied before, what this run applied.
	Desired, Before, After json.RawMessage
	Log                    []string
	Error                  string
	StartedAt              int64
	CompletedAt            int64
	UpdatedAt              int64
}

// Event is one entry of a run's history, oldest first by Seq.
type Event struct {
	Seq       int
	Type      EventType
	Stage     Status // the run's stage when it happened, or ""
	Message   string
	Data      json.RawMessage // JSON object or nil
	CreatedAt int64
}

// Options configure a Queue; a zero Now is time.Now.
type Options struct {
	// Now is the clock of leases, key lifetimes and timestamps; tests
	// move it instead of sleeping.
	Now func() time.Time
}

// Queue keeps runs, their resources and events in the database.
type Queue struct {
	db  *store.DB
	now func() time.Time
}

// New returns a Queue on db.
func New(db *store.DB, opts Options) *Queue {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Queue{db: db, now: opts.Now}
}

func (q *Queue) nowMS() int64 { return q.now().UnixMilli() }

// positionSQL counts the runs of r's configuration ahead of a queued r:
// the started ones and the queued ones enqueued before it.
const positionSQL = `CASE WHEN r.status = 'queued' THEN (SELECT count(*) FROM runs o
	WHERE o.configuration_id = r.configuration_id AND o.id <> r.id
	AND (o.status IN ` + startedSQL + ` OR (o.status = 'queued' AND o.seq < r.seq))) ELSE 0 END`

const runColumns = `r.id, r.team_id, r.configuration_id, r.version_id, v.version_number, v.spec_hash, v.resource_count,
	r.status, r.stage, r.idempotency_key, r.created_by, r.lease_owner, r.lease_until, r.cancel_requested,
	r.checkpoint, r.summary, r.error, r.failure_class, r.created_at, r.started_at, r.completed_at, r.updated_at, ` + positionSQL

const runFrom = ` FROM runs r JOIN configuration_versions v ON v.id = r.version_id`

type scanner interface{ Scan(dest ...any) error }

func scanRun(sc scanner) (Run, error) {
	var r Run
	var stage, key, owner, checkpoint, summary, msg, class sql.NullString
	var until, started, completed sql.NullInt64
	err := sc.Scan(&r.ID, &r.TeamID, &r.ConfigurationID, &r.VersionID, &r.VersionNumber, &r.SpecHash, &r.ResourceCount,
		&r.Status, &stage, &key, &r.CreatedBy, &owner, &until, &r.CancelRequested,
		&checkpoint, &summary, &msg, &class, &r.CreatedAt, &started, &completed, &r.UpdatedAt, &r.QueuePosition)
	if err != nil {
		return Run{}, err
	}
	r.Stage, r.IdempotencyKey, r.LeaseOwner = Status(stage.String), key.String, owner.String
	r.Error, r.FailureClass = msg.String, FailureClass(class.String)
	r.LeaseUntil, r.StartedAt, r.CompletedAt = until.Int64, started.Int64, completed.Int64
	if checkpoint.Valid {
		r.Checkpoint = new(Checkpoint)
		if err := json.Unmarshal([]byte(checkpoint.String), r.Checkpoint); err != nil {
			return Run{}, fmt.Errorf("run %s: checkpoint: %w", r.ID, err)
		}
	}
	if summary.Valid {
		r.Summary = new(Summary)
		if err := json.Unmarshal([]byte(summary.String), r.Summary); err != nil {
			return Run{}, fmt.Errorf("run %s: summary: %w", r.ID, err)
		}
	}
	return r, nil
}

type querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// Get returns one of the team's runs; ErrNotFound for any other (absent,
// or another team's).
func (q *Queue) Get(ctx context.Context, teamID, runID string) (Run, error) {
	return get(ctx, q.db.Read(), teamID, runID)
}

func get(ctx context.Context, db querier, teamID, runID string) (Run, error) {
	r, err := scanRun(db.QueryRowContext(ctx, `SELECT `+runColumns+runFrom+` WHERE r.id = $1 AND r.team_id = $2`, runID, teamID))
	if errors.Is(err, sql.ErrNoRows) {
		return Run{}, ErrNotFound
	}
	if err != nil {
		return Run{}, fmt.Errorf("get run: %w", err)
	}
	return r, nil
}

// QueuePosition returns the number of runs of the same configuration
// ahead of one of the team's runs: started ones and those queued before
// it; 0 once it has started. Errors: ErrNotFound.
func (q *Queue) QueuePosition(ctx context.Context, teamID, runID string) (int, error) {
	r, err := q.Get(ctx, teamID, runID)
	return r.QueuePosition, err
}

// List returns the team's runs, newest first: of one configuration unless
// configurationID is "", in one status unless status is "", at most limit
// (1–MaxPage, 0 for DefaultPage). Errors: *validate.Error (status, limit).
func (q *Queue) List(ctx context.Context, teamID, configurationID string, status Status, limit int) ([]Run, error) {
	var c validate.Collector
	if limit == 0 {
		limit = DefaultPage
	}
	if limit < 1 || limit > MaxPage {
		c.Add("limit", "must be between 1 and %d", MaxPage)
	}
	if status != "" && !slices.Contains(statuses, status) {
		c.Add("status", "must be one of queued, planning, executing, finalizing, succeeded, failed, canceled")
	}
	if err := c.Err(); err != nil {
		return nil, err
	}
	rows, err := q.db.Read().QueryContext(ctx, `SELECT `+runColumns+runFrom+`
		WHERE r.team_id = $1 AND ($2 = '' OR r.configuration_id = $2) AND ($3 = '' OR r.status = $3)
		ORDER BY r.seq DESC LIMIT $4`, teamID, configurationID, string(status), limit)
	if err != nil {
		return nil, fmt.Errorf("list runs: %w", err)
	}
	defer rows.Close()
	out := []Run{}
	for rows.Next() {
		r, err := scanRun(rows)
		if err != nil {
			return nil, fmt.Errorf("list runs: %w", err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list runs: %w", err)
	}
	return out, nil
}

// Resources returns the plan of one of the team's runs, in plan order
// (empty before it is planned). Errors: ErrNotFound.
func (q *Queue) Resources(ctx context.Context, teamID, runID string) ([]Resource, error) {
	if _, err := q.Get(ctx, teamID, runID); err != nil {
		return nil, err
	}
	rows, err := q.db.Read().QueryContext(ctx, `SELECT resource_key, resource_type, action, status, attempt,
		desired, before_state, after_state, log, error, started_at, completed_at, updated_at
		FROM run_resources WHERE run_id = $1 ORDER BY position`, runID)
	if err != nil {
		return nil, fmt.Errorf("list run resources: %w", err)
	}
	defer rows.Close()
	out := []Resource{}
	for rows.Next() {
		var r Resource
		var desired, before, after, msg sql.NullString
		var log string
		var started, completed sql.NullInt64
		if err := rows.Scan(&r.Key, &r.Type, &r.Action, &r.Status, &r.Attempt, &desired, &before, &after,
			&log, &msg, &started, &completed, &r.UpdatedAt); err != nil {
			return nil, fmt.Errorf("list run resources: %w", err)
		}
		r.Desired, r.Before, r.After = rawJSON(desired), rawJSON(before), rawJSON(after)
		r.Error, r.StartedAt, r.CompletedAt = msg.String, started.Int64, completed.Int64
		if err := json.Unmarshal([]byte(log), &r.Log); err != nil {
			return nil, fmt.Errorf("run %s resource %s: log: %w", runID, r.Key, err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list run resources: %w", err)
	}
	return out, nil
}

// Events returns the history of one of the team's runs, oldest first.
// Errors: ErrNotFound.
func (q *Queue) Events(ctx context.Context, teamID, runID string) ([]Event, error) {
	if _, err := q.Get(ctx, teamID, runID); err != nil {
		return nil, err
	}
	rows, err := q.db.Read().QueryContext(ctx, `SELECT seq, event_type, stage, message, data, created_at
		FROM run_events WHERE run_id = $1 ORDER BY seq`, runID)
	if err != nil {
		return nil, fmt.Errorf("list run events: %w", err)
	}
	defer rows.Close()
	out := []Event{}
	for rows.Next() {
		var e Event
		var stage, data sql.NullString
		if err := rows.Scan(&e.Seq, &e.Type, &stage, &e.Message, &data, &e.CreatedAt); err != nil {
			return nil, fmt.Errorf("list run events: %w", err)
		}
		e.Stage, e.Data = Status(stage.String), rawJSON(data)
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list run events: %w", err)
	}
	return out, nil
}

func rawJSON(s sql.NullString) json.RawMessage {
	if !s.Valid {
		return nil
	}
	return json.RawMessage(s.String)
}

// nullJSON is a JSON value as a column value: NULL for nil.
func nullJSON(raw json.RawMessage) any {
	if raw == nil {
		return nil
	}
	return string(raw)
}

// nullString is "" as NULL.
func nullString(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// nullTime is 0 as NULL.
func nullTime(ms int64) any {
	if ms == 0 {
		return nil
	}
	return ms
}
