package store

import (
	"context"
	"time"
)

// PointReadTimeout bounds a point read on PostgreSQL (PointRead).
const PointReadTimeout = 5 * time.Second

// PointRead is the context for a point read of microseconds on the hot
// path (a token look-up, one server): on SQLite it is not cancelled with
// the request, since database/sql then skips its watcher goroutine per
// query, and busy_timeout bounds the wait; on PostgreSQL, where a query
// crosses the network and nothing else bounds it, it keeps the request's
// cancellation and gets a deadline of PointReadTimeout. Call cancel when
// the read is done.
func (db *DB) PointRead(ctx context.Context) (context.Context, context.CancelFunc) {
	if db.dialect == Postgres {
		return context.WithTimeout(ctx, PointReadTimeout)
	}
	return context.WithoutCancel(ctx), func() {}
}
