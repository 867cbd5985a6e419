package servers_test

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/kilnhq/kiln/internal/servers"
	"github.com/kilnhq/kiln/internal/servers/serverstest"
	"github.com/kilnhq/kiln/internal/store/storetest"
)

// logLines is a slog.Handler's writer that keeps what it was given.
type logLines struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logLines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

// said returns the lines of the log that say msg of the server id.
func (l *logLines) said(msg, id string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, line := range strings.Split(l.buf.String(), "\n") {
		if strings.Contains(line, "msg=\""+msg) && strings.Contains(line, "server_id="+id) {
			out = append(out, line)
		}
	}
	return out
}

func (l *logLines) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(l, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

// TestStartAndStopSaidInTheLog: kiln serve says in its log, one line a
// server, what its stop and its start did with each server (issue 33):
// left running or stopped at the stop; re-adopted, started again or left
// stopped at the start.
func TestStartAndStopSaidInTheLog(t *testing.T) {
	db := storetest.SQLite(t)
	teamID := team(t, db)
	t.Run("holders", func(t *testing.T) {
		dir := t.TempDir()
		var log1 logLines
		env := serverstest.New(t, db, serverstest.Options{DataDir: dir, Holders: true, Log: log1.logger()})
		running := newTestServer(t, env.Service, teamID)
		stopped := newTestServer(t, env.Service, teamID)
		if err := env.Service.Power(t.Context(), teamID, running.ID, "start"); err != nil {
			t.Fatal(err)
		}
		waitStatus(t, env.Service, teamID, running.ID, servers.StatusRunning)
		env.Stop()
		if got := log1.said("server left running", running.ID); len(got) != 1 {
			t.Errorf("stop: %d lines saying the running server was left running, want 1:\n%s", len(got), log1.buf.String())
		}
		if got := log1.said("server", stopped.ID); len(got) != 0 {
			t.Errorf("stop: lines about a server that did not run: %q", got)
		}

		var log2 logLines
		env2 := serverstest.New(t, db, serverstest.Options{DataDir: dir, Holders: true, Log: log2.logger()})
		waitStatus(t, env2.Service, teamID, running.ID, servers.StatusRunning)
		if got := log2.said("server re-adopted: it ran on while kiln was down", running.ID); len(got) != 1 {
			t.Errorf("start: %d lines saying the server was re-adopted, want 1:\n%s", len(got), log2.buf.String())
		}
		if got := log2.said("server left stopped, as asked", stopped.ID); len(got) != 1 {
			t.Errorf("start: %d lines saying the stopped server was left stopped, want 1:\n%s", len(got), log2.buf.String())
		}
		if err := env2.Service.Power(t.Context(), teamID, running.ID, "stop"); err != nil {
			t.Fatal(err)
		}
		waitStatus(t, env2.Service, teamID, running.ID, servers.StatusOffline)
		for _, id := range []string{running.ID, stopped.ID} {
			if err := env2.Service.Delete(t.Context(), teamID, id); err != nil {
				t.Fatal(err)
			}
		}
	})
	t.Run("children", func(t *testing.T) {
		dir := t.TempDir()
		var log1 logLines
		env := serverstest.New(t, db, serverstest.Options{DataDir: dir, Log: log1.logger()})
		sv := newTestServer(t, env.Service, teamID)
		if err := env.Service.Power(t.Context(), teamID, sv.ID, "start"); err != nil {
			t.Fatal(err)
		}
		waitStatus(t, env.Service, teamID, sv.ID, servers.StatusRunning)
		env.Stop()
		if got := log1.said("server being stopped: its process ends with kiln", sv.ID); len(got) != 1 {
			t.Errorf("stop: %d lines saying the server was stopped, want 1:\n%s", len(got), log1.buf.String())
		}
		var log2 logLines
		env2 := serverstest.New(t, db, serverstest.Options{DataDir: dir, Log: log2.logger()})
		waitStatus(t, env2.Service, teamID, sv.ID, servers.StatusRunning)
		if got := log2.said("server being started again", sv.ID); len(got) != 1 {
			t.Errorf("start: %d lines saying the server was started again, want 1:\n%s", len(got), log2.buf.String())
		}
	})
}
