package store_test

import (
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/kilnhq/kiln/internal/store"
	"github.com/kilnhq/kiln/internal/store/storetest"
)

func TestOpenMigratesAndRoundTrips(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		ctx := t.Context()
		// Placeholders are written once for both engines; $2 before $1 in a
		// statement would bind wrongly on SQLite, so every query numbers
		// them in order of first appearance. This checks reuse of $1.
		err := db.Tx(ctx, func(tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, `INSERT INTO teams (id, name, created_at) VALUES ($1, $2, $3)`, "team_a", "alpha", int64(7))
			return err
		})
		if err != nil {
			t.Fatalf("insert: %v", err)
		}
		var name string
		var at int64
		err = db.Read().QueryRowContext(ctx, `SELECT name, created_at FROM teams WHERE id = $1 AND (name = $2 OR id = $1)`, "team_a", "alpha").Scan(&name, &at)
		if err != nil || name != "alpha" || at != 7 {
			t.Fatalf("select = (%q, %d, %v), want (alpha, 7, nil)", name, at, err)
		}
		// A failing Tx rolls back.
		boom := errors.New("boom")
		err = db.Tx(ctx, func(tx *sql.Tx) error {
			if _, err := tx.ExecContext(ctx, `INSERT INTO teams (id, name, created_at) VALUES ($1, $2, $3)`, "team_b", "beta", int64(1)); err != nil {
				return err
			}
			return boom
		})
		if !errors.Is(err, boom) {
			t.Fatalf("Tx error = %v, want boom", err)
		}
		var n int
		if err := db.Read().QueryRowContext(ctx, `SELECT count(*) FROM teams`).Scan(&n); err != nil || n != 1 {
			t.Fatalf("count = %d, %v; want 1 (rolled back)", n, err)
		}
		// Foreign keys are enforced on both engines.
		err = db.Tx(ctx, func(tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, `INSERT INTO tokens (id, team_id, kind, name, digest, created_at) VALUES ('tok_x', 'nope', 'user', 'x', 'd', 1)`)
			return err
		})
		if err == nil {
			t.Fatal("insert token of a missing team succeeded, want a foreign key error")
		}
		if err := db.Ping(ctx); err != nil {
			t.Fatalf("Ping: %v", err)
		}
	})
}

func TestSQLiteReopenKeepsDataAndMode(t *testing.T) {
	dir := t.TempDir()
	db, err := store.Open(t.Context(), store.Options{DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Write().ExecContext(t.Context(), `INSERT INTO teams (id, name, created_at) VALUES ('team_a', 'a', 1)`); err != nil {
		t.Fatal(err)
	}
	var mode string
	if err := db.Read().QueryRowContext(t.Context(), `PRAGMA journal_mode`).Scan(&mode); err != nil || mode != "wal" {
		t.Fatalf("journal_mode = %q, %v; want wal", mode, err)
	}
	// The read pool must refuse writes.
	if _, err := db.Read().ExecContext(t.Context(), `INSERT INTO teams (id, name, created_at) VALUES ('team_b', 'b', 1)`); err == nil {
		t.Fatal("write through the read pool succeeded, want query_only refusal")
	}
	db.Close()
	db, err = store.Open(t.Context(), store.Options{DataDir: dir})
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	defer db.Close()
	var n int
	if err := db.Read().QueryRowContext(t.Context(), `SELECT count(*) FROM teams`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("after reopen count = %d, %v; want 1", n, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "kiln.db")); err != nil {
		t.Fatalf("kiln.db missing: %v", err)
	}
}
