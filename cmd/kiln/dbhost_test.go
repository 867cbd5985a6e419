package main

import (
	"bytes"
	"encoding/json"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kilnhq/kiln/internal/servers/serverstest"
	"github.com/kilnhq/kiln/internal/store/storetest"
)

// TestDBHostCommand, as an operator and a user would: `kiln admin dbhost
// add` reads the DSN from standard input and logs in; list and the data
// dir never show its password; a network with a dbservice applied through
// the API gives the attached server's process the DB_* variables; remove
// is refused while the database lives.
func TestDBHostCommand(t *testing.T) {
	dir := t.TempDir()
	ports := serverstest.PortRange(t, 5)
	p := startServe(t, "--data-dir", dir, "--dev", "--port-range", ports.String(), "--rate-limit", "1000000")
	token := strings.TrimSpace(string(must(os.ReadFile(filepath.Join(dir, "bootstrap-token")))))

	// The test cluster trusts loopback logins: a password in the DSN is
	// accepted and ignored, so it can stand for a real one here.
	u := must(url.Parse(storetest.PostgresAdminURL(t)))
	const password = "pw-never-shown-7f3a"
	u.User = url.UserPassword(u.User.Username(), password)
	add := exec.Command(kilnBin, "admin", "dbhost", "add", "main", "--engine", "postgres", "--dsn", "-", "--data-dir", dir)
	add.Env = cleanEnv()
	add.Stdin = strings.NewReader(u.String() + "\n")
	var out, errOut bytes.Buffer
	add.Stdout, add.Stderr = &out, &errOut
	if err := add.Run(); err != nil || !strings.Contains(out.String(), "\tmain\tpostgres\t") {
		t.Fatalf("dbhost add = %v: %s %s", err, out.String(), errOut.String())
	}
	list, _, code := kiln(t, "admin", "dbhost", "list", "--data-dir", dir)
	if code != 0 || !strings.Contains(list, "main") || strings.Contains(list, password) {
		t.Fatalf("dbhost list (%d) = %s", code, list)
	}
	if _, e, code := kiln(t, "admin", "dbhost", "add", "other", "--engine", "mariadb", "--dsn", "postgres://x@127.0.0.1/", "--data-dir", dir); code != 2 || !strings.Contains(e, "--dsn: a mariadb DSN starts with mariadb://") {
		t.Errorf("a postgres DSN for a mariadb host: exit %d, %s", code, e)
	}

	yaml := "version: 1\nservers:\n  lobby: {software: kiln-test, memory: 256M, disk: 1G}\ndbservices:\n  stats: {engine: postgres, attach: [lobby]}\n"
	body, _ := json.Marshal(map[string]string{"name": "net", "yaml": yaml})
	code, res := call(t, p.addr, token, "POST", "/deployments/configurations", string(body))
	if code != 200 && code != 201 {
		t.Fatalf("create configuration: %d %v", code, res)
	}
	cfgID := res["configuration"].(map[string]any)["id"].(string)
	code, res = call(t, p.addr, token, "POST", "/deployments/apply", `{"configuration_id":"`+cfgID+`"}`)
	if code != 200 && code != 202 {
		t.Fatalf("apply: %d %v", code, res)
	}
	runID := res["run"].(map[string]any)["id"].(string)
	res = waitRun(t, p.addr, token, runID, "final", func(run map[string]any, _ []any) bool {
		s := run["status"]
		return s == "succeeded" || s == "failed" || s == "canceled"
	})
	if run := res["run"].(map[string]any); run["status"] != "succeeded" {
		t.Fatalf("run = %v", run)
	}
	var dbLog string
	for _, r := range res["resources"].([]any) {
		if r := r.(map[string]any); r["resource_key"] == "dbservice/stats" {
			dbLog = jsonText(r["log"])
		}
	}
	if !strings.Contains(dbLog, "database kiln_stats_") || !strings.Contains(dbLog, "on host main") {
		t.Errorf("dbservice resource log = %s", dbLog)
	}
	code, res = call(t, p.addr, token, "GET", "/servers", "")
	if code != 200 {
		t.Fatalf("servers: %d %v", code, res)
	}
	var lobbyID string
	for _, s := range res["servers"].([]any) {
		if s := s.(map[string]any); s["name"] == "lobby" {
			lobbyID = s["id"].(string)
			if strings.Contains(jsonText(s), "DB_PASSWORD") {
				t.Errorf("the server's API answer carries the database password: %v", s)
			}
		}
	}
	env := procEnviron(t, filepath.Join(dir, "servers", lobbyID))
	if !strings.HasPrefix(env["DB_NAME"], "kiln_stats_") || len(env["DB_PASSWORD"]) != 32 || !strings.HasPrefix(env["DB_URL"], "postgresql://kiln_stats_") {
		t.Errorf("lobby's process environment: DB_NAME=%q DB_URL=%q", env["DB_NAME"], env["DB_URL"])
	}

	if _, e, code := kiln(t, "admin", "dbhost", "remove", "main", "--data-dir", dir); code != 1 || !strings.Contains(e, "still holds 1 database") {
		t.Errorf("remove of a host in use: exit %d, %s", code, e)
	}
	if err := p.stop(os.Interrupt); err != nil {
		t.Errorf("stop: %v\n%s", err, p.Stderr())
	}
	for _, f := range []string{"kiln.db", "kiln.db-wal"} {
		if b, err := os.ReadFile(filepath.Join(dir, f)); err == nil && bytes.Contains(b, []byte(password)) {
			t.Errorf("%s holds the DSN's password in plain text", f)
		}
	}
	if strings.Contains(p.Stderr(), password) || strings.Contains(p.Stderr(), env["DB_PASSWORD"]) {
		t.Error("kiln serve logged a password")
	}
	// Leave the test cluster as it was: drop what the run made.
	p2 := startServe(t, "--data-dir", dir, "--dev", "--port-range", ports.String(), "--rate-limit", "1000000")
	code, res = call(t, p2.addr, token, "PATCH", "/deployments/configurations/"+cfgID, `{"yaml":"version: 1\nservers:\n  lobby: {software: kiln-test, memory: 256M, disk: 1G}\n"}`)
	if code != 200 {
		t.Fatalf("patch: %d %v", code, res)
	}
	code, res = call(t, p2.addr, token, "POST", "/deployments/apply", `{"configuration_id":"`+cfgID+`"}`)
	if code != 200 && code != 202 {
		t.Fatalf("apply: %d %v", code, res)
	}
	res = waitRun(t, p2.addr, token, res["run"].(map[string]any)["id"].(string), "final", func(run map[string]any, _ []any) bool {
		s := run["status"]
		return s == "succeeded" || s == "failed" || s == "canceled"
	})
	if run := res["run"].(map[string]any); run["status"] != "succeeded" {
		t.Errorf("run removing the dbservice = %v", run)
	}
	if out, e, code := kiln(t, "admin", "dbhost", "remove", "main", "--data-dir", dir); code != 0 {
		t.Errorf("remove once unused: exit %d, %s %s", code, out, e)
	}
	if err := p2.stop(os.Interrupt); err != nil {
		t.Errorf("stop: %v\n%s", err, p2.Stderr())
	}
}

func jsonText(v any) string { b, _ := json.Marshal(v); return string(b) }

// procEnviron is the environment of the process whose working directory
// is root.
func procEnviron(t *testing.T, root string) map[string]string {
	t.Helper()
	env := serverstest.ProcessEnv(root)
	if env == nil {
		t.Fatalf("no process runs in %s", root)
	}
	return env
}
