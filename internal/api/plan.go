package api

import (
	"context"
	"encoding/json"
	"net/http"

	"github.com/kilnhq/kiln/internal/deploy/executor"
	"github.com/kilnhq/kiln/internal/deploy/plan"
)

// Planner plans a configuration's run without executing anything
// (*executor.Executor: the runs' own planning).
type Planner interface {
	Plan(ctx context.Context, teamID, configurationID string, yaml *string) (executor.Planned, error)
}

// planSummaryJSON counts a plan's actions.
type planSummaryJSON struct {
	Create  int `json:"create"`
	Update  int `json:"update"`
	Replace int `json:"replace"`
	Delete  int `json:"delete"`
	Noop    int `json:"noop"`
}

// planResourceJSON is one step of a plan: what a run would do to one
// resource, and why (the fields that differ).
type planResourceJSON struct {
	ResourceKey  string          `json:"resource_key"`
	ResourceType string          `json:"resource_type"`
	Action       string          `json:"action"`
	Changes      []string        `json:"changes"`
	Tier         *int            `json:"tier"`
	Desired      json.RawMessage `json:"desired"`
	Before       json.RawMessage `json:"before"`
}

func (s *Server) planConfiguration(w http.ResponseWriter, r *http.Request) error {
	if s.deps.Planner == nil {
		return errRunsDisabled
	}
	var req struct {
		YAML *string `json:"yaml"`
	}
	// The body is optional: none plans the configuration's current YAML.
	if r.ContentLength != 0 {
		if err := decodeJSON(w, r, &req); err != nil {
			return err
		}
	}
	p, err := s.deps.Planner.Plan(r.Context(), principal(r).TeamID, r.PathValue("configurationId"), req.YAML)
	if err != nil {
		return err
	}
	var made plan.Plan // none when the spec could not be planned
	if p.Plan != nil {
		made = *p.Plan
	}
	tiers := map[int]int{} // step index → its tier
	for t, steps := range made.Tiers {
		for _, i := range steps {
			tiers[i] = t
		}
	}
	resources := make([]planResourceJSON, len(made.Steps))
	for i, st := range made.Steps {
		changes := st.Changes
		if changes == nil {
			changes = []string{}
		}
		res := planResourceJSON{ResourceKey: st.Key, ResourceType: string(st.Kind), Action: string(st.Action),
			Changes: changes, Desired: jsonOrNull(st.Desired), Before: jsonOrNull(st.Before)}
		if t, ok := tiers[i]; ok {
			res.Tier = &t
		}
		resources[i] = res
	}
	var specHash, planHash *string
	if p.Spec != nil {
		h, err := p.Spec.Hash()
		if err != nil {
			return err
		}
		specHash = &h
	}
	if p.Plan != nil {
		h, err := p.Plan.Hash()
		if err != nil {
			return err
		}
		planHash = &h
	}
	sum := made.Summary
	writeJSON(w, http.StatusOK, map[string]any{
		"ok": true, "configuration_id": r.PathValue("configurationId"), "spec_hash": specHash, "plan_hash": planHash,
		"summary":   planSummaryJSON{Create: sum.Create, Update: sum.Update, Replace: sum.Replace, Delete: sum.Delete, Noop: sum.Noop},
		"resources": resources, "error": orNull(p.Refusal), "failure_class": orNull(string(p.Class)),
	})
	return nil
}
