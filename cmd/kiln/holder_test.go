package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kilnhq/kiln/internal/slp"
)

// holderRequest sends one request to the holder of a server of the data
// dir, speaking protocol 1 on its socket (<data-dir>/run/<id>/holder.sock)
// by hand, as a kiln of another version would, and returns the reply.
func holderRequest(t *testing.T, dataDir, id, request string) map[string]any {
	t.Helper()
	// The path may be too long for a socket address: through a descriptor.
	fd, err := unix.Open(filepath.Join(dataDir, "run", id), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("the holder's directory: %v", err)
	}
	c, err := net.Dial("unix", fmt.Sprintf("/proc/self/fd/%d/holder.sock", fd))
	unix.Close(fd)
	if err != nil {
		t.Fatalf("connect to the holder of %s: %v", id, err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	br := bufio.NewReader(c)
	read := func() map[string]any {
		t.Helper()
		line, err := br.ReadBytes('\n')
		if err != nil {
			t.Fatalf("read from the holder: %v", err)
		}
		var m map[string]any
		if err := json.Unmarshal(line, &m); err != nil {
			t.Fatalf("the holder sent %q: %v", line, err)
		}
		return m
	}
	if hello := read(); hello["shim"] != "kiln" || hello["protocol"] != 1.0 {
		t.Fatalf("the holder greets with %v, want kiln, protocol 1", hello)
	}
	if _, err := c.Write([]byte(request + "\n")); err != nil {
		t.Fatal(err)
	}
	reply := read()
	if reply["error"] != nil {
		t.Fatalf("holder %s: %v", request, reply["error"])
	}
	return reply
}

// printWhileDown makes the game of a server print a line while no kiln
// serve runs: `say <text>` written through its holder, and waits until the
// holder has the line ("[Server] <text>").
func printWhileDown(t *testing.T, dataDir, id, text string) {
	t.Helper()
	next := holderRequest(t, dataDir, id, `{"op":"status"}`)["status"].(map[string]any)["next"].(float64)
	holderRequest(t, dataDir, id, `{"op":"write","line":"say `+text+`"}`)
	deadline := time.Now().Add(30 * time.Second)
	for holderRequest(t, dataDir, id, `{"op":"status"}`)["status"].(map[string]any)["next"].(float64) <= next {
		if time.Now().After(deadline) {
			t.Fatal("the game printed nothing after say")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// portOf is the port of a game address.
func portOf(addr string) string { return addr[strings.LastIndex(addr, ":")+1:] }

// pingAddr wants a Server List Ping of addr answered.
func pingAddr(t *testing.T, addr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if _, err := slp.Ping(ctx, addr); err != nil {
		t.Fatalf("ping %s: %v", addr, err)
	}
}

// stopServer stops a server through the API and waits until it is offline
// and its process gone.
func stopServer(t *testing.T, p *proc, token, id, addr string) {
	t.Helper()
	if code, out := call(t, p.addr, token, "POST", "/servers/"+id+"/power", `{"action":"stop"}`); code != 202 {
		t.Fatalf("stop: %d %v", code, out)
	}
	waitServer(t, p.addr, token, id, "offline")
	deadline := time.Now().Add(30 * time.Second)
	for testserverProcs(portOf(addr)) > 0 {
		if time.Now().After(deadline) {
			t.Fatal("the game process still runs after the stop")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// secondKiln is a second, different kiln binary (version v9.9.9-upgrade),
// built once for the tests that play an upgrade, beside kilnBin.
func secondKiln(t *testing.T) string {
	t.Helper()
	secondOnce.Do(func() {
		second := filepath.Join(filepath.Dir(kilnBin), "kiln-next")
		build := exec.Command("go", "build", "-ldflags", "-X main.version=v9.9.9-upgrade", "-o", second, ".")
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := build.CombinedOutput(); err != nil {
			secondErr = fmt.Errorf("build the second kiln: %v\n%s", err, out)
			return
		}
		a, _ := os.ReadFile(kilnBin)
		b, _ := os.ReadFile(second)
		if bytes.Equal(a, b) {
			secondErr = errors.New("the two kiln binaries are the same")
			return
		}
		// The line names a commit too when the go command recorded one.
		if out, err := exec.Command(second, "version").Output(); err != nil ||
			!strings.HasPrefix(string(out), "kiln v9.9.9-upgrade\n") && !strings.HasPrefix(string(out), "kiln v9.9.9-upgrade (") {
			secondErr = fmt.Errorf("second kiln version = %q, %v", out, err)
			return
		}
		secondBin = second
	})
	if secondErr != nil {
		t.Fatal(secondErr)
	}
	return secondBin
}

var (
	secondOnce sync.Once
	secondBin  string
	secondErr  error
)

// TestUpgradeReattaches: a second, different kiln binary (another version
// string) started on the data dir of the first re-attaches to the game
// server the first left running: same process, console and stop through
// it.
func TestUpgradeReattaches(t *testing.T) {
	second := secondKiln(t)

	p, token, args := devServe(t)
	id, addr := createServer(t, p, token, "upgraded", true)
	before := testserverPIDs(portOf(addr))
	if len(before) != 1 {
		t.Fatalf("game processes: %v, want 1", before)
	}
	stopClean(t, p)
	pingAddr(t, addr)
	printWhileDown(t, args[1], id, "between the versions")

	p2 := startServeOf(t, second, args...)
	waitServer(t, p2.addr, token, id, "running")
	if after := testserverPIDs(portOf(addr)); !slices.Equal(after, before) {
		t.Errorf("game processes after the upgrade: %v, want %v re-attached", after, before)
	}
	if !strings.Contains(p2.Stderr(), `msg="re-attached to a server's holder"`) || strings.Contains(p2.Stderr(), "holder_version=v9.9.9-upgrade") {
		t.Errorf("the second kiln's log does not show a holder of the first re-attached:\n%s", p2.Stderr())
	}
	for _, want := range []string{"[Server] between the versions", "[kiln] re-attached to the running server"} {
		if !consoleHas(t, p2.addr, token, id, want) {
			t.Errorf("console after the upgrade lacks %q", want)
		}
	}
	if code, out := call(t, p2.addr, token, "POST", "/servers/"+id+"/command", `{"command":"say after the upgrade"}`); code != 200 {
		t.Fatalf("command: %d %v", code, out)
	}
	waitConsole(t, p2, token, id, "[Server] after the upgrade")
	stopServer(t, p2, token, id, addr)
	stopClean(t, p2)
}

// waitConsole waits until a server's console has a line with want.
func waitConsole(t *testing.T, p *proc, token, id, want string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !consoleHas(t, p.addr, token, id, want) {
		if time.Now().After(deadline) {
			t.Fatalf("the console never showed %q", want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestAdminNodeStopAll: kiln admin node stop-all stops the servers kiln
// serve left running (their stop command: the world is saved), refuses
// while kiln serve runs, and leaves their desired state, so the next kiln
// serve starts them again.
func TestAdminNodeStopAll(t *testing.T) {
	p, token, args := devServe(t)
	dir := args[1]
	id, addr := createServer(t, p, token, "stopped-later", true)
	_, errOut, code := kiln(t, "admin", "node", "stop-all", "--data-dir", dir)
	if code != 1 || !strings.Contains(errOut, fmt.Sprintf("kiln serve (pid %d) runs on", p.cmd.Process.Pid)) {
		t.Errorf("stop-all while kiln serve runs: exit %d, stderr %q; want exit 1 naming kiln serve's pid", code, errOut)
	}
	stopClean(t, p)
	pingAddr(t, addr)
	level := filepath.Join(dir, "servers", id, "world", "level.dat")
	before, err := os.ReadFile(level)
	if err != nil {
		t.Fatal(err)
	}
	out, errOut, code := kiln(t, "admin", "node", "stop-all", "--data-dir", dir)
	if code != 0 || out != id+"\tstopped (exit code 0)\n" {
		t.Fatalf("stop-all = %q %q exit %d; want the server stopped", out, errOut, code)
	}
	if n := testserverProcs(portOf(addr)); n != 0 {
		t.Errorf("%d game processes after stop-all", n)
	}
	if after, err := os.ReadFile(level); err != nil || bytes.Equal(before, after) {
		t.Errorf("level.dat unchanged by stop-all (%v): the server was not stopped gracefully", err)
	}
	out, _, code = kiln(t, "admin", "node", "stop-all", "--data-dir", dir)
	if code != 0 || !strings.HasPrefix(out, "no game server runs") {
		t.Errorf("stop-all again = %q exit %d, want none", out, code)
	}
	p2 := startServe(t, args...)
	waitServer(t, p2.addr, token, id, "running")
	stopClean(t, p2)
}
