package instance_test

import (
	"context"
	"database/sql"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kilnhq/kiln/internal/ids"
	"github.com/kilnhq/kiln/internal/instance"
	"github.com/kilnhq/kiln/internal/store"
	"github.com/kilnhq/kiln/internal/store/storetest"
)

// clock is a settable time for heartbeats.
type clock struct{ ms atomic.Int64 }

func (c *clock) now() time.Time  { return time.UnixMilli(c.ms.Load()) }
func (c *clock) set(ms int64)    { c.ms.Store(ms) }
func (c *clock) advance(d int64) { c.ms.Add(d) }

type row struct {
	nodeID, hostname  string
	pid               int
	startedAt, seenAt int64
}

func readRow(t *testing.T, db *store.DB, id string) (row, bool) {
	t.Helper()
	var r row
	err := db.Read().QueryRowContext(t.Context(), `SELECT node_id, hostname, pid, started_at, seen_at FROM instances WHERE id = $1`, id).
		Scan(&r.nodeID, &r.hostname, &r.pid, &r.startedAt, &r.seenAt)
	if errors.Is(err, sql.ErrNoRows) {
		return r, false
	}
	if err != nil {
		t.Fatalf("read instance %s: %v", id, err)
	}
	return r, true
}

func TestRegisterHeartbeatClose(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		ctx := t.Context()
		var c clock
		c.set(1_000_000_000)
		day := (24 * time.Hour).Milliseconds()
		// A killed process's row, unseen for more than a day, and a live one.
		stale, live := ids.New("inst"), ids.New("inst")
		for _, r := range []struct {
			id   string
			seen int64
		}{{stale, 1_000_000_000 - day - 1}, {live, 1_000_000_000 - day + 1}} {
			if _, err := db.Write().ExecContext(ctx, `INSERT INTO instances (id, node_id, hostname, pid, started_at, seen_at) VALUES ($1, 'local', 'elsewhere', 1, $2, $2)`, r.id, r.seen); err != nil {
				t.Fatal(err)
			}
		}

		reg, err := instance.Register(ctx, db, instance.Options{NodeID: "local", Hostname: "host-a", PID: 4242, Now: c.now})
		if err != nil {
			t.Fatalf("Register: %v", err)
		}
		self := reg.Instance()
		if !ids.HasPrefix(self.ID, "inst") || self.NodeID != "local" || self.Hostname != "host-a" || self.PID != 4242 || self.StartedAt != 1_000_000_000 {
			t.Fatalf("Instance() = %+v", self)
		}
		want := row{"local", "host-a", 4242, 1_000_000_000, 1_000_000_000}
		if got, ok := readRow(t, db, self.ID); !ok || got != want {
			t.Fatalf("row after Register = %+v, %v; want %+v", got, ok, want)
		}
		if _, ok := readRow(t, db, stale); ok {
			t.Error("Register kept a row unseen for more than a day")
		}
		if _, ok := readRow(t, db, live); !ok {
			t.Error("Register deleted a row seen within a day")
		}

		c.advance(10_000)
		if err := reg.Heartbeat(ctx); err != nil {
			t.Fatalf("Heartbeat: %v", err)
		}
		want.seenAt = 1_000_010_000
		if got, _ := readRow(t, db, self.ID); got != want {
			t.Errorf("row after Heartbeat = %+v, want %+v", got, want)
		}
		// A row deleted under a live process comes back with its next beat.
		if _, err := db.Write().ExecContext(ctx, `DELETE FROM instances WHERE id = $1`, self.ID); err != nil {
			t.Fatal(err)
		}
		c.advance(10_000)
		if err := reg.Heartbeat(ctx); err != nil {
			t.Fatalf("Heartbeat of a deleted row: %v", err)
		}
		want.seenAt = 1_000_020_000
		if got, ok := readRow(t, db, self.ID); !ok || got != want {
			t.Errorf("row after Heartbeat of a deleted row = %+v, %v; want %+v", got, ok, want)
		}

		if err := reg.Close(ctx); err != nil {
			t.Fatalf("Close: %v", err)
		}
		if _, ok := readRow(t, db, self.ID); ok {
			t.Error("row still there after Close")
		}
	})
}

func TestRunBeatsUntilCanceled(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		var c clock
		c.set(5_000)
		reg, err := instance.Register(t.Context(), db, instance.Options{NodeID: "local", Hostname: "h", PID: 1, Interval: time.Millisecond, Now: c.now})
		if err != nil {
			t.Fatal(err)
		}
		c.set(9_000)
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- reg.Run(ctx) }()
		deadline := time.Now().Add(30 * time.Second)
		for {
			if r, _ := readRow(t, db, reg.Instance().ID); r.seenAt == 9_000 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("Run did not refresh seen_at within 30 s")
			}
			time.Sleep(time.Millisecond)
		}
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run = %v, want nil after cancel", err)
		}
	})
}
