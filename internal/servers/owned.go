package servers

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"

	"github.com/kilnhq/kiln/internal/store"
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
// second one (the unique index servers_owned settles a race). A server
// made for o on another node (a run resumed by another replica) is
// *OtherNodeError: this process cannot finish its install or start it.
// Errors: *validate.Error, *nodes.UnknownNodeError,
// *nodes.NoCapacityError, *TeamLimitError, *OtherNodeError.
func (s *Service) CreateOwned(ctx context.Context, teamID string, o Owner, ns NewServer) (sv Server, created bool, err error) {
	if o.ConfigurationID == "" || o.ResourceKey == "" {
		return Server{}, false, errors.New("servers: an owned server needs a configuration and a resource key")
	}
	sv, created, err = s.create(ctx, teamID, ns, &o)
	if err == nil && !created && sv.Node != s.node.Name() {
		return sv, false, &OtherNodeError{Node: sv.Node, Here: s.node.Name()}
	}
	return sv, created, err
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
	sv.Resources = s.resourcesOf(sv)
	return sv, nil
}

// Change is an in-place update of an owned server (a deployment's update
// step): a nil field, a nil Env and an empty Version are unchanged; Env
// replaces the whole environment.
type Change struct {
	MemoryMB, DiskMB, CPUPercent *int
	Env                          map[string]string
	Version                      string
	// Restart restarts a server that should run even when nothing
	// recorded changed: what Options.Injected gives it did.
	Restart bool
	// Image, when not nil, is the docker image ("" for the profile's
	// choice).
	Image *string
	// Port, when not nil and not 0, is the game port asked for: a new one
	// moves the server there (checked free, restarted).
	Port *int
}

// UpdateOwned changes the server made for o in place, keeping its files:
// limits and environment are recorded (checked as Create checks them, the
// team's limits against the growth only), a new game version reinstalls it
// (world files kept), and a server that should run is restarted so the
// change takes effect (the disk limit applies from the next write without
// one). It returns the server as recorded. Errors: ErrNotFound,
// ErrInstalling (try again once installed), *validate.Error,
// *TeamLimitError.
func (s *Service) UpdateOwned(ctx context.Context, teamID string, o Owner, c Change) (Server, error) {
	sv, err := s.findOwnedLocal(ctx, teamID, o)
	if err != nil {
		return Server{}, err
	}
	if sv.Status == StatusInstalling {
		return Server{}, ErrInstalling
	}
	ns := NewServer{Name: sv.Name, Software: sv.Software, Version: sv.Version, MemoryMB: sv.MemoryMB,
		DiskMB: sv.DiskMB, CPUPercent: sv.CPUPercent, Env: sv.Env, Image: sv.Image}
	if c.Image != nil {
		ns.Image = *c.Image
	}
	port := sv.Port
	if c.Port != nil && *c.Port != 0 && *c.Port != sv.Port {
		ns.Port = *c.Port
		if _, err := s.checkSpec(&ns); err != nil {
			return Server{}, err
		}
		if err := s.checkPort(ctx, *c.Port); err != nil {
			return Server{}, err
		}
		port = *c.Port
	}
	if c.MemoryMB != nil {
		ns.MemoryMB = *c.MemoryMB
	}
	if c.DiskMB != nil {
		ns.DiskMB = *c.DiskMB
	}
	if c.CPUPercent != nil {
		ns.CPUPercent = *c.CPUPercent
	}
	if c.Env != nil {
		ns.Env = c.Env
	}
	if _, err := s.checkSpec(&ns); err != nil {
		return Server{}, err
	}
	if err := s.checkNodeDisk(ctx, ns.DiskMB); err != nil {
		return Server{}, err
	}
	envJSON, err := s.storedEnv(ns.Software, ns.Env)
	if err != nil {
		return Server{}, err
	}
	changed := ns.MemoryMB != sv.MemoryMB || ns.DiskMB != sv.DiskMB || ns.CPUPercent != sv.CPUPercent || !maps.Equal(ns.Env, sv.Env) ||
		ns.Image != sv.Image || port != sv.Port
	if changed {
		err = s.db.Tx(ctx, func(tx *sql.Tx) error {
			if err := s.checkTeamGrowth(ctx, tx, teamID, 0, ns.MemoryMB-sv.MemoryMB, ns.DiskMB-sv.DiskMB); err != nil {
				return err
			}
			_, err := tx.ExecContext(ctx, `UPDATE servers SET memory_mb = $1, disk_mb = $2, cpu_percent = $3, env = $4, updated_at = $5,
				image = $6, port = $7 WHERE id = $8 AND team_id = $9`, ns.MemoryMB, ns.DiskMB, ns.CPUPercent, envJSON, store.Now(), ns.Image, port, sv.ID, teamID)
			return err
		})
		if store.IsUniqueViolation(err) {
			return Server{}, &PortTakenError{Port: port}
		}
		if err != nil {
			return Server{}, fmt.Errorf("update %s: %w", o.ResourceKey, err)
		}
	}
	switch {
	case c.Version != "" && c.Version != sv.Version:
		// Reinstall stops a running server, installs, and starts it again.
		if err := s.Reinstall(ctx, teamID, sv.ID, "", c.Version); err != nil {
			return Server{}, err
		}
	case (changed || c.Restart) && sv.DesiredState == "running":
		if err := s.Power(ctx, teamID, sv.ID, "restart"); err != nil {
			return Server{}, err
		}
	}
	return s.FindOwned(ctx, teamID, o)
}

// DeleteOwned deletes the server made for o, as Delete does for a server
// made by hand; none (already deleted: a resumed step) is not an error.
func (s *Service) DeleteOwned(ctx context.Context, teamID string, o Owner) error {
	sv, err := s.findOwnedLocal(ctx, teamID, o)
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if err := s.remove(ctx, teamID, sv); err != nil && !errors.Is(err, ErrNotFound) {
		return err
	}
	return nil
}

// OwnedBy lists the team's servers a configuration owns, by resource key.
func (s *Service) OwnedBy(ctx context.Context, teamID, configurationID string) (map[string]Server, error) {
	rows, err := s.db.Read().QueryContext(ctx, `SELECT `+serverColumns+` FROM servers
		WHERE configuration_id = $1 AND team_id = $2`, configurationID, teamID)
	if err != nil {
		return nil, fmt.Errorf("list the servers of %s: %w", configurationID, err)
	}
	defer rows.Close()
	out := map[string]Server{}
	for rows.Next() {
		sv, err := s.scan(rows)
		if err != nil {
			return nil, fmt.Errorf("list the servers of %s: %w", configurationID, err)
		}
		sv.Resources = s.resourcesOf(sv)
		out[sv.resourceKey.String] = sv
	}
	return out, rows.Err()
}
