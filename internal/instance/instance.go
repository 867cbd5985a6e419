package instance

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"time"

	"github.com/kilnhq/kiln/internal/ids"
	"github.com/kilnhq/kiln/internal/store"
)

// Instance is one start of kiln serve, as recorded in the instances table.
type Instance struct {
	ID        string // inst_…, new at every start
	NodeID    string // the node whose servers this process supervises
	Hostname  string
	PID       int
	StartedAt int64 // Unix ms
}

// Options describe this process; zero Interval, Forget and Now take the
// defaults.
type Options struct {
	NodeID   string
	Hostname string
	PID      int
	// Interval is the time between heartbeats (10 s).
	Interval time.Duration
	// Forget is how long a row may go unseen before a start deletes it
	// (24 h): the process that wrote it was killed.
	Forget time.Duration
	Now    func() time.Time
	Log    *slog.Logger
}

// Registration is this process's row in the instances table.
type Registration struct {
	self Instance
	db   *store.DB
	opts Options
}

// Register gives this process a new instance id, records it (started_at =
// seen_at = now) and deletes the rows of instances not seen for
// Options.Forget.
func Register(ctx context.Context, db *store.DB, opts Options) (*Registration, error) {
	if opts.Interval == 0 {
		opts.Interval = 10 * time.Second
	}
	if opts.Forget == 0 {
		opts.Forget = 24 * time.Hour
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	now := opts.Now().UnixMilli()
	r := &Registration{db: db, opts: opts, self: Instance{
		ID: ids.New("inst"), NodeID: opts.NodeID, Hostname: opts.Hostname, PID: opts.PID, StartedAt: now,
	}}
	err := db.Tx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `DELETE FROM instances WHERE seen_at < $1`, now-opts.Forget.Milliseconds()); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO instances (id, node_id, hostname, pid, started_at, seen_at) VALUES ($1, $2, $3, $4, $5, $5)`,
			r.self.ID, r.self.NodeID, r.self.Hostname, r.self.PID, now)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("register instance: %w", err)
	}
	return r, nil
}

// Instance returns this process's record.
func (r *Registration) Instance() Instance { return r.self }

// Heartbeat sets seen_at to now. It writes the whole row again if it is
// gone (deleted by a start that took this process for dead after a long
// pause), so a live process is always listed.
func (r *Registration) Heartbeat(ctx context.Context) error {
	_, err := r.db.Write().ExecContext(ctx, `INSERT INTO instances (id, node_id, hostname, pid, started_at, seen_at) VALUES ($1, $2, $3, $4, $5, $6)
ON CONFLICT (id) DO UPDATE SET seen_at = excluded.seen_at`,
		r.self.ID, r.self.NodeID, r.self.Hostname, r.self.PID, r.self.StartedAt, r.opts.Now().UnixMilli())
	if err != nil {
		return fmt.Errorf("instance heartbeat: %w", err)
	}
	return nil
}

// Run beats every Options.Interval until ctx ends. A failed beat is
// logged and the next one tried: a database that is away for a moment
// must not stop kiln serve.
func (r *Registration) Run(ctx context.Context) error {
	t := time.NewTicker(r.opts.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			if err := r.Heartbeat(ctx); err != nil && ctx.Err() == nil {
				r.opts.Log.WarnContext(ctx, "instance heartbeat failed", "err", err)
			}
		}
	}
}

// Close deletes this process's row: it is gone, and whatever it owned can
// be taken over at once. Call it last, after everything this process
// owns has stopped.
func (r *Registration) Close(ctx context.Context) error {
	if _, err := r.db.Write().ExecContext(ctx, `DELETE FROM instances WHERE id = $1`, r.self.ID); err != nil {
		return fmt.Errorf("unregister instance: %w", err)
	}
	return nil
}
