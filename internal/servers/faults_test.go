package servers_test

import (
	"context"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kilnhq/kiln/internal/servers"
	"github.com/kilnhq/kiln/internal/servers/serverstest"
	"github.com/kilnhq/kiln/internal/store/storetest"
)

// signalHandler passes records to its Handler and signals hit (without
// blocking) for each record whose message is msg.
type signalHandler struct {
	slog.Handler
	msg string
	hit chan<- struct{}
}

func (h signalHandler) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == h.msg {
		select {
		case h.hit <- struct{}{}:
		default:
		}
	}
	return h.Handler.Handle(ctx, r)
}

func (h signalHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return signalHandler{h.Handler.WithAttrs(as), h.msg, h.hit}
}

func (h signalHandler) WithGroup(name string) slog.Handler {
	return signalHandler{h.Handler.WithGroup(name), h.msg, h.hit}
}

// TestCrashSeenThroughDatabaseFault kills a server's process while its
// record cannot be read (the servers table renamed away: a real error of
// the real SQLite file, as a database that fails for a moment gives): the
// crash is recorded and the server restarted once the record reads again,
// not let go as if the server had been deleted.
func TestCrashSeenThroughDatabaseFault(t *testing.T) {
	db := storetest.SQLite(t)
	teamID := team(t, db)
	retried := make(chan struct{}, 1)
	log := slog.New(signalHandler{slog.NewTextHandler(t.Output(), nil), "read a server's record; trying again", retried})
	env := serverstest.New(t, db, serverstest.Options{Log: log, Servers: servers.Options{RestartBackoff: 20 * time.Millisecond}})
	svc := env.Service
	sv := newTestServer(t, svc, teamID)
	if err := svc.Power(t.Context(), teamID, sv.ID, "start"); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, svc, teamID, sv.ID, servers.StatusRunning)
	pid, err := strconv.Atoi(strings.Split(runtimeRef(t, db, sv.ID), ":")[0])
	if err != nil {
		t.Fatalf("runtime_ref of a running server: %v", err)
	}
	if _, err := db.Write().ExecContext(t.Context(), `ALTER TABLE servers RENAME TO servers_away`); err != nil {
		t.Fatal(err)
	}
	back := func() {
		if _, err := db.Write().ExecContext(context.Background(), `ALTER TABLE servers_away RENAME TO servers`); err != nil {
			t.Fatal(err)
		}
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		back()
		t.Fatalf("kill %d: %v", pid, err)
	}
	select {
	case <-retried:
	case <-time.After(30 * time.Second):
		back()
		t.Fatal("the end of the killed server was not seen within 30 s (no read of its record was tried again)")
	}
	back()
	waitConsole(t, svc, teamID, sv.ID, "(automatic restart 1 of 3)", 1)
	waitStatus(t, svc, teamID, sv.ID, servers.StatusRunning)
}

// TestDeleteOutlivesItsCaller: a client that goes away while its delete
// runs (here while the delete hooks run: a snapshot of the server being
// canceled is waited for there) does not leave the server half-deleted —
// stopped, its sessions ended, yet still there. The delete runs to its end.
func TestDeleteOutlivesItsCaller(t *testing.T) {
	db := storetest.SQLite(t)
	teamID := team(t, db)
	env := serverstest.New(t, db, serverstest.Options{})
	svc := env.Service
	var cancelCaller context.CancelFunc
	var mu sync.Mutex
	svc.OnDelete(func(ctx context.Context, id string) error {
		mu.Lock()
		defer mu.Unlock()
		if cancelCaller != nil {
			cancelCaller() // the client hangs up
		}
		return nil
	})
	sv := newTestServer(t, svc, teamID)
	if err := svc.Power(t.Context(), teamID, sv.ID, "start"); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, svc, teamID, sv.ID, servers.StatusRunning)
	ctx, cancel := context.WithCancel(t.Context())
	mu.Lock()
	cancelCaller = cancel
	mu.Unlock()
	if err := svc.Delete(ctx, teamID, sv.ID); err != nil {
		t.Fatalf("Delete by a caller that went away = %v, want nil (the delete runs to its end)", err)
	}
	if _, err := svc.Get(t.Context(), teamID, sv.ID); err != servers.ErrNotFound {
		t.Errorf("Get after the delete = %v, want ErrNotFound", err)
	}
	if _, err := os.Stat(env.Node.Root(sv.ID)); !os.IsNotExist(err) {
		t.Errorf("the server's root after the delete: %v, want gone", err)
	}
	if env := serverstest.ProcessEnv(env.Node.Root(sv.ID)); env != nil {
		t.Error("the server's process still runs after the delete")
	}
}

// TestShutdownDuringRequests stops the service, again and again, while
// power requests keep arriving: no background work is added to the
// service's wait group once shutdown waits on it (sync.WaitGroup's
// misuse, an Add from zero racing the Wait, which -race reports), and the
// service stops every time.
func TestShutdownDuringRequests(t *testing.T) {
	db := storetest.SQLite(t)
	teamID := team(t, db)
	dir := t.TempDir()
	sv := newTestServer(t, serverstest.New(t, db, serverstest.Options{DataDir: dir}).Service, teamID)
	for range 30 {
		env := serverstest.New(t, db, serverstest.Options{DataDir: dir})
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				for {
					select {
					case <-stop:
						return
					default:
					}
					_ = env.Service.Power(context.Background(), teamID, sv.ID, "stop")
				}
			})
		}
		env.Stop()
		close(stop)
		wg.Wait()
	}
}

// TestStartErrorNamesNoHostPath: a start that fails with an error of no
// sentence of its own (an exec error, which names the program's path on
// the host) tells the team's console without the host's data directory.
func TestStartErrorNamesNoHostPath(t *testing.T) {
	db := storetest.SQLite(t)
	teamID := team(t, db)
	dir := t.TempDir()
	env := serverstest.New(t, db, serverstest.Options{DataDir: dir, KilnBin: dir + "/bin/kiln-gone"})
	svc := env.Service
	sv := newTestServer(t, svc, teamID)
	if err := svc.Power(t.Context(), teamID, sv.ID, "start"); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, svc, teamID, sv.ID, servers.StatusCrashed)
	lines, err := svc.Console(t.Context(), teamID, sv.ID, 100)
	if err != nil {
		t.Fatal(err)
	}
	var failed string
	for _, l := range lines {
		if strings.HasPrefix(l, "[kiln] failed to start: ") {
			failed = l
		}
		if strings.Contains(l, dir) {
			t.Errorf("console line %q names the host's data dir %s", l, dir)
		}
	}
	if !strings.Contains(failed, "<data dir>/bin/kiln-gone") {
		t.Errorf("the failed start's line = %q, want it to name <data dir>/bin/kiln-gone", failed)
	}
}
