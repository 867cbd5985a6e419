package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kilnhq/kiln/internal/eventually"
	"github.com/kilnhq/kiln/internal/servers/serverstest"
	"github.com/kilnhq/kiln/internal/slp"
)

// TestServerOnAgent: a game server placed on an agent (kiln agent on
// 127.0.0.2, the same port range as kiln serve's local node on
// 127.0.0.1) is installed, started, pinged, commanded and stopped through
// the control plane's API; its records live in the control plane's
// database, which the agent never opens. The agent killed: the server's
// node operations answer 503 NODE_UNAVAILABLE at once, reads of the
// database still answer, and the game runs on (under its holder); once
// the node is unreachable the server reads status unknown (node_status
// unreachable), in the list too. The
// agent back: it re-adopts the server, which stops and is deleted through
// the API, its root on the agent gone.
func TestServerOnAgent(t *testing.T) {
	dir := t.TempDir()
	ports := serverstest.PortRange(t, 5).String()
	p := startServe(t, "--data-dir", dir, "--dev", "--port-range", ports, "--cluster-addr", "127.0.0.1:0", "--node-unreachable-after", "2s",
		"--rate-limit", "100000") // the test polls
	m := clusterAddrRE.FindStringSubmatch(p.Stderr())
	if m == nil {
		t.Fatalf("no node endpoint in the log:\n%s", p.Stderr())
	}
	url := "https://" + m[1]
	agentDir := filepath.Join(t.TempDir(), "agent")
	args := agentArgs(url, dir, agentDir, ports, "--dev")
	a := startAgent(t, append(args, "--join-token", nodeAdd(t, dir, "edge"))...)
	waitNode(t, dir, "edge", "edge ready", func(n nodeJSON, ok bool) bool { return ok && n.Status == "ready" })
	tok := token(t, dir)

	code, out := call(t, p.addr, tok, "POST", "/servers", `{"name":"far","software":"kiln-test","memory_mb":512,"disk_mb":1024,"node":"edge"}`)
	if code != 202 {
		t.Fatalf("create on edge: %d %v\nagent:\n%s", code, out, a.Stderr())
	}
	sv := out["server"].(map[string]any)
	id := sv["id"].(string)
	if sv["node"] != "edge" || !strings.HasPrefix(sv["address"].(string), "127.0.0.2:") {
		t.Fatalf("server created %v; want it on edge at 127.0.0.2", sv)
	}
	status := func(want string) map[string]any {
		t.Helper()
		return eventually.Value(t, 90*time.Second, "server "+id+" "+want, func() (map[string]any, bool, string) {
			code, out := call(t, p.addr, tok, "GET", "/servers/"+id, "")
			s, _ := out["server"].(map[string]any)
			return s, code == 200 && s != nil && s["status"] == want, fmt.Sprintf("%d %v", code, out)
		})
	}
	status("offline")
	if _, err := os.Stat(filepath.Join(agentDir, "servers", id)); err != nil {
		t.Errorf("the server's root on the agent: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "servers", id)); !os.IsNotExist(err) {
		t.Errorf("a root of the agent's server on the control plane's machine: %v", err)
	}
	if code, out := call(t, p.addr, tok, "POST", "/servers/"+id+"/power", `{"action":"start"}`); code != 202 && code != 200 {
		t.Fatalf("start: %d %v", code, out)
	}
	running := status("running")
	if running["node_status"] != "ready" {
		t.Errorf("node_status of a server on a ready agent = %v, want ready", running["node_status"])
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if _, err := slp.Ping(ctx, running["address"].(string)); err != nil {
		t.Fatalf("ping the game on the agent: %v", err)
	}
	if os.Geteuid() == 0 {
		gameCannotActAsNode(t, running["address"].(string), agentDir)
	} else {
		t.Log("SKIP of the node-key check: not root, so game servers run as the agent's own user")
	}
	if code, out := call(t, p.addr, tok, "POST", "/servers/"+id+"/command", `{"command":"say from the control plane"}`); code/100 != 2 {
		t.Fatalf("command: %d %v", code, out)
	}
	eventually.True(t, eventually.Within, "the command's line in the console", func() (bool, string) {
		code, out := call(t, p.addr, tok, "GET", "/servers/"+id+"/console", "")
		s := fmt.Sprint(out["lines"])
		return code == 200 && strings.Contains(s, "[Server] from the control plane"), fmt.Sprintf("%d %s", code, s)
	})

	// The agent killed: node operations fail at once, reads answer.
	if err := a.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	a.exit(t)
	eventually.True(t, eventually.Within, "503 NODE_UNAVAILABLE for the console", func() (bool, string) {
		code, out := call(t, p.addr, tok, "GET", "/servers/"+id+"/console", "")
		return code == 503 && out["code"] == "NODE_UNAVAILABLE" && strings.Contains(fmt.Sprint(out["error"]), `node "edge"`), fmt.Sprintf("%d %v", code, out)
	})
	if code, out := call(t, p.addr, tok, "GET", "/servers/"+id, ""); code != 200 {
		t.Errorf("GET of the server while its node is away: %d %v", code, out)
	}
	// Silent past --node-unreachable-after (2 s): status unknown, in the
	// list too.
	status("unknown")
	eventually.True(t, eventually.Within, "the list saying unknown", func() (bool, string) {
		code, out := call(t, p.addr, tok, "GET", "/servers", "")
		l, _ := out["servers"].([]any)
		for _, x := range l {
			if s := x.(map[string]any); s["id"] == id {
				return code == 200 && s["status"] == "unknown" && s["node_status"] == "unreachable", fmt.Sprint(s)
			}
		}
		return false, fmt.Sprintf("%d %v", code, out)
	})
	if _, err := slp.Ping(ctx, running["address"].(string)); err != nil {
		t.Errorf("the game ended with its agent: %v", err)
	}

	// Back: re-adopted, stopped, deleted.
	a2 := startAgent(t, args...)
	eventually.True(t, eventually.Within, "the console through the agent again", func() (bool, string) {
		code, out := call(t, p.addr, tok, "GET", "/servers/"+id+"/console", "")
		return code == 200 && strings.Contains(fmt.Sprint(out["lines"]), "re-attached"), fmt.Sprintf("%d %v", code, out)
	})
	status("running") // the node ready again: what its records say
	if code, out := call(t, p.addr, tok, "POST", "/servers/"+id+"/power", `{"action":"stop"}`); code/100 != 2 {
		t.Fatalf("stop: %d %v\nagent:\n%s", code, out, a2.Stderr())
	}
	status("offline")
	if code, out := call(t, p.addr, tok, "DELETE", "/servers/"+id, ""); code/100 != 2 {
		t.Fatalf("delete: %d %v", code, out)
	}
	eventually.True(t, eventually.Within, "the root on the agent removed", func() (bool, string) {
		_, err := os.Stat(filepath.Join(agentDir, "servers", id))
		return os.IsNotExist(err), fmt.Sprint(err)
	})
}

// gameCannotActAsNode: the game server at addr runs as a user of its own
// (the agent runs as root), which cannot read the agent's node key: it
// cannot act as the node towards the control plane.
func gameCannotActAsNode(t *testing.T, addr, agentDir string) {
	t.Helper()
	port := addr[strings.LastIndex(addr, ":")+1:]
	pids := testserverPIDs(port)
	if len(pids) != 1 {
		t.Fatalf("%d game processes on port %s, want 1", len(pids), port)
	}
	uid, err := strconv.ParseUint(strings.Fields(procStatus(t, pids[0])["Uid"])[0], 10, 32)
	if err != nil || uid < 200000 || uid > 299999 {
		t.Fatalf("the game on the agent runs as uid %d (%v); want one of --uid-range 200000-299999", uid, err)
	}
	key := filepath.Join(agentDir, "node.key")
	cmd := exec.Command("/bin/cat", key)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid)}}
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "Permission denied") {
		t.Errorf("the game's user read the node key: %v %q; want permission denied", err, out)
	}
}
