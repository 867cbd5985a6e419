package servers

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/kilnhq/kiln/internal/catalog"
	"github.com/kilnhq/kiln/internal/store"
)

// Records is what a node's lifecycle reads and writes of its servers'
// records: the server it acts on, the servers of its node at recovery,
// and what it learns (a status, the desired state, an install's outcome,
// the runtime's reference to the instance). It is the seam between the
// node-local lifecycle (supervision, installs, recovery, the restart
// policy) and where the records live: the database, through sqlRecords,
// for the local node of kiln serve; the control plane, over the node
// protocol, for a game server on an agent (issue 31), which holds no
// database credentials. The control plane's own work on records
// (create, list, team limits, ownership, env) stays on the database.
//
// Every method is of a server of any team: the team was checked by the
// caller that named the server. Each write is stored before it returns,
// so the lifecycle announces only what is recorded.
type Records interface {
	// Server reads one server (ErrNotFound when it is gone).
	Server(ctx context.Context, id string) (Server, error)
	// NodeServers reads every server of node.
	NodeServers(ctx context.Context, node string) ([]Server, error)
	// SetStatus records a status.
	SetStatus(ctx context.Context, id, status string) error
	// SetDesired records what the user asked for (running or stopped).
	SetDesired(ctx context.Context, id, desired string) error
	// Installed records an install's outcome: what was installed, no
	// install error, status offline.
	Installed(ctx context.Context, id string, res catalog.Result) error
	// InstallFailed records a failed install's reason (a sentence for the
	// team) and status offline.
	InstallFailed(ctx context.Context, id, reason string) error
	// SetRuntimeRef records the reference of the instance that runs the
	// server (a holder's or a container's), for its re-adoption.
	SetRuntimeRef(ctx context.Context, id, ref string) error
	// ClearRuntimeRef forgets the instance's reference; with ref set, only
	// if the record still names that instance (a later start's is kept).
	ClearRuntimeRef(ctx context.Context, id, ref string) error
}

// sqlRecords keeps the records in the servers table.
type sqlRecords struct {
	db *store.DB
	// scan reads a row into a Server (the Service's: it opens sealed
	// secrets and names the address).
	scan func(scanner) (Server, error)
}

func (r sqlRecords) Server(ctx context.Context, id string) (Server, error) {
	sv, err := r.scan(r.db.Read().QueryRowContext(ctx, `SELECT `+serverColumns+` FROM servers WHERE id = $1`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return Server{}, ErrNotFound
	}
	if err != nil {
		return Server{}, fmt.Errorf("get server %s: %w", id, err)
	}
	return sv, nil
}

func (r sqlRecords) NodeServers(ctx context.Context, node string) ([]Server, error) {
	rows, err := r.db.Read().QueryContext(ctx, `SELECT `+serverColumns+` FROM servers WHERE node = $1`, node)
	if err != nil {
		return nil, fmt.Errorf("read the servers of node %s: %w", node, err)
	}
	defer rows.Close()
	var all []Server
	for rows.Next() {
		sv, err := r.scan(rows)
		if err != nil {
			return nil, fmt.Errorf("read the servers of node %s: %w", node, err)
		}
		all = append(all, sv)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read the servers of node %s: %w", node, err)
	}
	return all, nil
}

func (r sqlRecords) SetStatus(ctx context.Context, id, status string) error {
	_, err := r.db.Write().ExecContext(ctx,
		`UPDATE servers SET status = $1, updated_at = $2 WHERE id = $3`, status, store.Now(), id)
	if err != nil {
		return fmt.Errorf("set status of %s to %s: %w", id, status, err)
	}
	return nil
}

func (r sqlRecords) SetDesired(ctx context.Context, id, desired string) error {
	_, err := r.db.Write().ExecContext(ctx,
		`UPDATE servers SET desired_state = $1, updated_at = $2 WHERE id = $3`, desired, store.Now(), id)
	if err != nil {
		return fmt.Errorf("set desired state of %s: %w", id, err)
	}
	return nil
}

func (r sqlRecords) Installed(ctx context.Context, id string, res catalog.Result) error {
	_, err := r.db.Write().ExecContext(ctx, `
		UPDATE servers SET version = $1, java_major = $2, jar = $3, args_file = $4, install_error = NULL,
		       status = $5, updated_at = $6
		WHERE id = $7`, res.Version, res.JavaMajor, res.Jar, res.ArgsFile, StatusOffline, store.Now(), id)
	if err != nil {
		return fmt.Errorf("record the install of %s: %w", id, err)
	}
	return nil
}

func (r sqlRecords) InstallFailed(ctx context.Context, id, reason string) error {
	_, err := r.db.Write().ExecContext(ctx,
		`UPDATE servers SET install_error = $1, status = $2, updated_at = $3 WHERE id = $4`,
		reason, StatusOffline, store.Now(), id)
	if err != nil {
		return fmt.Errorf("record the failed install of %s: %w", id, err)
	}
	return nil
}

func (r sqlRecords) SetRuntimeRef(ctx context.Context, id, ref string) error {
	if _, err := r.db.Write().ExecContext(ctx, `UPDATE servers SET runtime_ref = $1 WHERE id = $2`, ref, id); err != nil {
		return fmt.Errorf("record the runtime reference of %s: %w", id, err)
	}
	return nil
}

func (r sqlRecords) ClearRuntimeRef(ctx context.Context, id, ref string) error {
	var err error
	if ref == "" {
		_, err = r.db.Write().ExecContext(ctx, `UPDATE servers SET runtime_ref = NULL WHERE id = $1`, id)
	} else {
		_, err = r.db.Write().ExecContext(ctx, `UPDATE servers SET runtime_ref = NULL WHERE id = $1 AND runtime_ref = $2`, id, ref)
	}
	if err != nil {
		return fmt.Errorf("clear the runtime reference of %s: %w", id, err)
	}
	return nil
}
