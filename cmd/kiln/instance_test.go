package main

import (
	"database/sql"
	"errors"
	"os"
	"regexp"
	"syscall"
	"testing"

	"github.com/kilnhq/kiln/internal/store"
	"github.com/kilnhq/kiln/internal/store/storetest"
)

var instanceRE = regexp.MustCompile(`msg="instance registered" instance_id=(inst_[0-9A-Za-z]{20}) `)

// Every kiln serve records a new instance id at start, logs it, and
// deletes its row when it stops cleanly.
func TestInstanceRegistered(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) {
		dir := t.TempDir()
		instanceRegistered(t, store.Options{DataDir: dir}, "--data-dir", dir)
	})
	t.Run("postgres", func(t *testing.T) {
		u := storetest.PostgresURL(t)
		instanceRegistered(t, store.Options{URL: u}, "--data-dir", t.TempDir(), "--database-url", u)
	})
}

func instanceRegistered(t *testing.T, opts store.Options, args ...string) {
	p := startServe(t, args...)
	m := instanceRE.FindStringSubmatch(p.Stderr())
	if m == nil {
		t.Fatalf("no instance id in the log:\n%s", p.Stderr())
	}
	id := m[1]
	db, err := store.Open(t.Context(), opts)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var node, host string
	var pid int
	var started, seen int64
	err = db.Read().QueryRowContext(t.Context(), `SELECT node_id, hostname, pid, started_at, seen_at FROM instances WHERE id = $1`, id).
		Scan(&node, &host, &pid, &started, &seen)
	if err != nil {
		t.Fatalf("instance %s: %v", id, err)
	}
	wantHost, _ := os.Hostname()
	wantNode := "local" // SQLite; with PostgreSQL the node is the host (--node-name's default)
	if opts.URL != "" {
		wantNode = wantHost
	}
	if node != wantNode || host != wantHost || pid != p.cmd.Process.Pid || started == 0 || seen < started {
		t.Errorf("instance row = (%q, %q, %d, %d, %d), want (%q, %q, %d, started_at > 0, seen_at >= started_at)",
			node, host, pid, started, seen, wantNode, wantHost, p.cmd.Process.Pid)
	}
	if err := p.stop(syscall.SIGTERM); err != nil {
		t.Fatalf("SIGTERM: %v\n%s", err, p.Stderr())
	}
	err = db.Read().QueryRowContext(t.Context(), `SELECT pid FROM instances WHERE id = $1`, id).Scan(&pid)
	if !errors.Is(err, sql.ErrNoRows) {
		t.Errorf("instance row after a clean stop: %v, want none", err)
	}
	// The next start is another instance.
	p2 := startServe(t, args...)
	if m2 := instanceRE.FindStringSubmatch(p2.Stderr()); m2 == nil || m2[1] == id {
		t.Errorf("second start's instance id = %v, want a new one (first %s)", m2, id)
	}
	if err := p2.stop(syscall.SIGTERM); err != nil {
		t.Errorf("SIGTERM: %v", err)
	}
}
