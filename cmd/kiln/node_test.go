package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kilnhq/kiln/internal/servers/serverstest"
	"github.com/kilnhq/kiln/internal/store/storetest"
)

// TestReplicasRecoverOnlyTheirNode: two kiln serve sharing one
// PostgreSQL, each its own node; a server started on one is not started
// again by the other's recovery (it would run twice).
func TestReplicasRecoverOnlyTheirNode(t *testing.T) {
	url := storetest.PostgresURL(t)
	ports := serverstest.PortRange(t, 5)
	dirA, dirB := t.TempDir(), t.TempDir()
	a := startServe(t, "--dev", "--data-dir", dirA, "--database-url", url, "--port-range", ports.String(), "--node-name", "node-a")
	token := strings.TrimSpace(string(must(os.ReadFile(filepath.Join(dirA, "bootstrap-token")))))
	code, out := call(t, a.addr, token, "POST", "/servers", `{"name":"one","software":"kiln-test","memory_mb":512,"disk_mb":1024}`)
	if code != 202 {
		t.Fatalf("create: %d %v", code, out)
	}
	sv := out["server"].(map[string]any)
	id, addr := sv["id"].(string), sv["address"].(string)
	if sv["node"] != "node-a" {
		t.Errorf("node = %v, want node-a", sv["node"])
	}
	port := addr[strings.LastIndex(addr, ":")+1:]
	waitServer(t, a.addr, token, id, "offline")
	if code, out := call(t, a.addr, token, "POST", "/servers/"+id+"/power", `{"action":"start"}`); code != 202 {
		t.Fatalf("start: %d %v", code, out)
	}
	waitServer(t, a.addr, token, id, "running")
	before := testserverPIDs(port)
	if len(before) != 1 {
		t.Fatalf("game server processes on port %s: %v, want 1", port, before)
	}

	b := startServe(t, "--dev", "--data-dir", dirB, "--database-url", url, "--port-range", ports.String(), "--node-name", "node-b")
	// b has recovered (it serves only after recovery): the server is still
	// the one a runs, once.
	if sv := waitServer(t, b.addr, token, id, "running"); sv["node"] != "node-a" {
		t.Errorf("node seen through b = %v", sv["node"])
	}
	// Recovery is done before b serves: had b taken the server for its
	// own, it would have killed a's process (a survivor of "its" crash)
	// and started another. Nothing to wait for but a moment for a start.
	time.Sleep(500 * time.Millisecond)
	if after := testserverPIDs(port); len(after) != 1 || after[0] != before[0] {
		t.Errorf("game server processes on port %s after the other node's recovery: %v, want a's %v untouched", port, after, before)
	}
	for _, p := range []*proc{b, a} {
		if err := p.stop(os.Interrupt); err != nil {
			t.Errorf("stop: %v\n%s", err, p.Stderr())
		}
	}
}

// testserverPIDs lists the pids of `kiln testserver` processes on port.
func testserverPIDs(port string) []int {
	var out []int
	cmdlines, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, f := range cmdlines {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		args := strings.Split(string(b), "\x00")
		if len(args) >= 4 && args[1] == "testserver" && args[2] == "--port" && args[3] == port {
			pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(f)))
			out = append(out, pid)
		}
	}
	return out
}
