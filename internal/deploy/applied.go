package deploy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/kilnhq/kiln/internal/deploy/plan"
)

// Applied state (table applied_resources): for each resource key of a
// configuration, the object a run made for it and what the run applied
// (the resource's canonical JSON from the spec, a plan.Step's Desired).
// It is the planner's live state: a run records a key when its step
// succeeds and forgets it when it deletes the object, so the next plan
// compares the new spec with what was applied, never with a guess made
// from the running objects.

// Live returns a configuration's applied state, for plan.Make, sorted by
// key. Errors: ErrNotFound (no such configuration in the team).
func (s *Service) Live(ctx context.Context, teamID, id string) ([]plan.Live, error) {
	if _, err := s.get(ctx, s.db.Read(), teamID, id); err != nil {
		return nil, err
	}
	rows, err := s.db.Read().QueryContext(ctx, `SELECT resource_key, applied FROM applied_resources
		WHERE configuration_id = $1 ORDER BY resource_key`, id)
	if err != nil {
		return nil, fmt.Errorf("read applied state: %w", err)
	}
	defer rows.Close()
	out := []plan.Live{}
	for rows.Next() {
		var l plan.Live
		var applied string
		if err := rows.Scan(&l.Key, &applied); err != nil {
			return nil, fmt.Errorf("read applied state: %w", err)
		}
		l.Applied = json.RawMessage(applied)
		out = append(out, l)
	}
	return out, rows.Err()
}

// RecordApplied records that run runID applied applied to key, whose object
// is objectID (a server's UUID), replacing what was recorded before.
// Errors: ErrNotFound, a bad key or JSON.
func (s *Service) RecordApplied(ctx context.Context, teamID, id, key, objectID string, applied json.RawMessage, runID string) error {
	if _, _, err := plan.ParseKey(key); err != nil {
		return err
	}
	if !json.Valid(applied) || objectID == "" {
		return errors.New("deploy: applied state needs an object id and valid JSON")
	}
	if _, err := s.get(ctx, s.db.Read(), teamID, id); err != nil {
		return err
	}
	_, err := s.db.Write().ExecContext(ctx, `
		INSERT INTO applied_resources (configuration_id, resource_key, object_id, applied, run_id, updated_at)
		VALUES ($1, $2, $3, $4, $5, $6)
		ON CONFLICT (configuration_id, resource_key) DO UPDATE
		SET object_id = excluded.object_id, applied = excluded.applied, run_id = excluded.run_id, updated_at = excluded.updated_at`,
		id, key, objectID, string(applied), runID, s.now())
	if err != nil {
		return fmt.Errorf("record applied state of %s: %w", key, err)
	}
	return nil
}

// ForgetApplied removes key from a configuration's applied state (its
// object was deleted); a key not recorded is not an error. Errors:
// ErrNotFound.
func (s *Service) ForgetApplied(ctx context.Context, teamID, id, key string) error {
	if _, err := s.get(ctx, s.db.Read(), teamID, id); err != nil {
		return err
	}
	if _, err := s.db.Write().ExecContext(ctx, `DELETE FROM applied_resources WHERE configuration_id = $1 AND resource_key = $2`, id, key); err != nil {
		return fmt.Errorf("forget applied state of %s: %w", key, err)
	}
	return nil
}
