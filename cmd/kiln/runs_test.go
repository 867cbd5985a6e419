package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kilnhq/kiln/internal/servers/serverstest"
)

// waitRun polls a run until cond holds (60 s).
func waitRun(t *testing.T, addr, token, id, what string, cond func(run map[string]any, resources []any) bool) map[string]any {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	var out map[string]any
	for time.Now().Before(deadline) {
		var code int
		code, out = call(t, addr, token, "GET", "/deployments/runs/"+id, "")
		if code != 200 {
			t.Fatalf("GET run: %d %v", code, out)
		}
		res, _ := out["resources"].([]any)
		if cond(out["run"].(map[string]any), res) {
			return out
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("run %s: never %s: %v", id, what, out)
	return nil
}

// TestRunResumesAfterKillNine applies a network of eight kiln-test
// servers through the API, kills kiln serve with SIGKILL in the middle of
// the run, and starts it again: the run is taken over once its lease
// expires, resumed (run.resumed), and ends succeeded with exactly one
// server per key.
func TestRunResumesAfterKillNine(t *testing.T) {
	dir := t.TempDir()
	ports := serverstest.PortRange(t, 12)
	// The test polls the run: no rate limit in the way.
	args := []string{"--data-dir", dir, "--dev", "--port-range", ports.String(), "--rate-limit", "1000000"}
	p := startServe(t, args...)
	token := strings.TrimSpace(string(must(os.ReadFile(filepath.Join(dir, "bootstrap-token")))))
	var yaml strings.Builder
	yaml.WriteString("version: 1\nservers:\n")
	// Eight servers: two waves of four (the executor's parallelism), so
	// there is a moment when some are done and the run is not.
	for _, n := range []string{"a", "b", "c", "d", "e", "f", "g", "h"} {
		yaml.WriteString("  " + n + ":\n    software: kiln-test\n    memory: 256M\n    disk: 1G\n")
	}
	body, _ := json.Marshal(map[string]string{"name": "net", "yaml": yaml.String()})
	code, out := call(t, p.addr, token, "POST", "/deployments/configurations", string(body))
	if code != 201 && code != 200 {
		t.Fatalf("create configuration: %d %v", code, out)
	}
	cfgID := out["configuration"].(map[string]any)["id"].(string)
	code, out = call(t, p.addr, token, "POST", "/deployments/apply", `{"configuration_id":"`+cfgID+`"}`)
	if code != 200 && code != 201 && code != 202 {
		t.Fatalf("apply: %d %v", code, out)
	}
	runID := out["run"].(map[string]any)["id"].(string)
	// Kill once at least one server is done and the run is not.
	waitRun(t, p.addr, token, runID, "partly done", func(run map[string]any, res []any) bool {
		for _, r := range res {
			if r.(map[string]any)["status"] == "succeeded" {
				return run["status"] == "executing"
			}
		}
		return false
	})
	if err := p.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-p.done

	p2 := startServe(t, args...)
	out = waitRun(t, p2.addr, token, runID, "final", func(run map[string]any, _ []any) bool {
		s := run["status"]
		return s == "succeeded" || s == "failed" || s == "canceled"
	})
	run := out["run"].(map[string]any)
	if run["status"] != "succeeded" {
		t.Fatalf("resumed run = %v", run)
	}
	resumed := false
	for _, e := range out["events"].([]any) {
		resumed = resumed || e.(map[string]any)["event_type"] == "run.resumed"
	}
	if !resumed {
		t.Errorf("events have no run.resumed: %v", out["events"])
	}
	code, out = call(t, p2.addr, token, "GET", "/servers", "")
	if code != 200 {
		t.Fatalf("list: %d %v", code, out)
	}
	names := map[string]int{}
	for _, s := range out["servers"].([]any) {
		sv := s.(map[string]any)
		if sv["configuration_id"] == cfgID {
			names[sv["name"].(string)]++
		}
	}
	for _, n := range []string{"a", "b", "c", "d", "e", "f", "g", "h"} {
		if names[n] != 1 {
			t.Errorf("servers of the configuration after the resume: %v, want a to h once each", names)
			break
		}
	}
	if err := p2.stop(os.Interrupt); err != nil {
		t.Errorf("stop: %v\n%s", err, p2.Stderr())
	}
}
