package auth

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"regexp"

	"github.com/kilnhq/kiln/internal/ids"
	"github.com/kilnhq/kiln/internal/store"
	"github.com/kilnhq/kiln/internal/validate"
)

// Errors callers tell apart.
var (
	ErrTeamNotFound  = errors.New("team not found")
	ErrTeamExists    = errors.New("a team with this name already exists")
	ErrTokenNotFound = errors.New("token not found")
)

var (
	teamNameRE   = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)
	tokenLabelRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,63}$`)
)

// Team is a tenant: every object belongs to exactly one.
type Team struct {
	ID        string
	Name      string
	CreatedAt int64
}

// TokenInfo describes a token without its secret.
type TokenInfo struct {
	ID        string
	TeamID    string
	TeamName  string
	Kind      Kind
	Name      string
	CreatedAt int64
	RevokedAt *int64
}

// Principal is who a request acts as.
type Principal struct {
	TeamID  string
	TokenID string
	Kind    Kind
	Label   string
}

// Actor is how the principal is recorded in pushed_by and events:
// "user:<label>" or "agent:<label>".
func (p Principal) Actor() string { return string(p.Kind) + ":" + p.Label }

// Service issues and checks tokens.
type Service struct {
	db     *store.DB
	lookup *sql.Stmt
}

// NewService prepares the token look-up once; Close releases it.
func NewService(ctx context.Context, db *store.DB) (*Service, error) {
	st, err := db.Read().PrepareContext(ctx,
		`SELECT id, team_id, kind, name, revoked_at FROM tokens WHERE digest = $1`)
	if err != nil {
		return nil, fmt.Errorf("prepare token look-up: %w", err)
	}
	return &Service{db: db, lookup: st}, nil
}

// Close releases the prepared statement.
func (s *Service) Close() error { return s.lookup.Close() }

// Authenticate returns the principal of a bearer token. A malformed token is
// refused before any database access. It returns ErrInvalidToken when the
// token is malformed, unknown or revoked.
func (s *Service) Authenticate(ctx context.Context, raw string) (Principal, error) {
	if _, err := Parse(raw); err != nil {
		return Principal{}, err
	}
	var p Principal
	var kind string
	var revoked sql.NullInt64
	// A point read of microseconds: on SQLite without the request's
	// cancellation (database/sql and the driver skip a watcher goroutine
	// per query, docs/benchmarks.md, servers section; busy_timeout bounds
	// it), on PostgreSQL with a deadline (store.PointRead).
	pctx, cancel := s.db.PointRead(ctx)
	defer cancel()
	err := s.lookup.QueryRowContext(pctx, digest(raw)).Scan(&p.TokenID, &p.TeamID, &kind, &p.Label, &revoked)
	if errors.Is(err, sql.ErrNoRows) {
		return Principal{}, ErrInvalidToken
	}
	if err != nil {
		return Principal{}, fmt.Errorf("look up token: %w", err)
	}
	if revoked.Valid {
		return Principal{}, ErrInvalidToken
	}
	p.Kind = Kind(kind)
	return p, nil
}

// CreateTeam makes a team. It returns *validate.Error for a bad name and
// ErrTeamExists when the name is taken.
func (s *Service) CreateTeam(ctx context.Context, name string) (Team, error) {
	if !teamNameRE.MatchString(name) {
		return Team{}, validate.Errorf("name", "team name must be 1-63 characters of a-z, 0-9 and '-', starting with a letter or digit")
	}
	t := Team{ID: ids.New("team"), Name: name, CreatedAt: store.Now()}
	res, err := s.db.Write().ExecContext(ctx,
		`INSERT INTO teams (id, name, created_at) VALUES ($1, $2, $3) ON CONFLICT (name) DO NOTHING`,
		t.ID, t.Name, t.CreatedAt)
	if err != nil {
		return Team{}, fmt.Errorf("create team %q: %w", name, err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return Team{}, fmt.Errorf("create team %q: %w", name, err)
	} else if n == 0 {
		return Team{}, ErrTeamExists
	}
	return t, nil
}

// TeamByName finds a team; ErrTeamNotFound when there is none.
func (s *Service) TeamByName(ctx context.Context, name string) (Team, error) {
	var t Team
	err := s.db.Read().QueryRowContext(ctx, `SELECT id, name, created_at FROM teams WHERE name = $1`, name).
		Scan(&t.ID, &t.Name, &t.CreatedAt)
	if errors.Is(err, sql.ErrNoRows) {
		return Team{}, ErrTeamNotFound
	}
	if err != nil {
		return Team{}, fmt.Errorf("find team %q: %w", name, err)
	}
	return t, nil
}

// CreateToken issues a token for the named team and returns it in clear
// text, the only time it is ever available. Errors: *validate.Error for a bad
// label, ErrTeamNotFound.
func (s *Service) CreateToken(ctx context.Context, teamName string, kind Kind, label string) (Secret, TokenInfo, error) {
	if kind != KindUser && kind != KindAgent {
		return "", TokenInfo{}, validate.Errorf("kind", `token kind must be "user" or "agent"`)
	}
	if !tokenLabelRE.MatchString(label) {
		return "", TokenInfo{}, validate.Errorf("name", "token name must be 1-64 characters of a-z, 0-9, '_' and '-', starting with a letter or digit")
	}
	team, err := s.TeamByName(ctx, teamName)
	if err != nil {
		return "", TokenInfo{}, err
	}
	return s.insertToken(ctx, s.db.Write(), team, kind, label)
}

type execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

func (s *Service) insertToken(ctx context.Context, db execer, team Team, kind Kind, label string) (Secret, TokenInfo, error) {
	secret := generate(kind)
	info := TokenInfo{ID: ids.New("tok"), TeamID: team.ID, TeamName: team.Name, Kind: kind, Name: label, CreatedAt: store.Now()}
	_, err := db.ExecContext(ctx,
		`INSERT INTO tokens (id, team_id, kind, name, digest, created_at) VALUES ($1, $2, $3, $4, $5, $6)`,
		info.ID, info.TeamID, string(kind), label, digest(string(secret)), info.CreatedAt)
	if err != nil {
		return "", TokenInfo{}, fmt.Errorf("create token: %w", err)
	}
	return secret, info, nil
}

// ListTokens lists a team's tokens, oldest first, revoked ones included.
func (s *Service) ListTokens(ctx context.Context, teamName string) ([]TokenInfo, error) {
	team, err := s.TeamByName(ctx, teamName)
	if err != nil {
		return nil, err
	}
	rows, err := s.db.Read().QueryContext(ctx,
		`SELECT id, kind, name, created_at, revoked_at FROM tokens WHERE team_id = $1 ORDER BY created_at, id`, team.ID)
	if err != nil {
		return nil, fmt.Errorf("list tokens: %w", err)
	}
	defer rows.Close()
	var out []TokenInfo
	for rows.Next() {
		t := TokenInfo{TeamID: team.ID, TeamName: team.Name}
		var kind string
		var revoked sql.NullInt64
		if err := rows.Scan(&t.ID, &kind, &t.Name, &t.CreatedAt, &revoked); err != nil {
			return nil, fmt.Errorf("list tokens: %w", err)
		}
		t.Kind = Kind(kind)
		if revoked.Valid {
			t.RevokedAt = &revoked.Int64
		}
		out = append(out, t)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list tokens: %w", err)
	}
	return out, nil
}

// RevokeToken revokes a token by id; revoking twice is not an error.
// It returns ErrTokenNotFound for an unknown id.
func (s *Service) RevokeToken(ctx context.Context, id string) error {
	res, err := s.db.Write().ExecContext(ctx,
		`UPDATE tokens SET revoked_at = COALESCE(revoked_at, $1) WHERE id = $2`, store.Now(), id)
	if err != nil {
		return fmt.Errorf("revoke token %s: %w", id, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("revoke token %s: %w", id, err)
	}
	if n == 0 {
		return ErrTokenNotFound
	}
	return nil
}

// BootstrapTeam is the team made on first start.
const BootstrapTeam = "default"

// Bootstrap creates team "default" and a user token named "admin" when the
// database has no team at all, and returns the token; created is false (and
// the token empty) when any team already exists. Two replicas starting at
// once on one PostgreSQL create one team: the loser sees created=false.
func (s *Service) Bootstrap(ctx context.Context) (token Secret, created bool, err error) {
	err = s.db.Tx(ctx, func(tx *sql.Tx) error {
		var n int
		if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM teams`).Scan(&n); err != nil {
			return fmt.Errorf("count teams: %w", err)
		}
		if n > 0 {
			return nil
		}
		team := Team{ID: ids.New("team"), Name: BootstrapTeam, CreatedAt: store.Now()}
		res, err := tx.ExecContext(ctx,
			`INSERT INTO teams (id, name, created_at) VALUES ($1, $2, $3) ON CONFLICT (name) DO NOTHING`,
			team.ID, team.Name, team.CreatedAt)
		if err != nil {
			return fmt.Errorf("create team %q: %w", BootstrapTeam, err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return nil
		}
		token, _, err = s.insertToken(ctx, tx, team, KindUser, "admin")
		if err != nil {
			return err
		}
		created = true
		return nil
	})
	if err != nil {
		return "", false, fmt.Errorf("bootstrap: %w", err)
	}
	return token, created, nil
}
