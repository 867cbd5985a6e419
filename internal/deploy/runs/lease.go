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
)

// The calls below are the executor's: each takes the owner that claimed
// the run and fails with ErrLeaseLost, changing nothing, unless that owner
// still holds it and it is not final. An expired lease nobody took over is
// still held: its owner may renew it and write on.

// heldSQL ends the WHERE of every write by an owner, after its
// lease_owner test: a final run is held by nobody.
const heldSQL = ` AND status IN ` + startedSQL

// hold checks that owner holds the run and keeps it held until tx ends:
// on PostgreSQL the UPDATE locks the row, so a takeover waits for this
// write to commit and then sees the run as written; on SQLite the writer
// transaction excludes everything else. It returns the run's stage.
func hold(ctx context.Context, tx *sql.Tx, runID, owner string, now int64) (Status, error) {
	var stage sql.NullString
	err := tx.QueryRowContext(ctx, `UPDATE runs SET updated_at = $1 WHERE id = $2 AND lease_owner = $3`+heldSQL+` RETURNING stage`,
		now, runID, owner).Scan(&stage)
	if errors.Is(err, sql.ErrNoRows) {
		return "", ErrLeaseLost
	}
	if err != nil {
		return "", fmt.Errorf("hold run: %w", err)
	}
	return Status(stage.String), nil
}

// Renew extends owner's lease of a run to now + leaseFor and reports
// whether a cancel was requested (the executor renews between steps, and
// stops after the current one when it was). Errors: ErrLeaseLost.
func (q *Queue) Renew(ctx context.Context, runID, owner string, leaseFor time.Duration) (cancelRequested bool, err error) {
	if leaseFor < time.Millisecond {
		return false, fmt.Errorf("renew run: lease %v", leaseFor)
	}
	now := q.nowMS()
	err = q.db.Write().QueryRowContext(ctx, `UPDATE runs SET lease_until = $1, updated_at = $2
		WHERE id = $3 AND lease_owner = $4`+heldSQL+` RETURNING cancel_requested`,
		now+leaseFor.Milliseconds(), now, runID, owner).Scan(&cancelRequested)
	if errors.Is(err, sql.ErrNoRows) {
		return false, ErrLeaseLost
	}
	if err != nil {
		return false, fmt.Errorf("renew run: %w", err)
	}
	return cancelRequested, nil
}

// SetStatus moves a held run to planning, executing or finalizing (its
// stage follows). Final statuses are Finish's. Errors: ErrLeaseLost.
func (q *Queue) SetStatus(ctx context.Context, runID, owner string, st Status) error {
	if !st.Started() {
		return fmt.Errorf("set run status: %q is not a status of a started run", st)
	}
	now := q.nowMS()
	res, err := q.db.Write().ExecContext(ctx, `UPDATE runs SET status = $1, stage = $1, updated_at = $2
		WHERE id = $3 AND lease_owner = $4`+heldSQL, string(st), now, runID, owner)
	return affected(res, err, "set run status")
}

// Checkpoint stores what a held run has done. Errors: ErrLeaseLost.
func (q *Queue) Checkpoint(ctx context.Context, runID, owner string, cp Checkpoint) error {
	if cp.Done == nil {
		cp.Done = []string{}
	}
	b, err := json.Marshal(cp)
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	res, err := q.db.Write().ExecContext(ctx, `UPDATE runs SET checkpoint = $1, updated_at = $2
		WHERE id = $3 AND lease_owner = $4`+heldSQL, string(b), q.nowMS(), runID, owner)
	return affected(res, err, "checkpoint")
}

// affected turns an UPDATE of a held run that matched nothing into
// ErrLeaseLost.
func affected(res sql.Result, err error, doing string) error {
	if err != nil {
		return fmt.Errorf("%s: %w", doing, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("%s: %w", doing, err)
	}
	if n == 0 {
		return ErrLeaseLost
	}
	return nil
}

// AddEvent appends e to a held run's history; Seq, Stage (the run's) and
// CreatedAt are set here. Errors: ErrLeaseLost.
func (q *Queue) AddEvent(ctx context.Context, runID, owner string, e Event) error {
	if e.Type == "" {
		return errors.New("add event: no type")
	}
	var data any
	if e.Data != nil {
		if !json.Valid(e.Data) {
			return fmt.Errorf("add event %s: data is not JSON", e.Type)
		}
		data = e.Data
	}
	now := q.nowMS()
	return q.db.Tx(ctx, func(tx *sql.Tx) error {
		stage, err := hold(ctx, tx, runID, owner, now)
		if err != nil {
			return err
		}
		return addEvent(ctx, tx, runID, e.Type, stage, e.Message, data, now)
	})
}

var actions = []plan.Action{plan.Create, plan.Update, plan.Replace, plan.Delete, plan.Noop}

// UpsertResources stores resources of a held run, each replacing the row
// of its key; a new key is appended to the run's plan order. The
// executor stores the whole plan, pending, before it executes anything,
// then each resource as it changes (UpdatedAt is set here). Errors:
// ErrLeaseLost.
func (q *Queue) UpsertResources(ctx context.Context, runID, owner string, rs []Resource) error {
	for _, r := range rs {
		kind, _, err := plan.ParseKey(r.Key)
		switch {
		case err != nil:
			return fmt.Errorf("upsert resource: %w", err)
		case kind != r.Type:
			return fmt.Errorf("upsert resource %s: type %q", r.Key, r.Type)
		case !slices.Contains(actions, r.Action):
			return fmt.Errorf("upsert resource %s: action %q", r.Key, r.Action)
		case !slices.Contains(resourceStatuses, r.Status):
			return fmt.Errorf("upsert resource %s: status %q", r.Key, r.Status)
		}
		for _, j := range []json.RawMessage{r.Desired, r.Before, r.After} {
			if j != nil && !json.Valid(j) {
				return fmt.Errorf("upsert resource %s: state is not JSON", r.Key)
			}
		}
	}
	now := q.nowMS()
	return q.db.Tx(ctx, func(tx *sql.Tx) error {
		if _, err := hold(ctx, tx, runID, owner, now); err != nil {
			return err
		}
		for _, r := range rs {
			log := r.Log
			if log == nil {
				log = []string{}
			}
			lines, err := json.Marshal(log)
			if err != nil {
				return fmt.Errorf("upsert resource %s: %w", r.Key, err)
			}
			_, err = tx.ExecContext(ctx, `INSERT INTO run_resources
				(run_id, resource_key, position, resource_type, action, status, attempt,
				 desired, before_state, after_state, log, error, started_at, completed_at, updated_at)
				VALUES ($1, $2, (SELECT COALESCE(MAX(position), -1) + 1 FROM run_resources WHERE run_id = $1),
				 $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)
				ON CONFLICT (run_id, resource_key) DO UPDATE SET
				 resource_type = excluded.resource_type, action = excluded.action, status = excluded.status,
				 attempt = excluded.attempt, desired = excluded.desired, before_state = excluded.before_state,
				 after_state = excluded.after_state, log = excluded.log, error = excluded.error,
				 started_at = excluded.started_at, completed_at = excluded.completed_at, updated_at = excluded.updated_at`,
				runID, r.Key, string(r.Type), string(r.Action), string(r.Status), r.Attempt,
				nullJSON(r.Desired), nullJSON(r.Before), nullJSON(r.After), string(lines), nullString(r.Error),
				nullTime(r.StartedAt), nullTime(r.CompletedAt), now)
			if err != nil {
				return fmt.Errorf("upsert resource %s: %w", r.Key, err)
			}
		}
		return nil
	})
}

// Finish ends a held run: succeeded (no message, no class), failed (msg
// one human sentence, class required) or canceled (class canceled; msg
// defaults to a sentence saying so). It stores summary, completed_at, no
// stage and no lease (lease_owner stays, naming who finished it), and
// adds run.succeeded, run.failed or run.canceled. Errors: ErrLeaseLost.
func (q *Queue) Finish(ctx context.Context, runID, owner string, st Status, summary Summary, msg string, class FailureClass) error {
	typ := map[Status]EventType{Succeeded: EventSucceeded, Failed: EventFailed, Canceled: EventCanceled}[st]
	switch st {
	case Succeeded:
		if msg != "" || class != "" {
			return errors.New("finish run: a succeeded run has no error")
		}
	case Failed:
		if msg == "" || class == "" || class == FailCanceled || !slices.Contains(failureClasses, class) {
			return fmt.Errorf("finish run: failed needs an error and a failure class, got %q", class)
		}
	case Canceled:
		if class != "" && class != FailCanceled {
			return fmt.Errorf("finish run: canceled with failure class %q", class)
		}
		class = FailCanceled
		if msg == "" {
			msg = "The run was canceled."
		}
	default:
		return fmt.Errorf("finish run: %q is not a final status", st)
	}
	sum, err := json.Marshal(summary)
	if err != nil {
		return fmt.Errorf("finish run: %w", err)
	}
	now := q.nowMS()
	return q.db.Tx(ctx, func(tx *sql.Tx) error {
		stage, err := hold(ctx, tx, runID, owner, now)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `UPDATE runs SET status = $1, stage = NULL, lease_until = NULL, summary = $2,
			error = $3, failure_class = $4, completed_at = $5, updated_at = $5 WHERE id = $6`,
			string(st), string(sum), nullString(msg), nullString(string(class)), now, runID); err != nil {
			return fmt.Errorf("finish run: %w", err)
		}
		var data any
		if class != "" {
			data = map[string]string{"failure_class": string(class)}
		}
		text := msg
		if st == Succeeded {
			text = "Succeeded."
		}
		return addEvent(ctx, tx, runID, typ, stage, text, data, now)
	})
}
