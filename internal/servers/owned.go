package servers

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// Owner names the deployment configuration and resource key a server was
// made for (deployment-spec.md §2): "server/lobby", "proxy/edge".
type Owner struct {
	ConfigurationID string
	ResourceKey     string
}

// OwnedError says that a deployment configuration owns a server: it is
// changed and deleted through runs of that configuration, never by hand.
// It is ErrOwned for errors.Is.
type OwnedError struct {
	ConfigurationID string
	ResourceKey     string
}

func (e *OwnedError) Error() string {
	key := ""
	if e.ResourceKey != "" {
		key = " as " + e.ResourceKey
	}
	return fmt.Sprintf("the server belongs to deployment configuration %s%s; change or delete it by applying a new version of that configuration", e.ConfigurationID, key)
}

// Is makes errors.Is(err, ErrOwned) true.
func (e *OwnedError) Is(target error) bool { return target == ErrOwned }

// CreateOwned returns the server of o, creating it (as Create does, with
// the configuration and key recorded, so the name is the spec's and the
// software its profile type) when none was made for o yet: created tells
// which. It is idempotent under races and across crashes — a deployment
// step resumed after a crash finds the server it made, never makes a
// second one (the unique index servers_owned settles a race). Errors:
// *validate.Error, *TeamLimitError, ErrNoPort.
func (s *Service) CreateOwned(ctx context.Context, teamID string, o Owner, ns NewServer) (sv Server, created bool, err error) {
	if o.ConfigurationID == "" || o.ResourceKey == "" {
		return Server{}, false, errors.New("servers: an owned server needs a configuration and a resource key")
	}
	return s.create(ctx, teamID, ns, &o)
}

// FindOwned returns the team's server made for o. Errors: ErrNotFound.
func (s *Service) FindOwned(ctx context.Context, teamID string, o Owner) (Server, error) {
	sv, err := s.scan(s.db.Read().QueryRowContext(ctx, `SELECT `+serverColumns+` FROM servers
		WHERE configuration_id = $1 AND resource_key = $2 AND team_id = $3`, o.ConfigurationID, o.ResourceKey, teamID))
	if errors.Is(err, sql.ErrNoRows) {
		return Server{}, ErrNotFound
	}
	if err != nil {
		return Server{}, fmt.Errorf("find the server of %s: %w", o.ResourceKey, err)
	}
	sv.Resources = s.resources(sv.ID)
	return sv, nil
}

// DeleteOwned deletes the server made for o, as Delete does for a server
// made by hand; none (already deleted: a resumed step) is not an error.
func (s *Service) DeleteOwned(ctx context.Context, teamID string, o Owner) error {
	sv, err := s.FindOwned(ctx, teamID, o)
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if err := s.remove(ctx, teamID, sv.ID); err != nil && !errors.Is(err, ErrNotFound) {
		return err
	}
	return nil
}

// OwnedBy lists the team's servers a configuration owns, by resource key.
func (s *Service) OwnedBy(ctx context.Context, teamID, configurationID string) (map[string]Server, error) {
	rows, err := s.db.Read().QueryContext(ctx, `SELECT resource_key, `+serverColumns+` FROM servers
		WHERE configuration_id = $1 AND team_id = $2`, configurationID, teamID)
	if err != nil {
		return nil, fmt.Errorf("list the servers of %s: %w", configurationID, err)
	}
	defer rows.Close()
	out := map[string]Server{}
	for rows.Next() {
		var key sql.NullString
		sv, err := s.scan(prefixed{rows, &key})
		if err != nil {
			return nil, fmt.Errorf("list the servers of %s: %w", configurationID, err)
		}
		sv.Resources = s.resources(sv.ID)
		out[key.String] = sv
	}
	return out, rows.Err()
}

// prefixed scans one extra leading column into first, then the rest.
type prefixed struct {
	rows  *sql.Rows
	first any
}

func (p prefixed) Scan(dest ...any) error { return p.rows.Scan(append([]any{p.first}, dest...)...) }
