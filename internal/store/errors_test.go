package store_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/kilnhq/kiln/internal/store"
	"github.com/kilnhq/kiln/internal/store/storetest"
)

// TestIsUniqueViolation: each driver's own code is recognised — a
// duplicate primary key and a duplicate unique name — and other errors
// (a missing table, a NOT NULL violation) are not.
func TestIsUniqueViolation(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		ctx := t.Context()
		w := db.Write()
		if _, err := w.ExecContext(ctx, `INSERT INTO teams (id, name, created_at) VALUES ($1, $2, $3)`, "team_u1", "uniq", 1); err != nil {
			t.Fatal(err)
		}
		_, dupName := w.ExecContext(ctx, `INSERT INTO teams (id, name, created_at) VALUES ($1, $2, $3)`, "team_u2", "uniq", 1)
		_, dupKey := w.ExecContext(ctx, `INSERT INTO teams (id, name, created_at) VALUES ($1, $2, $3)`, "team_u1", "other", 1)
		_, null := w.ExecContext(ctx, `INSERT INTO teams (id, name, created_at) VALUES ($1, NULL, $2)`, "team_u3", 1)
		_, missing := w.ExecContext(ctx, `INSERT INTO no_such_table (id) VALUES ($1)`, "x")
		for _, c := range []struct {
			name string
			err  error
			want bool
		}{
			{"duplicate unique name", dupName, true},
			{"duplicate primary key", dupKey, true},
			{"wrapped duplicate", fmt.Errorf("insert: %w", dupName), true},
			{"NOT NULL violation", null, false},
			{"missing table", missing, false},
			{"other error", errors.New("duplicate key value violates unique constraint"), false},
		} {
			if got := store.IsUniqueViolation(c.err); got != c.want {
				t.Errorf("IsUniqueViolation(%s: %v) = %v, want %v", c.name, c.err, got, c.want)
			}
		}
	})
}

// TestPointRead: a point read on SQLite skips cancellation (no watcher
// goroutine; busy_timeout bounds it); on PostgreSQL it has a deadline and
// ends with the request.
func TestPointRead(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		req, stop := context.WithCancel(t.Context())
		ctx, cancel := db.PointRead(req)
		defer cancel()
		_, hasDeadline := ctx.Deadline()
		stop()
		switch db.Dialect() {
		case store.SQLite:
			if ctx.Done() != nil || hasDeadline {
				t.Errorf("SQLite point read: Done %v, deadline %v; want neither", ctx.Done(), hasDeadline)
			}
		case store.Postgres:
			if !hasDeadline || ctx.Err() == nil {
				t.Errorf("PostgreSQL point read: deadline %v, err after the request ended %v; want a deadline and the request's end", hasDeadline, ctx.Err())
			}
			var one int
			c2, cancel2 := db.PointRead(t.Context())
			defer cancel2()
			if err := db.Read().QueryRowContext(c2, `SELECT 1`).Scan(&one); err != nil || one != 1 {
				t.Errorf("a point read = %d, %v", one, err)
			}
		}
	})
}
