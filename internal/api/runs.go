package api

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"

	yaml "go.yaml.in/yaml/v4"

	"github.com/kilnhq/kiln/internal/deploy"
	"github.com/kilnhq/kiln/internal/deploy/runs"
	"github.com/kilnhq/kiln/internal/validate"
)

// errRunsDisabled answers the run routes of a server built without a run
// queue (Deps.Runs nil): nothing would execute what they queue.
var errRunsDisabled = newHTTPError(http.StatusServiceUnavailable, codeUnavailable,
	"applying deployments is not enabled on this server yet")

// applyPushMessage is the push message of a version apply pushes itself.
const applyPushMessage = "Pushed by apply."

// runApplyJSON is the seed's Run as returned when queued by apply.
type runApplyJSON struct {
	ID                         string `json:"id"`
	Status                     string `json:"status"`
	ConfigurationID            string `json:"configuration_id"`
	ConfigurationVersionID     string `json:"configuration_version_id"`
	ConfigurationVersionNumber int    `json:"configuration_version_number"`
	ResourceCount              int    `json:"resource_count"`
	QueuePosition              int    `json:"queue_position"`
	CreatedAt                  int64  `json:"created_at"`
	ServerCount                int    `json:"server_count"`
	ProxyCount                 int    `json:"proxy_count"`
	DBServiceCount             int    `json:"dbservice_count"`
}

// runJSON is the seed's Run of the run list; the detail adds spec_hash
// and checkpoint (runDetailJSON). Fields that do not exist yet are null;
// summary, an object in the seed, counts zeros until the run finishes.
type runJSON struct {
	ID                         string       `json:"id"`
	Status                     string       `json:"status"`
	ConfigurationID            string       `json:"configuration_id"`
	ResourceCount              int          `json:"resource_count"`
	CreatedAt                  int64        `json:"created_at"`
	Stage                      *string      `json:"stage"`
	ConfigurationVersionID     string       `json:"configuration_version_id"`
	ConfigurationVersionNumber int          `json:"configuration_version_number"`
	QueuePosition              int          `json:"queue_position"`
	Summary                    runs.Summary `json:"summary"`
	StartedAt                  *int64       `json:"started_at"`
	CompletedAt                *int64       `json:"completed_at"`
	Error                      *string      `json:"error"`
	FailureClass               *string      `json:"failure_class"`
}

// runDetailJSON is the seed's Run of the run detail.
type runDetailJSON struct {
	runJSON
	SpecHash   string         `json:"spec_hash"`
	Checkpoint checkpointJSON `json:"checkpoint"`
}

// checkpointJSON is a run's checkpoint; an object in the seed, so before
// the run is planned it is empty: no key done, plan_hash null.
type checkpointJSON struct {
	Done     []string `json:"done"`
	PlanHash *string  `json:"plan_hash"`
}

// runResourceJSON is one step of a run's plan (deployment-spec.md §5).
type runResourceJSON struct {
	ResourceKey  string          `json:"resource_key"`
	ResourceType string          `json:"resource_type"`
	Action       string          `json:"action"`
	Status       string          `json:"status"`
	Attempt      int             `json:"attempt"`
	Desired      json.RawMessage `json:"desired"`
	Before       json.RawMessage `json:"before"`
	After        json.RawMessage `json:"after"`
	Log          []string        `json:"log"`
	Error        *string         `json:"error"`
	StartedAt    *int64          `json:"started_at"`
	CompletedAt  *int64          `json:"completed_at"`
	UpdatedAt    int64           `json:"updated_at"`
}

// runEventJSON is one entry of a run's history (deployment-spec.md §5).
type runEventJSON struct {
	EventType string          `json:"event_type"`
	Stage     *string         `json:"stage"`
	Message   string          `json:"message"`
	Data      json.RawMessage `json:"data"`
	CreatedAt int64           `json:"created_at"`
}

// orNull is s, or nil for "".
func orNull(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// timeOrNull is ms, or nil for 0 (not yet).
func timeOrNull(ms int64) *int64 {
	if ms == 0 {
		return nil
	}
	return &ms
}

// jsonOrNull is raw, or JSON null for none.
func jsonOrNull(raw json.RawMessage) json.RawMessage {
	if raw == nil {
		return json.RawMessage("null")
	}
	return raw
}

func toRunJSON(r runs.Run) runJSON {
	out := runJSON{
		ID: r.ID, Status: string(r.Status), ConfigurationID: r.ConfigurationID, ResourceCount: r.ResourceCount,
		CreatedAt: r.CreatedAt, Stage: orNull(string(r.Stage)), ConfigurationVersionID: r.VersionID,
		ConfigurationVersionNumber: r.VersionNumber, QueuePosition: r.QueuePosition,
		StartedAt: timeOrNull(r.StartedAt), CompletedAt: timeOrNull(r.CompletedAt),
		Error: orNull(r.Error), FailureClass: orNull(string(r.FailureClass)),
	}
	if r.Summary != nil {
		out.Summary = *r.Summary
	}
	return out
}

func toRunDetailJSON(r runs.Run) runDetailJSON {
	out := runDetailJSON{runJSON: toRunJSON(r), SpecHash: r.SpecHash, Checkpoint: checkpointJSON{Done: []string{}}}
	if cp := r.Checkpoint; cp != nil {
		if cp.Done != nil {
			out.Checkpoint.Done = cp.Done
		}
		out.Checkpoint.PlanHash = orNull(cp.PlanHash)
	}
	return out
}

func toRunResourceJSON(r runs.Resource) runResourceJSON {
	log := r.Log
	if log == nil {
		log = []string{}
	}
	return runResourceJSON{
		ResourceKey: r.Key, ResourceType: string(r.Type), Action: string(r.Action), Status: string(r.Status),
		Attempt: r.Attempt, Desired: jsonOrNull(r.Desired), Before: jsonOrNull(r.Before), After: jsonOrNull(r.After),
		Log: log, Error: orNull(r.Error), StartedAt: timeOrNull(r.StartedAt), CompletedAt: timeOrNull(r.CompletedAt),
		UpdatedAt: r.UpdatedAt,
	}
}

func toRunEventJSON(e runs.Event) runEventJSON {
	return runEventJSON{EventType: string(e.Type), Stage: orNull(string(e.Stage)), Message: e.Message,
		Data: jsonOrNull(e.Data), CreatedAt: e.CreatedAt}
}

// kindCounts counts the servers, proxies and dbservices of a pushed
// version's YAML. The version was checked against the spec rules when it
// was pushed, so its top-level mappings are all that is read here; not
// spec.Parse, whose check against today's catalog may refuse a version
// pushed before the catalog changed (its run then fails with failure
// class validation, and the counts stay true).
func kindCounts(v deploy.Version) (servers, proxies, dbservices int, err error) {
	var top struct {
		Servers    map[string]yaml.Node `yaml:"servers"`
		Proxies    map[string]yaml.Node `yaml:"proxies"`
		DBServices map[string]yaml.Node `yaml:"dbservices"`
	}
	if err := yaml.Unmarshal([]byte(v.YAML), &top); err != nil {
		return 0, 0, 0, fmt.Errorf("count the resources of version %s: %w", v.ID, err)
	}
	return len(top.Servers), len(top.Proxies), len(top.DBServices), nil
}

func (s *Server) applyConfiguration(w http.ResponseWriter, r *http.Request) error {
	if s.deps.Runs == nil {
		return errRunsDisabled
	}
	var req struct {
		ConfigurationID string  `json:"configuration_id"`
		IdempotencyKey  *string `json:"idempotency_key"`
	}
	if err := decodeJSON(w, r, &req); err != nil {
		return err
	}
	var c validate.Collector
	if req.ConfigurationID == "" {
		c.Add("configuration_id", "is required")
	}
	key := ""
	if req.IdempotencyKey != nil {
		key = *req.IdempotencyKey
		if n := len([]rune(key)); n < 1 || n > runs.MaxIdempotencyKey {
			c.Add("idempotency_key", "must be 1 to %d characters", runs.MaxIdempotencyKey)
		}
	}
	if err := c.Err(); err != nil {
		return err
	}
	ctx, p := r.Context(), principal(r)

	// The push and the run are one transaction (deploy.Service.Apply); a
	// repeated key answers its run and creates nothing.
	a, err := s.deps.Deploy.Apply(ctx, s.deps.Runs, p.TeamID, req.ConfigurationID, p.Actor(), applyPushMessage, key)
	if err != nil {
		return err
	}
	if !a.Replayed && s.deps.RunQueued != nil {
		s.deps.RunQueued() // this process's executor looks for it now, not at its next poll
	}
	pushedID := ""
	if a.Pushed {
		pushedID = a.Version.ID
	}
	return s.answerApply(w, r, a.Run, pushedID, a.Replayed)
}

// answerApply writes apply's answer for run: the seed's apply shape with
// the per-kind counts of its version; push, its version and whether this
// call created it (pushedID, "" when it created none); and whether the
// run is an earlier apply's (replayed). A replay that raced this call's
// push may name another version than the one this call created.
func (s *Server) answerApply(w http.ResponseWriter, r *http.Request, run runs.Run, pushedID string, replayed bool) error {
	v, err := s.deps.Deploy.Version(r.Context(), run.TeamID, run.ConfigurationID, run.VersionNumber)
	if err != nil {
		return fmt.Errorf("read the version of run %s: %w", run.ID, err)
	}
	servers, proxies, dbservices, err := kindCounts(v)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"ok": true,
		"run": runApplyJSON{
			ID: run.ID, Status: string(run.Status), ConfigurationID: run.ConfigurationID,
			ConfigurationVersionID: run.VersionID, ConfigurationVersionNumber: run.VersionNumber,
			ResourceCount: run.ResourceCount, QueuePosition: run.QueuePosition, CreatedAt: run.CreatedAt,
			ServerCount: servers, ProxyCount: proxies, DBServiceCount: dbservices,
		},
		"push":     map[string]any{"created": pushedID == v.ID, "version_id": v.ID, "version_number": v.Number},
		"replayed": replayed,
	})
	return nil
}

func (s *Server) listRuns(w http.ResponseWriter, r *http.Request) error {
	if s.deps.Runs == nil {
		return errRunsDisabled
	}
	cfg, err := query(r, "configuration_id", false, "")
	if err != nil {
		return err
	}
	status, err := query(r, "status", false, "")
	if err != nil {
		return err
	}
	limit := 0 // the queue's default
	if v, err := query(r, "limit", false, ""); err != nil {
		return err
	} else if v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > runs.MaxPage {
			return validationf("limit", "must be a whole number between 1 and %d", runs.MaxPage)
		}
		limit = n
	}
	list, err := s.deps.Runs.List(r.Context(), principal(r).TeamID, cfg, runs.Status(status), limit)
	if err != nil {
		return err
	}
	out := make([]runJSON, len(list))
	for i, run := range list {
		out[i] = toRunJSON(run)
	}
	writeJSON(w, http.StatusOK, map[string]any{"runs": out, "count": len(out)})
	return nil
}

func (s *Server) getRun(w http.ResponseWriter, r *http.Request) error {
	if s.deps.Runs == nil {
		return errRunsDisabled
	}
	ctx, team, id := r.Context(), principal(r).TeamID, r.PathValue("runId")
	run, err := s.deps.Runs.Get(ctx, team, id)
	if err != nil {
		return err
	}
	rs, err := s.deps.Runs.Resources(ctx, team, id)
	if err != nil {
		return err
	}
	es, err := s.deps.Runs.Events(ctx, team, id)
	if err != nil {
		return err
	}
	resources := make([]runResourceJSON, len(rs))
	for i, res := range rs {
		resources[i] = toRunResourceJSON(res)
	}
	events := make([]runEventJSON, len(es))
	for i, e := range es {
		events[i] = toRunEventJSON(e)
	}
	writeJSON(w, http.StatusOK, map[string]any{"run": toRunDetailJSON(run), "resources": resources, "events": events})
	return nil
}

func (s *Server) cancelRun(w http.ResponseWriter, r *http.Request) error {
	if s.deps.Runs == nil {
		return errRunsDisabled
	}
	run, err := s.deps.Runs.RequestCancel(r.Context(), principal(r).TeamID, r.PathValue("runId"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"ok": true, "run": toRunDetailJSON(run)})
	return nil
}
