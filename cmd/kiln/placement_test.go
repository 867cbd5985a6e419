package main

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/kilnhq/kiln/internal/servers/serverstest"
)

// TestPlacementFlags: kiln serve's local node and an agent report the
// memory and disk --node-memory and --node-disk say, kiln admin node list
// shows them, and placement holds kiln serve's servers to the memory
// times --memory-overcommit and the disk; bad values are usage errors.
func TestPlacementFlags(t *testing.T) {
	good := []string{"--server", "https://127.0.0.1:7000", "--public-host", "127.0.0.2", "--data-dir", t.TempDir()}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"serve", "--memory-overcommit", "0"}, "--memory-overcommit 0: want more than 0, at most 100"},
		{[]string{"serve", "--memory-overcommit", "-1"}, "--memory-overcommit -1: want more than 0, at most 100"},
		{[]string{"serve", "--memory-overcommit", "101"}, "--memory-overcommit 101: want more than 0, at most 100"},
		{[]string{"serve", "--memory-overcommit", "NaN"}, "--memory-overcommit NaN: want more than 0, at most 100"},
		{[]string{"serve", "--memory-overcommit", "lots"}, `invalid value "lots" for flag -memory-overcommit`},
		{[]string{"serve", "--node-memory", "16"}, `--node-memory "16": must be a whole number with a unit: M, G or T (512M, 2G, 1T), not "16"`},
		{[]string{"serve", "--node-memory", "100M"}, `--node-memory "100M": must be at least 256M`},
		{[]string{"serve", "--node-disk", "512M"}, `--node-disk "512M": must be at least 1G`},
		{append([]string{"agent"}, append(good, "--node-memory", "1.5G")...), `--node-memory "1.5G": must be a whole number with a unit`},
		{append([]string{"agent"}, append(good, "--node-disk", "-2G")...), `--node-disk "-2G": must be a whole number with a unit`},
	} {
		_, errOut, code := kiln(t, c.args...)
		if code != 2 || !strings.Contains(errOut, c.want) {
			t.Errorf("kiln %q: exit %d, stderr %q; want exit 2 mentioning %q", c.args, code, errOut, c.want)
		}
	}

	dir := t.TempDir()
	p := startServe(t, "--data-dir", dir, "--dev", "--port-range", serverstest.PortRange(t, 5).String(), "--cluster-addr", "127.0.0.1:0",
		"--node-memory", "1G", "--node-disk", "2G", "--memory-overcommit", "1.5")
	m := clusterAddrRE.FindStringSubmatch(p.Stderr())
	if m == nil {
		t.Fatalf("no node endpoint in the log:\n%s", p.Stderr())
	}
	startAgent(t, agentArgs("https://"+m[1], dir, filepath.Join(t.TempDir(), "agent"), serverstest.PortRange(t, 5).String(),
		"--join-token", nodeAdd(t, dir, "edge"), "--node-memory", "3G", "--node-disk", "4G")...)
	edge := waitNode(t, dir, "edge", "edge ready", func(n nodeJSON, ok bool) bool { return ok && n.Status == "ready" })
	local := nodeList(t, dir)["local"]
	for _, n := range []struct {
		got               nodeJSON
		memory, diskMiB   int64
		memFree, diskFree *int64
	}{{local, 1024, 2048, local.MemoryFreeMB, local.DiskFreeMB}, {edge, 3072, 4096, edge.MemoryFreeMB, edge.DiskFreeMB}} {
		if n.got.MemoryTotalMB == nil || *n.got.MemoryTotalMB != n.memory || n.got.DiskTotalMB == nil || *n.got.DiskTotalMB != n.diskMiB ||
			n.memFree == nil || *n.memFree > n.memory || n.diskFree == nil || *n.diskFree > n.diskMiB {
			b, _ := json.Marshal(n.got)
			t.Errorf("node %s: %s; want %d MiB of memory, %d of disk, free at most those", n.got.Name, b, n.memory, n.diskMiB)
		}
	}

	// 1 GiB × 1.5 on the local node: 1024 + 512 MiB, no more.
	token := token(t, dir)
	server := func(mem, disk int) string {
		return fmt.Sprintf(`{"name":"s","software":"kiln-test","memory_mb":%d,"disk_mb":%d}`, mem, disk)
	}
	onLocal := func(mem, disk int) string {
		return fmt.Sprintf(`{"name":"s","software":"kiln-test","memory_mb":%d,"disk_mb":%d,"node":"local"}`, mem, disk)
	}
	for _, mem := range []int{1024, 512} {
		if code, out := call(t, p.addr, token, "POST", "/servers", onLocal(mem, 1024)); code != 202 || out["server"].(map[string]any)["node"] != "local" {
			t.Fatalf("a server of %d MiB: %d %v; want 202 on local", mem, code, out)
		}
	}
	// The agent (3 GiB × 1.5) is a candidate too: its channel reaches
	// this kiln serve.
	code, out := call(t, p.addr, token, "POST", "/servers", server(5000, 4096))
	want := map[string]any{
		"error": "no node can take the server: node edge: 4608 MiB of memory free, 5000 asked; node local: 0 MiB of memory free, 5000 asked and a disk of 2048 MiB, 4096 asked",
		"code":  "NO_CAPACITY",
		"details": []any{
			map[string]any{"node": "edge", "reason": "4608 MiB of memory free, 5000 asked"},
			map[string]any{"node": "local", "reason": "0 MiB of memory free, 5000 asked and a disk of 2048 MiB, 4096 asked"},
		},
	}
	if code != 409 || !reflect.DeepEqual(out, want) {
		t.Errorf("a server past 1.5 × 1 GiB and 2 GiB of disk here and 1.5 × 3 GiB on edge: %d %v; want 409 %v", code, out, want)
	}
	if l := nodeList(t, dir)["local"]; l.MemoryAllocatedMB != 1536 || l.Servers != 2 {
		t.Errorf("the local node lists %d MiB allocated to %d servers; want 1536 to 2", l.MemoryAllocatedMB, l.Servers)
	}
}
