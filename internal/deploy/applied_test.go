package deploy

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/kilnhq/kiln/internal/catalog"
	"github.com/kilnhq/kiln/internal/deploy/plan"
	"github.com/kilnhq/kiln/internal/deploy/spec"
	"github.com/kilnhq/kiln/internal/store"
	"github.com/kilnhq/kiln/internal/store/storetest"
)

// TestAppliedState: what a run applied per key is the planner's live
// state — recorded, replaced, forgotten, scoped to the team — and a plan
// against it of the same spec is all noops.
func TestAppliedState(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		ctx := t.Context()
		s := newService(t, db)
		cfg, err := s.Create(ctx, "team_a", "network", "", yamlA)
		if err != nil {
			t.Fatal(err)
		}
		if live, err := s.Live(ctx, "team_a", cfg.ID); err != nil || len(live) != 0 {
			t.Fatalf("Live of a new configuration = %v, %v; want none", live, err)
		}
		cat, _ := catalog.Load(false)
		sp, err := spec.Parse([]byte(yamlA), cat)
		if err != nil {
			t.Fatal(err)
		}
		first, err := plan.Make(sp, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, st := range first.Steps {
			if err := s.RecordApplied(ctx, "team_a", cfg.ID, st.Key, "6f1c2a8e-7d3b-4c2a-9a51-2d3f4e5a6b7c", st.Desired, "run_x"); err != nil {
				t.Fatal(err)
			}
		}
		// Recording again replaces (a resumed step records twice).
		for _, st := range first.Steps {
			if err := s.RecordApplied(ctx, "team_a", cfg.ID, st.Key, "6f1c2a8e-7d3b-4c2a-9a51-2d3f4e5a6b7c", st.Desired, "run_y"); err != nil {
				t.Fatal(err)
			}
		}
		live, err := s.Live(ctx, "team_a", cfg.ID)
		if err != nil || len(live) != 1 || live[0].Key != "server/lobby" {
			t.Fatalf("Live = %v, %v; want server/lobby", live, err)
		}
		again, err := plan.Make(sp, live, nil)
		if err != nil {
			t.Fatal(err)
		}
		if again.Summary.Noop != 1 || again.Summary.Create != 0 {
			t.Errorf("plan of the applied spec = %+v, want one noop", again.Summary)
		}
		// Another team sees nothing and changes nothing.
		if _, err := s.Live(ctx, "team_b", cfg.ID); !errors.Is(err, ErrNotFound) {
			t.Errorf("Live of another team's configuration = %v, want ErrNotFound", err)
		}
		if err := s.RecordApplied(ctx, "team_b", cfg.ID, "server/x", "id", json.RawMessage(`{}`), ""); !errors.Is(err, ErrNotFound) {
			t.Errorf("RecordApplied for another team = %v, want ErrNotFound", err)
		}
		if err := s.RecordApplied(ctx, "team_a", cfg.ID, "nonsense", "id", json.RawMessage(`{}`), ""); err == nil {
			t.Error("RecordApplied of a bad key succeeded")
		}
		if err := s.ForgetApplied(ctx, "team_a", cfg.ID, "server/lobby"); err != nil {
			t.Fatal(err)
		}
		if err := s.ForgetApplied(ctx, "team_a", cfg.ID, "server/lobby"); err != nil {
			t.Errorf("ForgetApplied twice = %v", err)
		}
		if live, _ := s.Live(ctx, "team_a", cfg.ID); len(live) != 0 {
			t.Errorf("Live after Forget = %v", live)
		}
	})
}
