package deploy

import (
	"errors"
	"strings"
	"testing"

	"github.com/kilnhq/kiln/internal/secretbox"
	"github.com/kilnhq/kiln/internal/store"
	"github.com/kilnhq/kiln/internal/store/storetest"
)

// TestSecret: a configuration's secret is made once, stored sealed, the
// same on every later ask, and another team cannot read it.
func TestSecret(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		ctx := t.Context()
		s := newService(t, db)
		cfg, err := s.Create(ctx, "team_a", "network", "", yamlA)
		if err != nil {
			t.Fatal(err)
		}
		box, _ := secretbox.Load(t.TempDir(), "")
		n := 0
		gen := func() string { n++; return strings.Repeat("s", 63) + string(rune('0'+n)) }
		first, err := s.Secret(ctx, "team_a", cfg.ID, "forwarding", box, gen)
		if err != nil {
			t.Fatal(err)
		}
		again, err := s.Secret(ctx, "team_a", cfg.ID, "forwarding", box, gen)
		if err != nil || again != first {
			t.Errorf("second ask = %q, %v; want the first %q", again, err, first)
		}
		var sealed string
		db.Read().QueryRowContext(ctx, `SELECT sealed FROM configuration_secrets WHERE configuration_id = $1`, cfg.ID).Scan(&sealed)
		if sealed == "" || strings.Contains(sealed, first) {
			t.Errorf("stored value %q: want it sealed", sealed)
		}
		if _, err := s.Secret(ctx, "team_b", cfg.ID, "forwarding", box, gen); !errors.Is(err, ErrNotFound) {
			t.Errorf("another team's ask = %v, want ErrNotFound", err)
		}
	})
}
