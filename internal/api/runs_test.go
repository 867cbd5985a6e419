package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kilnhq/kiln/internal/auth"
	"github.com/kilnhq/kiln/internal/deploy/executor"
	"github.com/kilnhq/kiln/internal/deploy/plan"
	"github.com/kilnhq/kiln/internal/deploy/runs"
	"github.com/kilnhq/kiln/internal/store"
	"github.com/kilnhq/kiln/internal/store/storetest"
)

// specNetwork has two servers, a proxy and a database.
const specNetwork = `version: 1
servers:
  lobby:
    software: paper
    memory: 2G
  survival:
    software: paper
    memory: 2G
proxies:
  edge:
    software: velocity
    memory: 1G
    servers: [lobby, survival]
dbservices:
  stats:
    engine: postgres
    attach: [lobby]
`

// withRuns gives the harness a run queue and its executor's planning, as
// kiln serve has (the executor is not started: nothing executes the runs
// queued).
func withRuns(q *runs.Queue) harnessOpt {
	return func(_ *Config, d *Deps) {
		d.Runs = q
		d.Planner = executor.New(q, d.Deploy, d.Servers, d.Catalog, executor.Options{Owner: "inst_api", TeamSecrets: d.Secrets,
			DigestKey: []byte("0123456789abcdef0123456789abcdef")})
	}
}

// newRunsHarness is a harness with a run queue on db.
func newRunsHarness(t *testing.T, db *store.DB) (*harness, *runs.Queue) {
	t.Helper()
	q := runs.New(db, runs.Options{})
	return newHarness(t, db, withRuns(q)), q
}

// createConfiguration creates a configuration and returns its id.
func (h *harness) createConfiguration(name, yaml string) string {
	h.t.Helper()
	st, out := h.sendJSON("POST", "/deployments/configurations", map[string]any{"name": name, "yaml": yaml})
	if st != 200 {
		h.t.Fatalf("create configuration %s: %d %v", name, st, out)
	}
	return out["configuration"].(map[string]any)["id"].(string)
}

// otherTeamToken returns an agent token of a second team.
func (h *harness) otherTeamToken() string {
	h.t.Helper()
	other, err := h.auth.CreateTeam(h.t.Context(), "other")
	if err != nil {
		h.t.Fatal(err)
	}
	tok, _, err := h.auth.CreateToken(h.t.Context(), other.Name, auth.KindAgent, "bot")
	if err != nil {
		h.t.Fatal(err)
	}
	return string(tok)
}

// apply applies a configuration and returns the whole answer.
func (h *harness) apply(cfgID, key string) map[string]any {
	h.t.Helper()
	body := map[string]any{"configuration_id": cfgID}
	if key != "" {
		body["idempotency_key"] = key
	}
	st, out := h.sendJSON("POST", "/deployments/apply", body)
	if st != 200 || out["ok"] != true {
		h.t.Fatalf("apply %s (key %q): %d %v", cfgID, key, st, out)
	}
	return out
}

// TestApplyAndRuns drives apply, the run list, the run detail and cancel on
// both engines, checking exact shapes (the harness validates each answer
// against openapi.yaml and the seed's document too).
func TestApplyAndRuns(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		h, _ := newRunsHarness(t, db)
		cfg := h.createConfiguration("network", specNetwork)

		// The first apply pushes version 1 and queues a run.
		out := h.apply(cfg, "")
		run := out["run"].(map[string]any)
		push := out["push"].(map[string]any)
		if out["replayed"] != false || push["created"] != true || push["version_number"] != 1.0 ||
			!strings.HasPrefix(push["version_id"].(string), "ver_") {
			t.Fatalf("first apply = %v", out)
		}
		wantApply := map[string]any{
			"id": run["id"], "status": "queued", "configuration_id": cfg, "configuration_version_id": push["version_id"],
			"configuration_version_number": 1.0, "resource_count": 4.0, "queue_position": 0.0, "created_at": run["created_at"],
			"server_count": 2.0, "proxy_count": 1.0, "dbservice_count": 1.0,
		}
		if !strings.HasPrefix(run["id"].(string), "run_") || run["created_at"].(float64) < 1e12 || fmt.Sprint(run) != fmt.Sprint(wantApply) {
			t.Fatalf("first apply's run = %v, want %v", run, wantApply)
		}
		st, vs := h.sendJSON("GET", "/deployments/configurations/"+cfg+"/versions/1", nil)
		if v := vs["version"].(map[string]any); st != 200 || v["push_message"] != "Pushed by apply." || !strings.HasPrefix(v["pushed_by"].(string), "user:") {
			t.Fatalf("version 1 = %d %v", st, vs)
		}

		// Unchanged: no push, and the run waits behind the first.
		out = h.apply(cfg, "")
		run2 := out["run"].(map[string]any)
		if push := out["push"].(map[string]any); push["created"] != false || push["version_number"] != 1.0 ||
			run2["queue_position"] != 1.0 || run2["id"] == run["id"] || out["replayed"] != false {
			t.Fatalf("second apply = %v", out)
		}

		// Changed YAML with a key: version 2, third in the queue.
		if st, out := h.sendJSON("PATCH", "/deployments/configurations/"+cfg, map[string]any{"yaml": strings.Replace(specNetwork, "attach: [lobby]", "attach: [lobby, survival]", 1)}); st != 200 {
			t.Fatalf("update: %d %v", st, out)
		}
		out = h.apply(cfg, "deploy-42")
		run3 := out["run"].(map[string]any)
		if push := out["push"].(map[string]any); push["created"] != true || push["version_number"] != 2.0 ||
			run3["configuration_version_number"] != 2.0 || run3["queue_position"] != 2.0 {
			t.Fatalf("apply of a changed configuration = %v", out)
		}

		// The key again, after another change: the same run, nothing pushed.
		if st, out := h.sendJSON("PATCH", "/deployments/configurations/"+cfg, map[string]any{"yaml": specNetwork}); st != 200 {
			t.Fatalf("update: %d %v", st, out)
		}
		out = h.apply(cfg, "deploy-42")
		if r := out["run"].(map[string]any); out["replayed"] != true || r["id"] != run3["id"] || r["configuration_version_number"] != 2.0 ||
			out["push"].(map[string]any)["created"] != false || out["push"].(map[string]any)["version_number"] != 2.0 {
			t.Fatalf("replayed apply = %v", out)
		}
		if st, out := h.sendJSON("GET", "/deployments/configurations/"+cfg+"/versions", nil); st != 200 || out["count"] != 2.0 {
			t.Fatalf("versions after a replay: %d %v, want 2 versions", st, out)
		}
		// The key with another configuration.
		cfg2 := h.createConfiguration("second", specLobby)
		st, _, data := h.do("POST", Prefix+"/deployments/apply", h.token,
			strings.NewReader(`{"configuration_id":"`+cfg2+`","idempotency_key":"deploy-42"}`), "Content-Type", "application/json")
		wantError(t, st, data, 409, "IDEMPOTENCY_KEY_REUSED", "another configuration")
		if st, out := h.sendJSON("GET", "/deployments/configurations/"+cfg2, nil); st != 200 || out["configuration"].(map[string]any)["latest_pushed_version_id"] != nil {
			t.Fatalf("a refused apply pushed: %d %v", st, out)
		}

		// Refusals.
		for _, c := range []struct {
			name, body string
			status     int
			code, msg  string
		}{
			{"no configuration", `{}`, 400, "VALIDATION_ERROR", "configuration_id"},
			{"empty key", `{"configuration_id":"` + cfg + `","idempotency_key":""}`, 400, "VALIDATION_ERROR", "idempotency_key"},
			{"long key", `{"configuration_id":"` + cfg + `","idempotency_key":"` + strings.Repeat("k", 201) + `"}`, 400, "VALIDATION_ERROR", "idempotency_key"},
			{"unknown field", `{"configuration_id":"` + cfg + `","force":true}`, 400, "VALIDATION_ERROR", "force"},
			{"unknown configuration", `{"configuration_id":"cfg_nope"}`, 404, "CONFIGURATION_NOT_FOUND", "not found"},
		} {
			t.Run(c.name, func(t *testing.T) {
				st, _, data := h.do("POST", Prefix+"/deployments/apply", h.token, strings.NewReader(c.body), "Content-Type", "application/json")
				wantError(t, st, data, c.status, c.code, c.msg)
			})
		}
		if out := h.apply(cfg, strings.Repeat("é", 200)); out["replayed"] != false {
			t.Fatalf("apply with a 200-character key = %v", out)
		}

		// List: newest first, filters, limit.
		st, out = h.sendJSON("GET", "/deployments/runs", nil)
		list := out["runs"].([]any)
		if st != 200 || out["count"] != 4.0 || len(list) != 4 || list[3].(map[string]any)["id"] != run["id"] || list[1].(map[string]any)["id"] != run3["id"] {
			t.Fatalf("list = %d %v", st, out)
		}
		first := list[3].(map[string]any)
		wantList := map[string]any{
			"id": run["id"], "status": "queued", "configuration_id": cfg, "resource_count": 4.0, "created_at": run["created_at"],
			"stage": nil, "configuration_version_id": push["version_id"], "configuration_version_number": 1.0, "queue_position": 0.0,
			"summary":    map[string]any{"create": 0.0, "update": 0.0, "replace": 0.0, "delete": 0.0, "noop": 0.0, "succeeded": 0.0, "failed": 0.0},
			"started_at": nil, "completed_at": nil, "error": nil, "failure_class": nil,
		}
		if fmt.Sprint(first) != fmt.Sprint(wantList) {
			t.Fatalf("listed run = %v, want %v", first, wantList)
		}
		for _, c := range []struct {
			query string
			want  int
		}{
			{"configuration_id=" + cfg, 4}, {"configuration_id=" + cfg2, 0}, {"configuration_id=cfg_nope", 0},
			{"status=queued", 4}, {"status=canceled", 0}, {"limit=1", 1}, {"limit=200", 4},
			{"configuration_id=" + cfg + "&status=queued&limit=2", 2},
		} {
			st, out := h.sendJSON("GET", "/deployments/runs?"+c.query, nil)
			if st != 200 || out["count"] != float64(c.want) || len(out["runs"].([]any)) != c.want {
				t.Errorf("list?%s = %d %v, want %d runs", c.query, st, out, c.want)
			}
		}
		for _, q := range []string{"limit=0", "limit=201", "limit=-1", "limit=x", "status=done", "limit=1&limit=2"} {
			st, _, data := h.do("GET", Prefix+"/deployments/runs?"+q, h.token, nil)
			wantError(t, st, data, 400, "VALIDATION_ERROR", "")
		}

		// Detail of a queued run: no plan yet, one event.
		st, out = h.sendJSON("GET", "/deployments/runs/"+run["id"].(string), nil)
		detail := out["run"].(map[string]any)
		events := out["events"].([]any)
		if st != 200 || len(out["resources"].([]any)) != 0 || len(events) != 1 || detail["spec_hash"] == "" ||
			fmt.Sprint(detail["checkpoint"]) != fmt.Sprint(map[string]any{"done": []any{}, "plan_hash": nil}) {
			t.Fatalf("detail = %d %v", st, out)
		}
		if e := events[0].(map[string]any); e["event_type"] != "run.queued" || e["stage"] != nil || e["data"] != nil ||
			!strings.HasPrefix(e["message"].(string), "Queued by user:") || e["created_at"] != run["created_at"] {
			t.Fatalf("event = %v", e)
		}

		// Cancel the first run: canceled at once; the others move up.
		st, out = h.sendJSON("POST", "/deployments/runs/"+run["id"].(string)+"/cancel", nil)
		canceled := out["run"].(map[string]any)
		if st != 200 || out["ok"] != true || canceled["status"] != "canceled" || canceled["failure_class"] != "canceled" ||
			canceled["error"] == nil || canceled["completed_at"] == nil || canceled["stage"] != nil || canceled["queue_position"] != 0.0 {
			t.Fatalf("cancel = %d %v", st, out)
		}
		if st, again := h.sendJSON("POST", "/deployments/runs/"+run["id"].(string)+"/cancel", nil); st != 200 ||
			fmt.Sprint(again["run"]) != fmt.Sprint(canceled) {
			t.Fatalf("second cancel = %d %v, want the run unchanged %v", st, again, canceled)
		}
		_, out = h.sendJSON("GET", "/deployments/runs/"+run["id"].(string), nil)
		events = out["events"].([]any)
		if last := events[len(events)-1].(map[string]any); len(events) != 2 || last["event_type"] != "run.canceled" {
			t.Fatalf("events after cancel = %v", events)
		}
		if _, out := h.sendJSON("GET", "/deployments/runs/"+run2["id"].(string), nil); out["run"].(map[string]any)["queue_position"] != 0.0 {
			t.Fatalf("the second run after the first was canceled = %v, want queue_position 0", out["run"])
		}
		if _, out := h.sendJSON("GET", "/deployments/runs?status=canceled", nil); out["count"] != 1.0 {
			t.Fatalf("list?status=canceled = %v", out)
		}

		// Unknown runs.
		for _, c := range []struct{ method, path string }{
			{"GET", "/deployments/runs/run_nope"}, {"POST", "/deployments/runs/run_nope/cancel"},
		} {
			st, _, data := h.do(c.method, Prefix+c.path, h.token, nil)
			wantError(t, st, data, 404, "RUN_NOT_FOUND", "run not found")
		}

		// Another team sees none of it.
		tok := h.otherTeamToken()
		for _, c := range []struct{ method, path string }{
			{"GET", "/deployments/runs/" + run2["id"].(string)}, {"POST", "/deployments/runs/" + run2["id"].(string) + "/cancel"},
		} {
			st, _, data := h.do(c.method, Prefix+c.path, tok, nil)
			wantError(t, st, data, 404, "RUN_NOT_FOUND", "run not found")
		}
		for _, q := range []string{"", "?configuration_id=" + cfg} {
			if st, out := h.sendJSON("GET", "/deployments/runs"+q, nil, tok); st != 200 || out["count"] != 0.0 {
				t.Fatalf("the other team's list%s = %d %v", q, st, out)
			}
		}
		st, _, data = h.do("POST", Prefix+"/deployments/apply", tok, strings.NewReader(`{"configuration_id":"`+cfg+`"}`), "Content-Type", "application/json")
		wantError(t, st, data, 404, "CONFIGURATION_NOT_FOUND", "not found")
		// Its own key of the same name is its own.
		cfgOther := ""
		if st, out := h.sendJSON("POST", "/deployments/configurations", map[string]any{"name": "network", "yaml": specLobby}, tok); st != 200 {
			t.Fatalf("the other team's create: %d %v", st, out)
		} else {
			cfgOther = out["configuration"].(map[string]any)["id"].(string)
		}
		if st, out := h.sendJSON("POST", "/deployments/apply", map[string]any{"configuration_id": cfgOther, "idempotency_key": "deploy-42"}, tok); st != 200 || out["replayed"] != false {
			t.Fatalf("the other team's apply with the same key = %d %v", st, out)
		}
		if _, out := h.sendJSON("GET", "/deployments/runs/"+run2["id"].(string), nil); out["run"].(map[string]any)["status"] != "queued" {
			t.Fatalf("the other team's cancel changed the run: %v", out["run"])
		}

		// A configuration with an open run cannot be deleted; once its runs
		// are canceled it can, and its runs go with it.
		st, _, data = h.do("DELETE", Prefix+"/deployments/configurations/"+cfg, h.token, nil)
		wantError(t, st, data, 409, "CONFIGURATION_BUSY", "queued or executing")
		_, out = h.sendJSON("GET", "/deployments/runs?status=queued&configuration_id="+cfg, nil)
		for _, r := range out["runs"].([]any) {
			if st, out := h.sendJSON("POST", "/deployments/runs/"+r.(map[string]any)["id"].(string)+"/cancel", nil); st != 200 {
				t.Fatalf("cancel: %d %v", st, out)
			}
		}
		if st, out := h.sendJSON("DELETE", "/deployments/configurations/"+cfg, nil); st != 200 || out["deleted"] != true {
			t.Fatalf("delete after cancel: %d %v", st, out)
		}
		st, _, data = h.do("GET", Prefix+"/deployments/runs/"+run2["id"].(string), h.token, nil)
		wantError(t, st, data, 404, "RUN_NOT_FOUND", "run not found")
	})
}

// TestRunDetailOfAnExecutedRun: a run an executor planned, executed and
// finished answers its resources, events, summary and checkpoint, and can
// no longer be canceled; one executing is marked and stays executing.
func TestRunDetailOfAnExecutedRun(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		h, q := newRunsHarness(t, db)
		ctx := t.Context()
		cfg := h.createConfiguration("network", specLobby)
		first := h.apply(cfg, "")["run"].(map[string]any)["id"].(string)

		const owner = "inst_test"
		claimed, ok, err := q.Claim(ctx, owner, time.Minute)
		if err != nil || !ok || claimed.ID != first {
			t.Fatalf("Claim = %v, %v, %v; want run %s", claimed.ID, ok, err, first)
		}
		key := plan.Key(plan.Server, "lobby")
		res := runs.Resource{Key: key, Type: plan.Server, Action: plan.Create, Status: runs.ResourcePending,
			Desired: json.RawMessage(`{"memory":2147483648}`)}
		if err := q.UpsertResources(ctx, first, owner, []runs.Resource{res}); err != nil {
			t.Fatal(err)
		}
		if err := q.Checkpoint(ctx, first, owner, runs.Checkpoint{PlanHash: "sha256:plan"}); err != nil {
			t.Fatal(err)
		}
		if err := q.SetStatus(ctx, first, owner, runs.Executing); err != nil {
			t.Fatal(err)
		}

		// Executing: the detail shows the stage; a cancel is requested.
		_, out := h.sendJSON("GET", "/deployments/runs/"+first, nil)
		if r := out["run"].(map[string]any); r["status"] != "executing" || r["stage"] != "executing" || r["started_at"] == nil ||
			fmt.Sprint(r["checkpoint"]) != fmt.Sprint(map[string]any{"done": []any{}, "plan_hash": "sha256:plan"}) {
			t.Fatalf("executing run = %v", r)
		}
		st, out := h.sendJSON("POST", "/deployments/runs/"+first+"/cancel", nil)
		if r := out["run"].(map[string]any); st != 200 || r["status"] != "executing" || r["completed_at"] != nil {
			t.Fatalf("cancel of an executing run = %d %v", st, out)
		}
		if stop, err := q.Renew(ctx, first, owner, time.Minute); err != nil || !stop {
			t.Fatalf("Renew = %v, %v; want the cancel requested", stop, err)
		}

		res.Status, res.Attempt, res.StartedAt, res.CompletedAt = runs.ResourceSucceeded, 1, 1700000000000, 1700000001000
		res.After, res.Log = json.RawMessage(`{"server_id":"s1"}`), []string{"created", "started"}
		if err := q.UpsertResources(ctx, first, owner, []runs.Resource{res}); err != nil {
			t.Fatal(err)
		}
		if err := q.AddEvent(ctx, first, owner, runs.Event{Type: runs.EventResourceSucceeded, Message: "Created server/lobby.",
			Data: json.RawMessage(`{"resource_key":"server/lobby"}`)}); err != nil {
			t.Fatal(err)
		}
		if err := q.Checkpoint(ctx, first, owner, runs.Checkpoint{Done: []string{key}, PlanHash: "sha256:plan"}); err != nil {
			t.Fatal(err)
		}
		if err := q.Finish(ctx, first, owner, runs.Succeeded, runs.Summary{Create: 1, Succeeded: 1}, "", ""); err != nil {
			t.Fatal(err)
		}

		st, out = h.sendJSON("GET", "/deployments/runs/"+first, nil)
		r := out["run"].(map[string]any)
		if st != 200 || r["status"] != "succeeded" || r["stage"] != nil || r["completed_at"] == nil || r["error"] != nil ||
			fmt.Sprint(r["summary"]) != fmt.Sprint(map[string]any{"create": 1.0, "update": 0.0, "replace": 0.0, "delete": 0.0, "noop": 0.0, "succeeded": 1.0, "failed": 0.0}) ||
			fmt.Sprint(r["checkpoint"]) != fmt.Sprint(map[string]any{"done": []any{key}, "plan_hash": "sha256:plan"}) {
			t.Fatalf("finished run = %d %v", st, r)
		}
		resources := out["resources"].([]any)
		wantRes := map[string]any{
			"resource_key": key, "resource_type": "server", "action": "create", "status": "succeeded", "attempt": 1.0,
			"desired": map[string]any{"memory": 2147483648.0}, "before": nil, "after": map[string]any{"server_id": "s1"},
			"log": []any{"created", "started"}, "error": nil, "started_at": 1700000000000.0, "completed_at": 1700000001000.0,
		}
		got := resources[0].(map[string]any)
		if len(resources) != 1 || got["updated_at"] == nil {
			t.Fatalf("resources = %v", resources)
		}
		delete(got, "updated_at")
		if fmt.Sprint(got) != fmt.Sprint(wantRes) {
			t.Fatalf("resource = %v, want %v", got, wantRes)
		}
		var types []string
		for _, e := range out["events"].([]any) {
			types = append(types, e.(map[string]any)["event_type"].(string))
		}
		if want := "run.queued run.started run.cancel_requested resource.succeeded run.succeeded"; strings.Join(types, " ") != want {
			t.Fatalf("events = %s, want %s", strings.Join(types, " "), want)
		}
		if e := out["events"].([]any)[3].(map[string]any); e["stage"] != "executing" || fmt.Sprint(e["data"]) != fmt.Sprint(map[string]any{"resource_key": "server/lobby"}) {
			t.Fatalf("resource event = %v", e)
		}

		st, _, data := h.do("POST", Prefix+"/deployments/runs/"+first+"/cancel", h.token, nil)
		wantError(t, st, data, 409, "CONFLICT", "already finished")
	})
}

// failRunInserts makes the database refuse every insert into runs (a
// trigger: the real database failing, no code of Kiln's changed) until
// the returned function drops it.
func failRunInserts(t *testing.T, db *store.DB) (restore func()) {
	t.Helper()
	create := []string{`CREATE TRIGGER fail_runs BEFORE INSERT ON runs BEGIN SELECT RAISE(ABORT, 'injected failure'); END`}
	drop := []string{`DROP TRIGGER fail_runs`}
	if db.Dialect() == store.Postgres {
		create = []string{
			`CREATE FUNCTION fail_runs() RETURNS trigger LANGUAGE plpgsql AS 'BEGIN RAISE EXCEPTION ''injected failure''; END'`,
			`CREATE TRIGGER fail_runs BEFORE INSERT ON runs FOR EACH ROW EXECUTE FUNCTION fail_runs()`,
		}
		drop = []string{`DROP TRIGGER fail_runs ON runs`, `DROP FUNCTION fail_runs()`}
	}
	for _, q := range create {
		if _, err := db.Write().ExecContext(t.Context(), q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	return func() {
		for _, q := range drop {
			if _, err := db.Write().ExecContext(t.Context(), q); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
	}
}

// TestApplyFailingLeavesNothing: an apply whose run cannot be queued
// (the database refuses the insert, after the push in the same call)
// answers 500 and leaves no version behind: the configuration is still
// unpushed and no run exists; the next apply pushes version 1 and queues
// its run. Before, the push was its own transaction and stayed: a
// version nobody applied, and the next apply found nothing to push.
func TestApplyFailingLeavesNothing(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		h, _ := newRunsHarness(t, db)
		cfg := h.createConfiguration("network", specNetwork)
		restore := failRunInserts(t, db)
		st, _, body := h.do("POST", Prefix+"/deployments/apply", h.token,
			strings.NewReader(`{"configuration_id":"`+cfg+`","idempotency_key":"k1"}`), "Content-Type", "application/json")
		wantError(t, st, body, 500, "INTERNAL", "internal error")
		if st, out := h.sendJSON("GET", "/deployments/configurations/"+cfg, nil); st != 200 ||
			out["configuration"].(map[string]any)["latest_pushed_version_id"] != nil {
			t.Fatalf("configuration after the failed apply: %d %v; want no version pushed", st, out)
		}
		if st, out := h.sendJSON("GET", "/deployments/configurations/"+cfg+"/versions", nil); st != 200 || out["count"] != 0.0 {
			t.Fatalf("versions after the failed apply: %d %v; want none", st, out)
		}
		if st, out := h.sendJSON("GET", "/deployments/runs", nil); st != 200 || out["count"] != 0.0 {
			t.Fatalf("runs after the failed apply: %d %v; want none", st, out)
		}
		restore()
		out := h.apply(cfg, "k1") // the key was not kept either
		if push := out["push"].(map[string]any); push["created"] != true || push["version_number"] != 1.0 || out["replayed"] != false {
			t.Fatalf("apply after the failure = %v; want version 1 pushed by it, not a replay", out)
		}
	})
}

// TestConcurrentAppliesWithOneKey: twenty applies at once with one key
// make one run (and one version); each answers it.
func TestConcurrentAppliesWithOneKey(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		h, _ := newRunsHarness(t, db)
		cfg := h.createConfiguration("network", specNetwork)
		body := `{"configuration_id":"` + cfg + `","idempotency_key":"once"}`

		const n = 20
		var wg sync.WaitGroup
		ids := make([]string, n)
		errs := make([]error, n)
		start := make(chan struct{})
		for i := range n {
			wg.Go(func() {
				<-start
				ids[i], errs[i] = h.applyRaw(body)
			})
		}
		close(start)
		wg.Wait()
		for i := range n {
			if errs[i] != nil {
				t.Fatalf("apply %d: %v", i, errs[i])
			}
			if ids[i] != ids[0] {
				t.Fatalf("apply %d answered run %s, apply 0 run %s", i, ids[i], ids[0])
			}
		}
		if st, out := h.sendJSON("GET", "/deployments/runs", nil); st != 200 || out["count"] != 1.0 {
			t.Fatalf("runs after %d applies with one key: %d %v", n, st, out)
		}
		if st, out := h.sendJSON("GET", "/deployments/configurations/"+cfg+"/versions", nil); st != 200 || out["count"] != 1.0 {
			t.Fatalf("versions after %d applies with one key: %d %v", n, st, out)
		}
	})
}

// applyRaw applies from any goroutine (no t.Fatal) and returns the run id.
func (h *harness) applyRaw(body string) (string, error) {
	req, err := http.NewRequestWithContext(h.t.Context(), "POST", h.url+Prefix+"/deployments/apply", strings.NewReader(body))
	if err != nil {
		return "", err
	}
	req.Header.Set("Authorization", "Bearer "+h.token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := h.client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	var out struct {
		Run struct {
			ID string `json:"id"`
		} `json:"run"`
	}
	if resp.StatusCode != 200 || json.Unmarshal(data, &out) != nil || out.Run.ID == "" {
		return "", fmt.Errorf("status %d: %s", resp.StatusCode, data)
	}
	return out.Run.ID, nil
}

// TestRunsDisabled: without a run queue (kiln serve before its executor
// is wired) the four routes and the plan answer 503 and nothing is pushed. The seed
// documents no 503 for them, so these answers are validated against our
// document only.
func TestRunsDisabled(t *testing.T) {
	h := newHarness(t, sqliteDB(t))
	cfg := h.createConfiguration("network", specLobby)
	h.client = &http.Client{Transport: oursOnlyTransport{t: t}}
	for _, c := range []struct {
		method, path string
		body         io.Reader
	}{
		{"POST", "/deployments/apply", bytes.NewReader([]byte(`{"configuration_id":"` + cfg + `"}`))},
		{"POST", "/deployments/configurations/" + cfg + "/plan", nil},
		{"GET", "/deployments/runs", nil},
		{"GET", "/deployments/runs/run_x", nil},
		{"POST", "/deployments/runs/run_x/cancel", nil},
	} {
		st, _, data := h.do(c.method, Prefix+c.path, h.token, c.body, "Content-Type", "application/json")
		wantError(t, st, data, 503, "UNAVAILABLE", "applying deployments is not enabled on this server yet")
	}
	if st, out := h.sendJSON("GET", "/deployments/configurations/"+cfg, nil); st != 200 || out["configuration"].(map[string]any)["latest_pushed_version_id"] != nil {
		t.Fatalf("configuration after a refused apply: %d %v", st, out)
	}
}

// oursOnlyTransport validates every answer against openapi.yaml alone.
type oursOnlyTransport struct{ t *testing.T }

func (ot oursOnlyTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	var reqBody []byte
	if req.Body != nil {
		reqBody, _ = io.ReadAll(req.Body)
		req.Body = io.NopCloser(bytes.NewReader(reqBody))
	}
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	ours, _, _ := loadValidators(ot.t)
	vreq := req.Clone(req.Context())
	vreq.Body = io.NopCloser(bytes.NewReader(reqBody))
	resp.Body = io.NopCloser(bytes.NewReader(body))
	if ok, errs := ours.ValidateHttpResponse(vreq, resp); !ok {
		for _, e := range errs {
			ot.t.Errorf("%s %s → %d: response does not match the Kiln document: %s: %s", req.Method, req.URL.Path, resp.StatusCode, e.Message, e.Reason)
		}
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	return resp, nil
}

// TestApplyWakesExecutor: a queued run is announced (kiln serve wakes its
// executor, so a run starts at once rather than at its next poll); a
// replayed apply queues nothing and announces nothing.
func TestApplyWakesExecutor(t *testing.T) {
	db := storetest.SQLite(t)
	var woken atomic.Int32
	h := newHarness(t, db, withRuns(runs.New(db, runs.Options{})), func(_ *Config, d *Deps) { d.RunQueued = func() { woken.Add(1) } })
	cfg := h.createConfiguration("net", specNetwork)
	h.apply(cfg, "k1")
	h.apply(cfg, "k1")
	if n := woken.Load(); n != 1 {
		t.Errorf("RunQueued called %d times for one run and one replay, want 1", n)
	}
}
