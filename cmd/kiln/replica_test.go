package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kilnhq/kiln/internal/servers/serverstest"
	"github.com/kilnhq/kiln/internal/store/storetest"
)

// TestRunTakenOverByReplica: two kiln serve replicas share one PostgreSQL
// database, each with its own node. A run replica a executes is cut by a
// kill -9 of a; replica b takes it over once the lease expires
// (run.resumed) and finishes it: keys a finished stay done, keys a never
// reached are made on b's node, and a key a was in the middle of — its
// server lives on a's node, which nobody runs now — fails with a sentence
// naming that node rather than being touched from b. Never two servers
// for one key.
func TestRunTakenOverByReplica(t *testing.T) {
	pg := storetest.PostgresURL(t)
	dirA, dirB := t.TempDir(), t.TempDir()
	portsA, portsB := serverstest.PortRange(t, 12), serverstest.PortRange(t, 12)
	key := "--secret-key=" + "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="
	argsA := []string{"--data-dir", dirA, "--database-url", pg, "--node-name", "node-a", "--dev", "--port-range", portsA.String(), "--rate-limit", "1000000", key}
	argsB := []string{"--data-dir", dirB, "--database-url", pg, "--node-name", "node-b", "--dev", "--port-range", portsB.String(), "--rate-limit", "1000000", key}
	a := startServe(t, argsA...)
	token := strings.TrimSpace(string(must(os.ReadFile(filepath.Join(dirA, "bootstrap-token")))))

	var yaml strings.Builder
	yaml.WriteString("version: 1\nservers:\n")
	names := []string{"a1", "a2", "a3", "a4", "a5", "a6", "a7", "a8"}
	for _, n := range names {
		yaml.WriteString("  " + n + ":\n    software: kiln-test\n    memory: 256M\n    disk: 1G\n")
	}
	body, _ := json.Marshal(map[string]string{"name": "net", "yaml": yaml.String()})
	code, out := call(t, a.addr, token, "POST", "/deployments/configurations", string(body))
	if code != 200 {
		t.Fatalf("create configuration: %d %v", code, out)
	}
	cfgID := out["configuration"].(map[string]any)["id"].(string)
	code, out = call(t, a.addr, token, "POST", "/deployments/apply", `{"configuration_id":"`+cfgID+`"}`)
	if code != 200 {
		t.Fatalf("apply: %d %v", code, out)
	}
	runID := out["run"].(map[string]any)["id"].(string)
	waitRun(t, a.addr, token, runID, "partly done", func(run map[string]any, res []any) bool {
		for _, r := range res {
			if r.(map[string]any)["status"] == "succeeded" {
				return run["status"] == "executing"
			}
		}
		return false
	})
	if err := a.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-a.done

	b := startServe(t, argsB...)
	out = waitRun(t, b.addr, token, runID, "final", func(run map[string]any, _ []any) bool {
		s := run["status"]
		return s == "succeeded" || s == "failed" || s == "canceled"
	})
	run := out["run"].(map[string]any)
	resumed := false
	for _, e := range out["events"].([]any) {
		resumed = resumed || e.(map[string]any)["event_type"] == "run.resumed"
	}
	if !resumed {
		t.Errorf("events have no run.resumed: %v", out["events"])
	}
	switch run["status"] {
	case "succeeded":
	case "failed":
		if msg, _ := run["error"].(string); !strings.Contains(msg, `node "node-a"`) {
			t.Errorf("the resumed run failed for another reason: %v", run)
		}
	default:
		t.Errorf("resumed run = %v", run)
	}
	code, out = call(t, b.addr, token, "GET", "/servers", "")
	if code != 200 {
		t.Fatalf("list: %d %v", code, out)
	}
	perKey := map[string]int{}
	nodes := map[string]int{}
	for _, s := range out["servers"].([]any) {
		sv := s.(map[string]any)
		perKey[sv["name"].(string)]++
		nodes[sv["node"].(string)]++
	}
	for n, c := range perKey {
		if c > 1 {
			t.Errorf("%d servers named %s: a resumed step made a second one", c, n)
		}
	}
	if nodes["node-a"] == 0 {
		t.Errorf("no server on node-a: the kill came before any was made (%v)", nodes)
	}
	if err := b.stop(os.Interrupt); err != nil {
		t.Errorf("stop b: %v\n%s", err, b.Stderr())
	}
}
