package executor

import (
	"context"
	"fmt"

	"github.com/kilnhq/kiln/internal/deploy/plan"
	"github.com/kilnhq/kiln/internal/deploy/runs"
	"github.com/kilnhq/kiln/internal/deploy/spec"
)

// Planned is what a run of a spec would execute now: its plan against the
// configuration's applied state, or why the run would fail before
// changing anything.
type Planned struct {
	// Spec is the spec planned; nil when it is no longer valid.
	Spec *spec.Spec
	// Plan is the run's steps; nil when the spec could not be planned.
	Plan *plan.Plan
	// Refusal is the sentence the run would fail with at planning, ""
	// when it would execute Plan; Class is its failure class.
	Refusal string
	Class   runs.FailureClass
}

// Plan answers what a run of the team's configuration would execute now,
// changing nothing: the plan of yaml, an unsaved edit checked as an update
// of the configuration checks it, or with yaml nil of the configuration's
// current YAML (what an apply pushes and runs). It is the run's own
// planning (planSpec), so the plan and the run's steps agree while the
// applied state stays as it is. Errors: deploy.ErrNotFound,
// *validate.Error (yaml's broken rules, at their paths).
func (e *Executor) Plan(ctx context.Context, teamID, configurationID string, yaml *string) (Planned, error) {
	if yaml != nil {
		sp, err := e.deploy.Check(ctx, teamID, configurationID, *yaml)
		if err != nil {
			return Planned{}, err
		}
		return e.planSpec(ctx, teamID, configurationID, sp)
	}
	cfg, err := e.deploy.Get(ctx, teamID, configurationID)
	if err != nil {
		return Planned{}, err
	}
	sp, refusal := parseSpec(cfg.YAML, e.cat)
	if refusal != "" {
		return Planned{Refusal: refusal, Class: runs.FailValidation}, nil
	}
	return e.planSpec(ctx, teamID, configurationID, sp)
}

// parseSpec reads a stored YAML (valid when it was stored) against
// today's catalog; when it no longer passes, the sentence a run fails
// with.
func parseSpec(yaml string, cat spec.Catalog) (*spec.Spec, string) {
	sp, err := spec.Parse([]byte(yaml), cat)
	if err != nil {
		return nil, "The version's spec is no longer valid: " + err.Error() + "."
	}
	return sp, ""
}

// planSpec is the planning of a run: sp against the configuration's
// applied state (deploy.Service.Live, plan.Make), then the refusals that
// fail a run before its first step (what this process cannot apply, a
// dbservice's engine changed). The error is the database's, reading the
// applied state.
func (e *Executor) planSpec(ctx context.Context, teamID, configurationID string, sp *spec.Spec) (Planned, error) {
	out := Planned{Spec: sp}
	live, err := e.deploy.Live(ctx, teamID, configurationID)
	if err != nil {
		return Planned{}, err
	}
	p, err := plan.Make(sp, live, nil)
	if err != nil {
		out.Refusal, out.Class = "The run cannot be planned: "+err.Error()+".", runs.FailInternal
		return out, nil
	}
	// References: their values' digests are part of the desired states,
	// read now; an object the plan makes anew has none yet, so what
	// references it is updated after it.
	fresh := map[string]bool{}
	for _, st := range p.Steps {
		if st.Action == plan.Create || st.Action == plan.Replace {
			fresh[st.Key] = true
		}
	}
	digests, err := e.digests(ctx, teamID, configurationID, sp, fresh)
	if err != nil {
		return Planned{}, err
	}
	if digests != nil {
		if len(e.opts.DigestKey) == 0 {
			out.Refusal, out.Class = "This Kiln process has no key for the values of the spec's references (${…}); nothing was changed.", runs.FailInternal
			return out, nil
		}
		if p, err = plan.Make(sp, live, digests); err != nil {
			out.Refusal, out.Class = "The run cannot be planned: "+err.Error()+".", runs.FailInternal
			return out, nil
		}
	}
	out.Plan = &p
	if msg := unsupported(sp, e.opts.Databases != nil, e.cat); msg != "" {
		out.Refusal, out.Class = msg, runs.FailValidation
		return out, nil
	}
	if msg, class, err := e.unknownSecrets(ctx, teamID, sp); err != nil {
		return Planned{}, err
	} else if msg != "" {
		out.Refusal, out.Class = msg, class
		return out, nil
	}
	for _, st := range p.Steps {
		if st.Kind == plan.DBService && st.Action == plan.Replace {
			out.Refusal, out.Class = fmt.Sprintf("%s: changing a dbservice's engine would drop its database, and Kiln cannot snapshot a database; add a dbservice under a new name instead (and remove the old one when its data has moved). Nothing was changed.", st.Key), runs.FailValidation
			return out, nil
		}
	}
	return out, nil
}
