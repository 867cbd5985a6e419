package api

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/kilnhq/kiln/internal/deploy/executor"
	"github.com/kilnhq/kiln/internal/deploy/runs"
	"github.com/kilnhq/kiln/internal/deploy/spec"
	"github.com/kilnhq/kiln/internal/eventually"
	"github.com/kilnhq/kiln/internal/store"
	"github.com/kilnhq/kiln/internal/store/storetest"
)

// withExecutor gives the harness a run queue and an executor that runs
// what it queues (on kiln-test servers; snapshots before deletes), as
// kiln serve does, until the test ends.
func withExecutor(t *testing.T, db *store.DB) harnessOpt {
	return func(_ *Config, d *Deps) {
		q := runs.New(db, runs.Options{})
		x := executor.New(q, d.Deploy, d.Servers, d.Catalog, executor.Options{Owner: "inst_api", Snapshots: d.Snapshots,
			TeamSecrets: d.Secrets, DigestKey: []byte("0123456789abcdef0123456789abcdef"),
			Poll: 20 * time.Millisecond, Lease: 3 * time.Second, RetryBackoff: 10 * time.Millisecond, HealthTimeout: 30 * time.Second})
		d.Runs, d.Planner, d.RunQueued = q, x, x.Wake
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- x.Run(ctx) }()
		t.Cleanup(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("executor Run = %v", err)
			}
		})
	}
}

// canonJSON is data with its keys sorted and no spaces, to compare
// whole bodies.
func canonJSON(t *testing.T, data []byte) string {
	t.Helper()
	var v any
	if err := json.Unmarshal(data, &v); err != nil {
		t.Fatalf("%q is not JSON: %v", data, err)
	}
	out, _ := json.Marshal(v)
	return string(out)
}

// wantBody checks a whole JSON answer.
func wantBody(t *testing.T, what string, st int, got []byte, wantStatus int, want string) {
	t.Helper()
	if g, w := canonJSON(t, got), canonJSON(t, []byte(want)); st != wantStatus || g != w {
		t.Fatalf("%s = %d %s\nwant %d %s", what, st, g, wantStatus, w)
	}
}

// postRaw sends a raw JSON body (or none) and returns the answer.
func (h *harness) postRaw(path, body string, token ...string) (int, []byte) {
	h.t.Helper()
	tok := h.token
	if len(token) > 0 {
		tok = token[0]
	}
	if body == "" {
		st, _, data := h.do("POST", Prefix+path, tok, nil)
		return st, data
	}
	st, _, data := h.do("POST", Prefix+path, tok, strings.NewReader(body), "Content-Type", "application/json")
	return st, data
}

// waitRunFinal polls a run through the API until it is final and returns
// its detail.
func (h *harness) waitRunFinal(id string) map[string]any {
	h.t.Helper()
	return eventually.Value(h.t, eventually.Within, "run "+id+" final", func() (map[string]any, bool, string) {
		_, out := h.sendJSON("GET", "/deployments/runs/"+id, nil)
		r := out["run"].(map[string]any)
		return out, runs.Status(r["status"].(string)).Final(), r["status"].(string)
	})
}

const (
	planSpecA = `version: 1
servers:
  lobby: {software: kiln-test, memory: 256M, disk: 1G}
  survival: {software: kiln-test, memory: 256M, disk: 1G}
`
	planSpecB = `version: 1
servers:
  hub: {software: kiln-test, memory: 256M, disk: 1G, state: stopped}
  lobby: {software: kiln-test, memory: 512M, disk: 1G, env: {MOTD: Hi}}
`
	// The desired states of planSpecA and planSpecB's servers, as runs
	// record them.
	desiredA   = `{"cpu":100,"disk":1073741824,"env":{},"files":[],"image":"","memory":268435456,"properties":{},"software":"kiln-test","state":"running","version":"latest"}`
	desiredHub = `{"cpu":100,"disk":1073741824,"env":{},"files":[],"image":"","memory":268435456,"properties":{},"software":"kiln-test","state":"stopped","version":"latest"}`
	desiredB   = `{"cpu":100,"disk":1073741824,"env":{"MOTD":"Hi"},"files":[],"image":"","memory":536870912,"properties":{},"software":"kiln-test","state":"running","version":"latest"}`
)

// TestPlanConfiguration: POST …/plan answers, whole, what a run would do —
// of the current YAML, then of an unsaved edit — changing nothing (no
// version, no run, the YAML as it was); the apply that follows runs
// exactly that plan (its checkpoint's plan_hash, its resources' actions
// and desired states) and its summary counts the plan's. A broken edit
// is refused with the issues PATCH gives; a run the executor would refuse
// before its first step says so (error, failure_class) with its steps.
func TestPlanConfiguration(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		h := newHarness(t, db, withExecutor(t, db))
		cfg := h.createConfiguration("network", planSpecA)
		_, out := h.sendJSON("GET", "/deployments/configurations/"+cfg, nil)
		hashA := out["configuration"].(map[string]any)["spec_hash"].(string)
		path := "/deployments/configurations/" + cfg + "/plan"

		// The current YAML: everything to create.
		st, body := h.postRaw(path, "")
		planHash, _ := mustJSON(body)["plan_hash"].(string)
		if !strings.HasPrefix(planHash, "sha256:") {
			t.Fatalf("plan = %d %s; want a plan_hash", st, body)
		}
		wantBody(t, "plan of the current YAML", st, body, 200, `{"ok":true,"configuration_id":"`+cfg+`","spec_hash":"`+hashA+`",
			"plan_hash":"`+planHash+`","summary":{"create":2,"update":0,"replace":0,"delete":0,"noop":0},
			"resources":[
			 {"resource_key":"server/lobby","resource_type":"server","action":"create","changes":[],"tier":0,"desired":`+desiredA+`,"before":null},
			 {"resource_key":"server/survival","resource_type":"server","action":"create","changes":[],"tier":0,"desired":`+desiredA+`,"before":null}],
			"error":null,"failure_class":null}`)
		// An empty object is no body: the same plan.
		if st, again := h.postRaw(path, `{}`); st != 200 || canonJSON(t, again) != canonJSON(t, body) {
			t.Errorf("plan with {} = %d %s, want the same plan", st, again)
		}
		// Nothing was pushed or queued.
		_, out = h.sendJSON("GET", "/deployments/configurations/"+cfg, nil)
		if c := out["configuration"].(map[string]any); c["latest_pushed_version_id"] != nil {
			t.Fatalf("configuration after a plan = %v, want nothing pushed", c)
		}
		if _, out := h.sendJSON("GET", "/deployments/runs", nil); out["count"] != 0.0 {
			t.Fatalf("runs after a plan = %v, want none", out)
		}

		// The apply runs that plan.
		run := h.waitRunFinal(h.apply(cfg, "")["run"].(map[string]any)["id"].(string))
		h.wantRanPlan(run, body, `{"create":2,"update":0,"replace":0,"delete":0,"noop":0,"succeeded":2,"failed":0}`)

		// An unsaved edit: hub made, lobby updated, survival deleted.
		st, body = h.postRaw(path, mustMarshal(map[string]any{"yaml": planSpecB}))
		planHash, _ = mustJSON(body)["plan_hash"].(string)
		wantBody(t, "plan of an edit", st, body, 200, `{"ok":true,"configuration_id":"`+cfg+`","spec_hash":"`+specHash(t, h, planSpecB)+`",
			"plan_hash":"`+planHash+`","summary":{"create":1,"update":1,"replace":0,"delete":1,"noop":0},
			"resources":[
			 {"resource_key":"server/hub","resource_type":"server","action":"create","changes":[],"tier":0,"desired":`+desiredHub+`,"before":null},
			 {"resource_key":"server/lobby","resource_type":"server","action":"update","changes":["env","memory"],"tier":0,"desired":`+desiredB+`,"before":`+desiredA+`},
			 {"resource_key":"server/survival","resource_type":"server","action":"delete","changes":[],"tier":1,"desired":null,"before":`+desiredA+`}],
			"error":null,"failure_class":null}`)
		_, out = h.sendJSON("GET", "/deployments/configurations/"+cfg, nil)
		if c := out["configuration"].(map[string]any); c["yaml"] != planSpecA || c["latest_pushed_version_number"] != 1.0 {
			t.Fatalf("configuration after a plan of an edit = %v, want its YAML and version as they were", c)
		}
		if st, out := h.sendJSON("PATCH", "/deployments/configurations/"+cfg, map[string]any{"yaml": planSpecB}); st != 200 {
			t.Fatalf("PATCH = %d %v", st, out)
		}
		run = h.waitRunFinal(h.apply(cfg, "")["run"].(map[string]any)["id"].(string))
		h.wantRanPlan(run, body, `{"create":1,"update":1,"replace":0,"delete":1,"noop":0,"succeeded":3,"failed":0}`)
		// Applied: nothing left to do.
		st, body = h.postRaw(path, "")
		if sum := mustJSON(body)["summary"]; st != 200 || canonJSON(t, mustMarshalBytes(sum)) != `{"create":0,"delete":0,"noop":2,"replace":0,"update":0}` {
			t.Errorf("plan after the apply = %d %s, want 2 unchanged", st, body)
		}

		// A broken edit: PATCH's answer, word for word.
		broken := mustMarshal(map[string]any{"yaml": "version: 1\nservers:\n  x:\n    software: nope\n    memory: 1G\n"})
		st, body = h.postRaw(path, broken)
		wantBody(t, "plan of a broken edit", st, body, 400, `{"error":"servers.x.software: unknown software \"nope\" (GET /servers/software lists them)",
			"code":"VALIDATION_ERROR","issues":[{"path":"servers.x.software","message":"unknown software \"nope\" (GET /servers/software lists them)"}]}`)
		pst, _, pbody := h.do("PATCH", Prefix+"/deployments/configurations/"+cfg, h.token, strings.NewReader(broken), "Content-Type", "application/json")
		if pst != st || !bytes.Equal(pbody, body) {
			t.Errorf("PATCH of the broken edit = %d %s, the plan %d %s; want the same answer", pst, pbody, st, body)
		}
		// A run this executor refuses at planning (it has no database
		// support): the sentence and class the run would fail with, and
		// the steps it planned.
		withDB := planSpecB + "dbservices:\n  stats: {engine: postgres}\n"
		st, body = h.postRaw(path, mustMarshal(map[string]any{"yaml": withDB}))
		planHash, _ = mustJSON(body)["plan_hash"].(string)
		wantBody(t, "plan the executor refuses", st, body, 200, `{"ok":true,"configuration_id":"`+cfg+`","spec_hash":"`+specHash(t, h, withDB)+`",
			"plan_hash":"`+planHash+`","summary":{"create":1,"update":0,"replace":0,"delete":0,"noop":2},
			"resources":[
			 {"resource_key":"dbservice/stats","resource_type":"dbservice","action":"create","changes":[],"tier":0,"desired":{"attach":[],"engine":"postgres"},"before":null},
			 {"resource_key":"server/hub","resource_type":"server","action":"noop","changes":[],"tier":null,"desired":`+desiredHub+`,"before":`+desiredHub+`},
			 {"resource_key":"server/lobby","resource_type":"server","action":"noop","changes":[],"tier":null,"desired":`+desiredB+`,"before":`+desiredB+`}],
			"error":"This Kiln process was started without database support: dbservices cannot be applied; nothing was changed.",
			"failure_class":"validation"}`)

		// Another team's configuration is nobody's.
		st, body = h.postRaw(path, "", h.otherTeamToken())
		wantBody(t, "plan of another team's configuration", st, body, 404, `{"error":"configuration not found","code":"CONFIGURATION_NOT_FOUND"}`)
	})
}

// wantRanPlan checks that a finished run executed the plan answered as
// plan (its hash, its steps' keys, actions and desired states) and ended
// with summary.
func (h *harness) wantRanPlan(detail map[string]any, planBody []byte, summary string) {
	t := h.t
	t.Helper()
	p := mustJSON(planBody)
	r := detail["run"].(map[string]any)
	if r["status"] != "succeeded" {
		t.Fatalf("run = %v, want succeeded", r)
	}
	if got := canonJSON(t, mustMarshalBytes(r["summary"])); got != canonJSON(t, []byte(summary)) {
		t.Errorf("run summary = %s, want %s", got, summary)
	}
	if cp := r["checkpoint"].(map[string]any); cp["plan_hash"] != p["plan_hash"] {
		t.Errorf("run's plan_hash = %v, the plan's %v", cp["plan_hash"], p["plan_hash"])
	}
	type step struct{ Key, Action, Desired string }
	var ran, planned []step
	for _, res := range detail["resources"].([]any) {
		m := res.(map[string]any)
		ran = append(ran, step{m["resource_key"].(string), m["action"].(string), string(mustMarshalBytes(m["desired"]))})
	}
	for _, res := range p["resources"].([]any) {
		m := res.(map[string]any)
		planned = append(planned, step{m["resource_key"].(string), m["action"].(string), string(mustMarshalBytes(m["desired"]))})
	}
	if g, w := mustMarshal(ran), mustMarshal(planned); g != w {
		t.Errorf("the run's steps = %s\nthe plan's %s", g, w)
	}
}

// specHash is the spec_hash a configuration of yaml gets.
func specHash(t *testing.T, h *harness, yaml string) string {
	t.Helper()
	sp, err := spec.Parse([]byte(yaml), h.srv.deps.Catalog)
	if err != nil {
		t.Fatal(err)
	}
	hash, err := sp.Hash()
	if err != nil {
		t.Fatal(err)
	}
	return hash
}

func mustMarshal(v any) string { return string(mustMarshalBytes(v)) }

func mustMarshalBytes(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}
