package deploy

import (
	"context"
	"fmt"
)

// Sealer seals and opens secrets (*secretbox.Box).
type Sealer interface {
	Seal(plaintext []byte) (string, error)
	Open(sealed string) ([]byte, error)
}

// Secret returns the configuration's secret called name, made by gen and
// sealed by box the first time it is asked for, the same one ever after
// (a race between two runs keeps the first stored). Errors: ErrNotFound.
func (s *Service) Secret(ctx context.Context, teamID, id, name string, box Sealer, gen func() string) (string, error) {
	if _, err := s.get(ctx, s.db.Read(), teamID, id); err != nil {
		return "", err
	}
	sealed, err := box.Seal([]byte(gen()))
	if err != nil {
		return "", fmt.Errorf("seal secret %s: %w", name, err)
	}
	if _, err := s.db.Write().ExecContext(ctx, `INSERT INTO configuration_secrets (configuration_id, name, sealed, created_at)
		VALUES ($1, $2, $3, $4) ON CONFLICT (configuration_id, name) DO NOTHING`, id, name, sealed, s.now()); err != nil {
		return "", fmt.Errorf("store secret %s: %w", name, err)
	}
	var stored string
	if err := s.db.Write().QueryRowContext(ctx, `SELECT sealed FROM configuration_secrets WHERE configuration_id = $1 AND name = $2`,
		id, name).Scan(&stored); err != nil {
		return "", fmt.Errorf("read secret %s: %w", name, err)
	}
	plain, err := box.Open(stored)
	if err != nil {
		return "", fmt.Errorf("open secret %s: %w", name, err)
	}
	return string(plain), nil
}
