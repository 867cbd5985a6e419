package secrets

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/kilnhq/kiln/internal/store"
	"github.com/kilnhq/kiln/internal/validate"
)

// Limits (doc.go says why).
const (
	MaxName    = 64
	MaxValue   = 16 << 10 // bytes
	MaxSecrets = 200      // per team
)

// Errors callers tell apart.
var (
	ErrNotFound = errors.New("secret not found")
	ErrTooMany  = fmt.Errorf("the team keeps %d secrets, the most it may; delete one first", MaxSecrets)
)

var nameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,63}$`)

// ValidName reports whether name can be a secret's name.
func ValidName(name string) bool { return nameRE.MatchString(name) }

// Sealer seals and opens values (*secretbox.Box).
type Sealer interface {
	Seal(plaintext []byte) (string, error)
	Open(sealed string) ([]byte, error)
}

// Secret is what anyone may read of a secret: its name and times (Unix
// ms), never its value.
type Secret struct {
	Name      string
	CreatedAt int64
	UpdatedAt int64
}

// Service keeps the teams' secrets.
type Service struct {
	db  *store.DB
	box Sealer
	now func() int64
}

// New returns a Service on db sealing with box.
func New(db *store.DB, box Sealer) *Service {
	return &Service{db: db, box: box, now: store.Now}
}

// List returns the team's secrets, by name.
func (s *Service) List(ctx context.Context, teamID string) ([]Secret, error) {
	rows, err := s.db.Read().QueryContext(ctx, `SELECT name, created_at, updated_at FROM team_secrets
		WHERE team_id = $1 ORDER BY name`, teamID)
	if err != nil {
		return nil, fmt.Errorf("list secrets: %w", err)
	}
	defer rows.Close()
	out := []Secret{}
	for rows.Next() {
		var sc Secret
		if err := rows.Scan(&sc.Name, &sc.CreatedAt, &sc.UpdatedAt); err != nil {
			return nil, fmt.Errorf("list secrets: %w", err)
		}
		out = append(out, sc)
	}
	return out, rows.Err()
}

// checkName adds an issue at "name" when name cannot be a secret's.
func checkName(c *validate.Collector, name string) {
	if !ValidName(name) {
		c.Add("name", "must be a letter or _, then letters, digits or _, at most %d in all (as an environment variable's name)", MaxName)
	}
}

// Put stores value as the team's secret name, creating it (created) or
// replacing its value. Errors: *validate.Error (name, value: the message
// never quotes the value), ErrTooMany.
func (s *Service) Put(ctx context.Context, teamID, name, value string) (sc Secret, created bool, err error) {
	var c validate.Collector
	checkName(&c, name)
	switch {
	case value == "":
		c.Add("value", "is required (1 to %d bytes)", MaxValue)
	case len(value) > MaxValue:
		c.Add("value", "must be at most %d bytes", MaxValue)
	case !utf8.ValidString(value) || strings.ContainsRune(value, 0):
		c.Add("value", "must be UTF-8 text without NUL bytes")
	}
	if err := c.Err(); err != nil {
		return Secret{}, false, err
	}
	sealed, err := s.box.Seal([]byte(value))
	if err != nil {
		return Secret{}, false, fmt.Errorf("seal secret %s: %w", name, err)
	}
	now := s.now()
	err = s.db.Tx(ctx, func(tx *sql.Tx) error {
		if s.db.Dialect() == store.Postgres {
			// A team's Puts one after the other: the count below holds.
			if _, err := tx.ExecContext(ctx, `SELECT id FROM teams WHERE id = $1 FOR UPDATE`, teamID); err != nil {
				return fmt.Errorf("lock team: %w", err)
			}
		}
		sc = Secret{Name: name, CreatedAt: now, UpdatedAt: now}
		err := tx.QueryRowContext(ctx, `UPDATE team_secrets SET sealed = $1, updated_at = $2
			WHERE team_id = $3 AND name = $4 RETURNING created_at`, sealed, now, teamID, name).Scan(&sc.CreatedAt)
		if err == nil {
			return nil
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("replace secret %s: %w", name, err)
		}
		var n int
		if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM team_secrets WHERE team_id = $1`, teamID).Scan(&n); err != nil {
			return fmt.Errorf("count secrets: %w", err)
		}
		if n >= MaxSecrets {
			return ErrTooMany
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO team_secrets (team_id, name, sealed, created_at, updated_at)
			VALUES ($1, $2, $3, $4, $4)`, teamID, name, sealed, now); err != nil {
			return fmt.Errorf("store secret %s: %w", name, err)
		}
		created = true
		return nil
	})
	if err != nil {
		return Secret{}, false, err
	}
	return sc, created, nil
}

// Delete removes the team's secret name. Errors: ErrNotFound,
// *validate.Error (a name no secret can have).
func (s *Service) Delete(ctx context.Context, teamID, name string) error {
	var c validate.Collector
	checkName(&c, name)
	if err := c.Err(); err != nil {
		return err
	}
	res, err := s.db.Write().ExecContext(ctx, `DELETE FROM team_secrets WHERE team_id = $1 AND name = $2`, teamID, name)
	if err != nil {
		return fmt.Errorf("delete secret %s: %w", name, err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("delete secret %s: %w", name, err)
	} else if n == 0 {
		return ErrNotFound
	}
	return nil
}

// Values returns the values of the team's secrets among names, by name;
// a name the team has no secret of is left out. It is how a run reads
// them: nothing else answers a value.
func (s *Service) Values(ctx context.Context, teamID string, names []string) (map[string]string, error) {
	out := map[string]string{}
	if len(names) == 0 {
		return out, nil
	}
	rows, err := s.db.Read().QueryContext(ctx, `SELECT name, sealed FROM team_secrets WHERE team_id = $1`, teamID)
	if err != nil {
		return nil, fmt.Errorf("read secrets: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var name, sealed string
		if err := rows.Scan(&name, &sealed); err != nil {
			return nil, fmt.Errorf("read secrets: %w", err)
		}
		if !slices.Contains(names, name) {
			continue
		}
		v, err := s.box.Open(sealed)
		if err != nil {
			return nil, fmt.Errorf("open secret %s: %w", name, err)
		}
		out[name] = string(v)
	}
	return out, rows.Err()
}
