package servers_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kilnhq/kiln/internal/runtime"
	"github.com/kilnhq/kiln/internal/servers"
	"github.com/kilnhq/kiln/internal/servers/serverstest"
	"github.com/kilnhq/kiln/internal/slp"
	"github.com/kilnhq/kiln/internal/store"
	"github.com/kilnhq/kiln/internal/store/storetest"
)

// heldPID is the game pid of a held server's runtime_ref
// ("holder:<pid>:<start time>").
func heldPID(t *testing.T, db *store.DB, id string) int {
	t.Helper()
	ref := runtimeRef(t, db, id)
	f := strings.Split(ref, ":")
	if len(f) != 3 || f[0] != "holder" {
		t.Fatalf("runtime_ref %q, want holder:pid:starttime", ref)
	}
	pid, err := strconv.Atoi(f[1])
	if err != nil {
		t.Fatalf("runtime_ref %q: %v", ref, err)
	}
	return pid
}

// alive reports whether pid runs (a zombie does not).
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	return len(f) > 0 && f[0] != "Z"
}

// TestHeldServersOutliveTheService: on the process runtime with holders
// (kiln serve's), the service's shutdown leaves a running server running;
// the next service re-adopts the same process, replays its console, and
// commands and a stop work through it.
func TestHeldServersOutliveTheService(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		teamID := team(t, db)
		dir := t.TempDir()
		env := serverstest.New(t, db, serverstest.Options{DataDir: dir, Holders: true})
		sv := newTestServer(t, env.Service, teamID)
		if err := env.Service.Power(t.Context(), teamID, sv.ID, "start"); err != nil {
			t.Fatal(err)
		}
		waitStatus(t, env.Service, teamID, sv.ID, servers.StatusRunning)
		ref, pid := runtimeRef(t, db, sv.ID), heldPID(t, db, sv.ID)
		env.Stop()
		if !alive(pid) {
			t.Fatal("the game ended with the service")
		}
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		if _, err := slp.Ping(ctx, sv.Address); err != nil {
			t.Fatalf("ping while no service runs: %v", err)
		}

		env2 := serverstest.New(t, db, serverstest.Options{DataDir: dir, Holders: true})
		svc := env2.Service
		waitStatus(t, svc, teamID, sv.ID, servers.StatusRunning)
		if got := runtimeRef(t, db, sv.ID); got != ref {
			t.Errorf("runtime_ref after recovery = %q, want the same instance %q", got, ref)
		}
		// The boot's lines came from the holder, before the re-attach.
		lines, _ := svc.Console(t.Context(), teamID, sv.ID, 2000)
		done, reattached := -1, -1
		for i, l := range lines {
			if strings.Contains(l, "Done (") && done < 0 {
				done = i
			}
			if l == "[kiln] re-attached to the running server" {
				reattached = i
			}
		}
		if done < 0 || reattached < done {
			t.Errorf("console after recovery: boot line at %d, re-attached at %d; want both, the boot first:\n%s", done, reattached, strings.Join(lines, "\n"))
		}
		if err := svc.Command(t.Context(), teamID, sv.ID, "say still here"); err != nil {
			t.Fatalf("Command = %v", err)
		}
		waitConsole(t, svc, teamID, sv.ID, "[Server] still here", 1)
		if err := svc.Power(t.Context(), teamID, sv.ID, "stop"); err != nil {
			t.Fatal(err)
		}
		waitStatus(t, svc, teamID, sv.ID, servers.StatusOffline)
		waitConsole(t, svc, teamID, sv.ID, "[kiln] server stopped (exit code 0)", 1)
		deadline := time.Now().Add(30 * time.Second)
		for {
			ids, err := runtime.HeldServers(env2.StateDir)
			if err == nil && len(ids) == 0 && !alive(pid) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("after the stop: holders %q (%v), game alive %v", ids, err, alive(pid))
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
}

// TestStopServersOnExit: with the option, shutdown stops a held server
// (its stop command: the world is saved), and the next service starts it
// again, its desired state being running.
func TestStopServersOnExit(t *testing.T) {
	db := storetest.SQLite(t)
	teamID := team(t, db)
	dir := t.TempDir()
	env := serverstest.New(t, db, serverstest.Options{DataDir: dir, Holders: true, Servers: servers.Options{StopServersOnExit: true}})
	sv := newTestServer(t, env.Service, teamID)
	if err := env.Service.Power(t.Context(), teamID, sv.ID, "start"); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, env.Service, teamID, sv.ID, servers.StatusRunning)
	pid := heldPID(t, db, sv.ID)
	env.Stop()
	if alive(pid) {
		t.Error("the game still runs after a shutdown with StopServersOnExit")
	}
	lines, _ := env.Service.Console(t.Context(), teamID, sv.ID, 2000)
	if !strings.Contains(strings.Join(lines, "\n"), "Saving worlds") {
		t.Errorf("the game was not stopped with its stop command:\n%s", strings.Join(lines, "\n"))
	}
	env2 := serverstest.New(t, db, serverstest.Options{DataDir: dir, Holders: true})
	waitStatus(t, env2.Service, teamID, sv.ID, servers.StatusRunning)
	if got := heldPID(t, db, sv.ID); got == pid {
		t.Errorf("pid %d after the restart, want a new process", got)
	}
}

// TestHeldExitWhileDown: a game that ends while no service runs is
// reported at the re-adoption, as a crash, and restarted.
func TestHeldExitWhileDown(t *testing.T) {
	db := storetest.SQLite(t)
	teamID := team(t, db)
	dir := t.TempDir()
	env := serverstest.New(t, db, serverstest.Options{DataDir: dir, Holders: true,
		Servers: servers.Options{RestartBackoff: 20 * time.Millisecond}})
	sv := newTestServer(t, env.Service, teamID)
	if err := env.Service.Power(t.Context(), teamID, sv.ID, "start"); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, env.Service, teamID, sv.ID, servers.StatusRunning)
	pid := heldPID(t, db, sv.ID)
	env.Stop()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// The holder records the exit and waits for it to be collected.
	deadline := time.Now().Add(30 * time.Second)
	for alive(pid) {
		if time.Now().After(deadline) {
			t.Fatal("the game outlived SIGKILL")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := os.Stat(filepath.Join(dir, "run", sv.ID, "holder.sock")); err != nil {
		t.Fatalf("the holder did not wait for its exit to be collected: %v", err)
	}
	env2 := serverstest.New(t, db, serverstest.Options{DataDir: dir, Holders: true,
		Servers: servers.Options{RestartBackoff: 20 * time.Millisecond}})
	waitConsole(t, env2.Service, teamID, sv.ID, "[kiln] server exited unexpectedly (killed by killed)", 1)
	waitConsole(t, env2.Service, teamID, sv.ID, "(automatic restart 1 of 3)", 1)
	waitStatus(t, env2.Service, teamID, sv.ID, servers.StatusRunning)
	if got := heldPID(t, db, sv.ID); got == pid {
		t.Errorf("pid %d after the restart, want a new process", got)
	}
}

// TestOrphanHolderEnded: a game server under a holder whose server row is
// gone (removed behind kiln's back) is ended at the next recovery.
func TestOrphanHolderEnded(t *testing.T) {
	db := storetest.SQLite(t)
	teamID := team(t, db)
	dir := t.TempDir()
	env := serverstest.New(t, db, serverstest.Options{DataDir: dir, Holders: true})
	sv := newTestServer(t, env.Service, teamID)
	if err := env.Service.Power(t.Context(), teamID, sv.ID, "start"); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, env.Service, teamID, sv.ID, servers.StatusRunning)
	pid := heldPID(t, db, sv.ID)
	env.Stop()
	if _, err := db.Write().ExecContext(t.Context(), `DELETE FROM servers WHERE id = $1`, sv.ID); err != nil {
		t.Fatal(err)
	}
	env2 := serverstest.New(t, db, serverstest.Options{DataDir: dir, Holders: true})
	if alive(pid) {
		t.Error("the game of a deleted server runs on after recovery")
	}
	if ids, err := runtime.HeldServers(env2.StateDir); err != nil || len(ids) != 0 {
		t.Errorf("holders after recovery: %q, %v; want none", ids, err)
	}
}
