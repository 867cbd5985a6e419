package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kilnhq/kiln/internal/servers/serverstest"
	"github.com/kilnhq/kiln/internal/store/storetest"
)

// TestTeamLimitsCommand: kiln admin team limits shows and sets a team's
// limits while kiln serve runs, and the API refuses the server or the
// snapshot that would pass one with 409 TEAM_LIMIT_REACHED naming it.
func TestTeamLimitsCommand(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) { teamLimitsCommand(t, "--data-dir", t.TempDir()) })
	t.Run("postgres", func(t *testing.T) {
		teamLimitsCommand(t, "--data-dir", t.TempDir(), "--database-url", storetest.PostgresURL(t))
	})
}

func teamLimitsCommand(t *testing.T, store ...string) {
	ports := serverstest.PortRange(t, 5)
	p := startServe(t, append([]string{"--dev", "--port-range", ports.String()}, store...)...)
	token := strings.TrimSpace(string(must(os.ReadFile(filepath.Join(store[1], "bootstrap-token")))))
	admin := func(args ...string) (string, string, int) {
		return kiln(t, append(append([]string{"admin", "team", "limits"}, args...), store...)...)
	}
	if out, errOut, code := admin("default"); code != 0 || out != "team default: servers none, memory none, disk none, snapshots none\n" {
		t.Fatalf("limits of a fresh team = %q %q exit %d", out, errOut, code)
	}
	if out, errOut, code := admin("default", "--servers", "1", "--memory", "8G"); code != 0 || out != "team default: servers 1, memory 8G, disk none, snapshots none\n" {
		t.Fatalf("set limits = %q %q exit %d", out, errOut, code)
	}
	if out, _, code := admin("default", "--disk", "1T", "--snapshots", "1"); code != 0 || out != "team default: servers 1, memory 8G, disk 1T, snapshots 1\n" {
		t.Fatalf("set one more (the others kept) = %q exit %d", out, code)
	}
	for _, bad := range [][]string{{"default", "--servers", "many"}, {"default", "--memory", "8"}, {"default", "--disk", "-1G"}, {"default", "--snapshots", "-1"}} {
		if _, errOut, code := admin(bad...); code != 2 || errOut == "" {
			t.Errorf("limits %v = exit %d %q, want a usage error", bad, code, errOut)
		}
	}
	if _, errOut, code := admin("nope", "--servers", "1"); code != 1 || !strings.Contains(errOut, `team "nope" not found`) {
		t.Errorf("limits of an unknown team = exit %d %q", code, errOut)
	}
	body := `{"name":"one","software":"kiln-test","memory_mb":512,"disk_mb":1024}`
	code, out := call(t, p.addr, token, "POST", "/servers", body)
	if code != 202 {
		t.Fatalf("first server: %d %v", code, out)
	}
	id := out["server"].(map[string]any)["id"].(string)
	code, out = call(t, p.addr, token, "POST", "/servers", body)
	if code != 409 || out["code"] != "TEAM_LIMIT_REACHED" || !strings.Contains(out["error"].(string), "team limit: servers") {
		t.Errorf("second server past --servers 1 = %d %v, want 409 TEAM_LIMIT_REACHED naming servers", code, out)
	}
	if out, _, code := admin("default", "--servers", "none"); code != 0 || !strings.HasPrefix(out, "team default: servers none,") {
		t.Fatalf("lift the limit = %q exit %d", out, code)
	}
	if code, out := call(t, p.addr, token, "POST", "/servers", body); code != 202 {
		t.Errorf("server after lifting the limit: %d %v", code, out)
	}

	// --snapshots 1: the first snapshot is taken, the second refused.
	waitServer(t, p.addr, token, id, "offline")
	snap := `{"source_server_id":"` + id + `","name":"s","ignore":""}`
	if code, out := call(t, p.addr, token, "POST", "/snapshots", snap); code != 202 {
		t.Fatalf("first snapshot: %d %v", code, out)
	}
	code, out = call(t, p.addr, token, "POST", "/snapshots", snap)
	if code != 409 || out["code"] != "TEAM_LIMIT_REACHED" ||
		out["error"] != "the team may keep at most 1 snapshot and has 1; delete one first (team limit: snapshots)" {
		t.Errorf("second snapshot past --snapshots 1 = %d %v, want 409 TEAM_LIMIT_REACHED naming snapshots", code, out)
	}
}
