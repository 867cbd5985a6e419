package runs

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/kilnhq/kiln/internal/ids"
	"github.com/kilnhq/kiln/internal/store"
	"github.com/kilnhq/kiln/internal/validate"
)

// canceledQueued is the error sentence of a run canceled before it started.
const canceledQueued = "The run was canceled before it started."

// Enqueue queues a run of version versionID of the team's configuration
// configurationID, by createdBy (auth.Principal.Actor), with a run.queued
// event, and returns it with created true. When the team used
// idempotencyKey ("" for none) less than KeyLifetime ago to apply the
// same configuration, it creates nothing and returns that key's run with
// created false. Errors: *validate.Error (idempotency_key),
// ErrConfigurationNotFound, ErrIdempotencyKeyReused.
func (q *Queue) Enqueue(ctx context.Context, teamID, configurationID, versionID, createdBy, idempotencyKey string) (r Run, created bool, err error) {
	if !utf8.ValidString(idempotencyKey) || utf8.RuneCountInString(idempotencyKey) > MaxIdempotencyKey {
		return Run{}, false, validate.Errorf("idempotency_key", "must be 1 to %d characters of UTF-8 text", MaxIdempotencyKey)
	}
	// A replay is recognised by the key's primary key refusing the
	// insert, never by looking first: two applies racing would both look,
	// both find nothing and both create a run. The refused transaction
	// rolls back whole; the loop covers the key's run being deleted (or
	// the key expiring) between that refusal and the read.
	for range 3 {
		r, err := q.insert(ctx, teamID, configurationID, versionID, createdBy, idempotencyKey)
		if err == nil {
			return r, true, nil
		}
		if idempotencyKey == "" || !store.IsUniqueViolation(err) {
			return Run{}, false, err
		}
		r, found, err := q.byKey(ctx, teamID, configurationID, idempotencyKey)
		if err != nil || found {
			return r, false, err
		}
	}
	return Run{}, false, errors.New("enqueue run: the idempotency key's run kept disappearing")
}

// insert creates a queued run and, with a key, the key's row.
func (q *Queue) insert(ctx context.Context, teamID, configurationID, versionID, createdBy, key string) (Run, error) {
	var r Run
	err := q.db.Tx(ctx, func(tx *sql.Tx) (err error) {
		r, err = q.EnqueueTx(ctx, tx, teamID, configurationID, versionID, createdBy, key)
		return err
	})
	return r, err
}

// EnqueueTx queues a run as Enqueue does, in the caller's transaction tx
// on the queue's database, so that what the caller writes there (a pushed
// version: deploy.Service.Apply) and the run commit together or not at
// all. A replay of key is not recognised here: the key's row refuses the
// insert (store.IsUniqueViolation), which aborts tx; the caller rolls it
// back and reads the key's run (Replay). Errors: *validate.Error
// (idempotency_key), ErrConfigurationNotFound.
func (q *Queue) EnqueueTx(ctx context.Context, tx *sql.Tx, teamID, configurationID, versionID, createdBy, key string) (Run, error) {
	if !utf8.ValidString(key) || utf8.RuneCountInString(key) > MaxIdempotencyKey {
		return Run{}, validate.Errorf("idempotency_key", "must be 1 to %d characters of UTF-8 text", MaxIdempotencyKey)
	}
	now := q.nowMS()
	id := ids.New("run")
	if key != "" {
		// An expired key counts as absent: make room for it here, in the
		// transaction that reuses it.
		if _, err := tx.ExecContext(ctx, `DELETE FROM run_idempotency_keys
			WHERE team_id = $1 AND idempotency_key = $2 AND created_at <= $3`,
			teamID, key, now-KeyLifetime.Milliseconds()); err != nil {
			return Run{}, fmt.Errorf("expire idempotency key: %w", err)
		}
	}
	// The version must be one of the team's configuration's: the insert
	// copies nothing otherwise.
	res, err := tx.ExecContext(ctx, `INSERT INTO runs
		(id, team_id, configuration_id, version_id, status, idempotency_key, created_by, created_at, updated_at)
		SELECT $1, c.team_id, c.id, v.id, 'queued', $2, $3, $4, $4
		FROM configurations c JOIN configuration_versions v ON v.configuration_id = c.id
		WHERE c.id = $5 AND c.team_id = $6 AND v.id = $7`,
		id, nullString(key), createdBy, now, configurationID, teamID, versionID)
	if err != nil {
		return Run{}, fmt.Errorf("insert run: %w", err)
	}
	if n, err := res.RowsAffected(); err != nil || n == 0 {
		return Run{}, errors.Join(ErrConfigurationNotFound, err)
	}
	if key != "" {
		if _, err := tx.ExecContext(ctx, `INSERT INTO run_idempotency_keys
			(team_id, idempotency_key, configuration_id, run_id, created_at) VALUES ($1, $2, $3, $4, $5)`,
			teamID, key, configurationID, id, now); err != nil {
			return Run{}, fmt.Errorf("insert idempotency key: %w", err)
		}
	}
	if err := addEvent(ctx, tx, id, EventQueued, "", "Queued by "+createdBy+".", nil, now); err != nil {
		return Run{}, err
	}
	return get(ctx, tx, teamID, id)
}

// Replay returns the run of the team's live idempotency key ("" for
// none: found false) when it applied configurationID, so a caller can
// answer a repeated apply before doing anything else (the API pushes
// first). Looking is not the guard against two runs: Enqueue's insert
// refusal is. Errors: ErrIdempotencyKeyReused (it applied another
// configuration).
func (q *Queue) Replay(ctx context.Context, teamID, configurationID, key string) (r Run, found bool, err error) {
	if key == "" {
		return Run{}, false, nil
	}
	return q.byKey(ctx, teamID, configurationID, key)
}

// byKey returns the run of a live idempotency key of the team, found
// false when there is none; ErrIdempotencyKeyReused when it applied
// another configuration.
func (q *Queue) byKey(ctx context.Context, teamID, configurationID, key string) (Run, bool, error) {
	var runID, cfg string
	err := q.db.Read().QueryRowContext(ctx, `SELECT run_id, configuration_id FROM run_idempotency_keys
		WHERE team_id = $1 AND idempotency_key = $2 AND created_at > $3`,
		teamID, key, q.nowMS()-KeyLifetime.Milliseconds()).Scan(&runID, &cfg)
	if errors.Is(err, sql.ErrNoRows) {
		return Run{}, false, nil
	}
	if err != nil {
		return Run{}, false, fmt.Errorf("read idempotency key: %w", err)
	}
	if cfg != configurationID {
		return Run{}, false, ErrIdempotencyKeyReused
	}
	r, err := q.Get(ctx, teamID, runID)
	if errors.Is(err, ErrNotFound) {
		return Run{}, false, nil
	}
	return r, err == nil, err
}

// Prune deletes the idempotency keys older than KeyLifetime (they already
// count as absent) and returns how many: for kiln serve to call now and
// then, so the table holds about a day of keys.
func (q *Queue) Prune(ctx context.Context) (int64, error) {
	res, err := q.db.Write().ExecContext(ctx, `DELETE FROM run_idempotency_keys WHERE created_at <= $1`,
		q.nowMS()-KeyLifetime.Milliseconds())
	if err != nil {
		return 0, fmt.Errorf("prune idempotency keys: %w", err)
	}
	return res.RowsAffected()
}

// claimSQL finds the next claimable run: a queued run that is the first
// open run of its configuration (no started run, no queued one before
// it), or a started run whose lease expired at $1. Of those, a run of the
// team with the fewest started runs leased to the claiming owner ($2)
// comes first, then the oldest: a team that queued many runs does not
// hold every one of a process's slots while another team's run waits.
const claimSQL = `SELECT r.id, r.team_id, r.status, r.lease_owner FROM runs r
	WHERE (r.status = 'queued' AND NOT EXISTS (SELECT 1 FROM runs o
		WHERE o.configuration_id = r.configuration_id
		AND (o.status IN ` + startedSQL + ` OR (o.status = 'queued' AND o.seq < r.seq))))
	OR (r.status IN ` + startedSQL + ` AND r.lease_until <= $1)
	ORDER BY (SELECT count(*) FROM runs h
		WHERE h.team_id = r.team_id AND h.lease_owner = $2 AND h.status IN ` + startedSQL + `), r.seq LIMIT 1`

// Claim gives owner (an instance id) the next run to execute, leased
// until now + leaseFor, or ok false when nothing is claimable. A queued
// run is claimable when no run of its configuration is started or queued
// before it; of the claimable runs, one of the team with the fewest runs
// started under owner is taken first, then the oldest; it becomes planning, with started_at and a run.started
// event. A started run whose lease expired is taken over as it is, with
// a run.resumed event naming the previous owner; the executor resumes
// it from its checkpoint.
func (q *Queue) Claim(ctx context.Context, owner string, leaseFor time.Duration) (r Run, ok bool, err error) {
	if owner == "" || leaseFor < time.Millisecond {
		return Run{}, false, fmt.Errorf("claim run: owner %q with lease %v", owner, leaseFor)
	}
	lock := ""
	if q.db.Dialect() == store.Postgres {
		// Replicas claiming at once each skip the row another is taking
		// instead of waiting for it (SQLite has one writer anyway).
		lock = ` FOR UPDATE OF r SKIP LOCKED`
	}
	now := q.nowMS()
	until := now + leaseFor.Milliseconds()
	err = q.db.Tx(ctx, func(tx *sql.Tx) error {
		var id, teamID string
		var status Status
		var prev sql.NullString
		err := tx.QueryRowContext(ctx, claimSQL+lock, now, owner).Scan(&id, &teamID, &status, &prev)
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("find claimable run: %w", err)
		}
		if status == Queued {
			if _, err := tx.ExecContext(ctx, `UPDATE runs
				SET status = 'planning', stage = 'planning', lease_owner = $1, lease_until = $2, started_at = $3, updated_at = $3
				WHERE id = $4`, owner, until, now, id); err != nil {
				return fmt.Errorf("start run: %w", err)
			}
			if err := addEvent(ctx, tx, id, EventStarted, Planning, "Started by "+owner+".",
				map[string]string{"owner": owner}, now); err != nil {
				return err
			}
		} else {
			if _, err := tx.ExecContext(ctx, `UPDATE runs SET lease_owner = $1, lease_until = $2, updated_at = $3 WHERE id = $4`,
				owner, until, now, id); err != nil {
				return fmt.Errorf("take over run: %w", err)
			}
			msg := fmt.Sprintf("Resumed by %s after the lease of %s expired.", owner, prev.String)
			if err := addEvent(ctx, tx, id, EventResumed, status, msg,
				map[string]string{"owner": owner, "previous_owner": prev.String}, now); err != nil {
				return err
			}
		}
		r, err = get(ctx, tx, teamID, id)
		ok = err == nil
		return err
	})
	if store.IsUniqueViolation(err) {
		// runs_one_started refused a second started run of a
		// configuration; the queries above should never get here, and the
		// caller polls again anyway.
		return Run{}, false, nil
	}
	if err != nil {
		return Run{}, false, err
	}
	return r, ok, nil
}

// RequestCancel cancels one of the team's runs: a queued run at once
// (canceled, failure class canceled, a run.canceled event); a started
// one is marked cancel_requested (with a run.cancel_requested event the
// first time), which its executor reads at each Renew and obeys after its
// current step. A canceled run is returned as it is. Errors: ErrNotFound,
// ErrFinished (it succeeded or failed).
func (q *Queue) RequestCancel(ctx context.Context, teamID, runID string) (Run, error) {
	now := q.nowMS()
	var r Run
	err := q.db.Tx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE runs
			SET status = 'canceled', error = $1, failure_class = 'canceled', completed_at = $2, updated_at = $2
			WHERE id = $3 AND team_id = $4 AND status = 'queued'`, canceledQueued, now, runID, teamID)
		if err != nil {
			return fmt.Errorf("cancel run: %w", err)
		}
		if n, err := res.RowsAffected(); err != nil {
			return fmt.Errorf("cancel run: %w", err)
		} else if n == 1 {
			if err := addEvent(ctx, tx, runID, EventCanceled, "", canceledQueued, nil, now); err != nil {
				return err
			}
		} else {
			// Not queued (any more): started, final or absent.
			var stage sql.NullString
			err := tx.QueryRowContext(ctx, `UPDATE runs SET cancel_requested = TRUE, updated_at = $1
				WHERE id = $2 AND team_id = $3 AND status IN `+startedSQL+` AND cancel_requested = FALSE
				RETURNING stage`, now, runID, teamID).Scan(&stage)
			switch {
			case err == nil:
				if err := addEvent(ctx, tx, runID, EventCancelRequested, Status(stage.String),
					"Cancel requested; the run stops after its current step.", nil, now); err != nil {
					return err
				}
			case !errors.Is(err, sql.ErrNoRows):
				return fmt.Errorf("request cancel: %w", err)
			}
		}
		r, err = get(ctx, tx, teamID, runID)
		if err != nil {
			return err
		}
		if r.Status == Succeeded || r.Status == Failed {
			return ErrFinished
		}
		return nil
	})
	if err != nil {
		return Run{}, err
	}
	return r, nil
}

// addEvent appends an event to a run's history; data is marshalled to
// JSON (nil for none). The caller's transaction holds the run (a row it
// created, locked or leased), so seq numbers of one run never race; the
// primary key would refuse a duplicate anyway.
func addEvent(ctx context.Context, tx *sql.Tx, runID string, typ EventType, stage Status, msg string, data any, now int64) error {
	var raw any
	if data != nil {
		b, err := json.Marshal(data)
		if err != nil {
			return fmt.Errorf("event %s: %w", typ, err)
		}
		raw = string(b)
	}
	_, err := tx.ExecContext(ctx, `INSERT INTO run_events (run_id, seq, event_type, stage, message, data, created_at)
		VALUES ($1, (SELECT COALESCE(MAX(seq), 0) + 1 FROM run_events WHERE run_id = $1), $2, $3, $4, $5, $6)`,
		runID, string(typ), nullString(string(stage)), msg, raw, now)
	if err != nil {
		return fmt.Errorf("add event %s: %w", typ, err)
	}
	return nil
}
