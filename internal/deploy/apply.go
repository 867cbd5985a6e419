package deploy

import (
	"context"
	"database/sql"
	"errors"

	"github.com/kilnhq/kiln/internal/deploy/runs"
	"github.com/kilnhq/kiln/internal/store"
	"github.com/kilnhq/kiln/internal/validate"
)

// Applied is what Apply did.
type Applied struct {
	Run runs.Run
	// Version is the version Run applies when this call queued it (zero
	// for a replay: Run names its own).
	Version Version
	// Pushed: this call pushed Version (the current YAML differed from the
	// latest version).
	Pushed bool
	// Replayed: Run is the one an earlier apply with the same idempotency
	// key queued; this call pushed and queued nothing.
	Replayed bool
}

// Apply pushes the configuration's current YAML as Push does (with
// message, when it differs from the latest version) and queues on q a run
// of the version that results, by actor, in one transaction: a failure
// anywhere, or a crash, leaves neither a version without its run nor a
// run without its version. q must be on this Service's database. With an
// idempotencyKey ("" for none) the team used less than runs.KeyLifetime
// ago for this configuration, it pushes and queues nothing and returns
// that key's run (Replayed). Errors: ErrNotFound, *validate.Error
// (push_message, idempotency_key), runs.ErrIdempotencyKeyReused.
func (s *Service) Apply(ctx context.Context, q *runs.Queue, teamID, id, actor, message, idempotencyKey string) (Applied, error) {
	var c validate.Collector
	checkText(&c, "push_message", message, MaxPushMessage, false, true)
	if err := c.Err(); err != nil {
		return Applied{}, err
	}
	// A replay answers before anything is written. Looking first is not
	// the guard against two runs: the key's row refusing the insert is
	// (runs.Queue.EnqueueTx), and the loop reads the key's run then; it
	// covers that run being deleted (or its key expiring) meanwhile.
	for range 3 {
		if r, found, err := q.Replay(ctx, teamID, id, idempotencyKey); err != nil {
			return Applied{}, err
		} else if found {
			return Applied{Run: r, Replayed: true}, nil
		}
		var a Applied
		err := s.db.Tx(ctx, func(tx *sql.Tx) (err error) {
			a.Version, a.Pushed, err = s.push(ctx, tx, teamID, id, actor, message)
			if err != nil {
				return err
			}
			a.Run, err = q.EnqueueTx(ctx, tx, teamID, id, a.Version.ID, actor, idempotencyKey)
			return err
		})
		switch {
		case err == nil:
			return a, nil
		case idempotencyKey == "" || !store.IsUniqueViolation(err):
			return Applied{}, err
		}
	}
	return Applied{}, errors.New("apply: the idempotency key's run kept disappearing")
}
