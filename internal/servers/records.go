package servers

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/kilnhq/kiln/internal/catalog"
	"github.com/kilnhq/kiln/internal/gameserver"
	"github.com/kilnhq/kiln/internal/store"
)

// sqlRecords keeps the records in the servers table: the
// gameserver.Records of the local node's lifecycle.
// It reads rows through the Service, which opens sealed secrets (scan)
// and seals them (storedEnv).
type sqlRecords struct{ s *Service }

func (r sqlRecords) Server(ctx context.Context, id string) (gameserver.Record, error) {
	// Prepared and read as Get reads: the host reads the record again for
	// every write into a server's files (Access), after the team's check.
	st, err := r.s.prepared(ctx, &r.s.anySt, `SELECT `+serverColumns+` FROM servers WHERE id = $1`)
	if err != nil {
		return gameserver.Record{}, fmt.Errorf("get server %s: %w", id, err)
	}
	pctx, cancel := r.s.db.PointRead(ctx)
	defer cancel()
	sv, err := r.s.scan(st.QueryRowContext(pctx, id))
	if errors.Is(err, sql.ErrNoRows) {
		return gameserver.Record{}, ErrNotFound
	}
	if err != nil {
		return gameserver.Record{}, fmt.Errorf("get server %s: %w", id, err)
	}
	return sv.record(), nil
}

func (r sqlRecords) NodeServers(ctx context.Context, node string) ([]gameserver.Record, error) {
	rows, err := r.s.db.Read().QueryContext(ctx, `SELECT `+serverColumns+` FROM servers WHERE node = $1`, node)
	if err != nil {
		return nil, fmt.Errorf("read the servers of node %s: %w", node, err)
	}
	defer rows.Close()
	var all []gameserver.Record
	for rows.Next() {
		sv, err := r.s.scan(rows)
		if err != nil {
			return nil, fmt.Errorf("read the servers of node %s: %w", node, err)
		}
		all = append(all, sv.record())
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read the servers of node %s: %w", node, err)
	}
	return all, nil
}

func (r sqlRecords) SetStatus(ctx context.Context, id, status string) error {
	_, err := r.s.db.Write().ExecContext(ctx,
		`UPDATE servers SET status = $1, updated_at = $2 WHERE id = $3`, status, store.Now(), id)
	if err != nil {
		return fmt.Errorf("set status of %s to %s: %w", id, status, err)
	}
	return nil
}

func (r sqlRecords) SetDesired(ctx context.Context, id, desired string) error {
	_, err := r.s.db.Write().ExecContext(ctx,
		`UPDATE servers SET desired_state = $1, updated_at = $2 WHERE id = $3`, desired, store.Now(), id)
	if err != nil {
		return fmt.Errorf("set desired state of %s: %w", id, err)
	}
	return nil
}

func (r sqlRecords) Installed(ctx context.Context, id string, res catalog.Result) error {
	_, err := r.s.db.Write().ExecContext(ctx, `
		UPDATE servers SET version = $1, java_major = $2, jar = $3, args_file = $4, install_error = NULL,
		       status = $5, updated_at = $6
		WHERE id = $7`, res.Version, res.JavaMajor, res.Jar, res.ArgsFile, StatusOffline, store.Now(), id)
	if err != nil {
		return fmt.Errorf("record the install of %s: %w", id, err)
	}
	return nil
}

func (r sqlRecords) InstallFailed(ctx context.Context, id, reason string) error {
	_, err := r.s.db.Write().ExecContext(ctx,
		`UPDATE servers SET install_error = $1, status = $2, updated_at = $3 WHERE id = $4`,
		reason, StatusOffline, store.Now(), id)
	if err != nil {
		return fmt.Errorf("record the failed install of %s: %w", id, err)
	}
	return nil
}

func (r sqlRecords) Reinstalling(ctx context.Context, id, software, version string, env map[string]string) error {
	envJSON, err := r.s.storedEnv(software, env)
	if err != nil {
		return err
	}
	_, err = r.s.db.Write().ExecContext(ctx,
		`UPDATE servers SET software = $1, version = $2, env = $3, status = $4, install_error = NULL, updated_at = $5
		 WHERE id = $6`,
		software, version, envJSON, StatusInstalling, store.Now(), id)
	if err != nil {
		return fmt.Errorf("reinstall %s: %w", id, err)
	}
	return nil
}

func (r sqlRecords) SetRuntimeRef(ctx context.Context, id, ref string) error {
	if _, err := r.s.db.Write().ExecContext(ctx, `UPDATE servers SET runtime_ref = $1 WHERE id = $2`, ref, id); err != nil {
		return fmt.Errorf("record the runtime reference of %s: %w", id, err)
	}
	return nil
}

func (r sqlRecords) ClearRuntimeRef(ctx context.Context, id, ref string) error {
	var err error
	if ref == "" {
		_, err = r.s.db.Write().ExecContext(ctx, `UPDATE servers SET runtime_ref = NULL WHERE id = $1`, id)
	} else {
		_, err = r.s.db.Write().ExecContext(ctx, `UPDATE servers SET runtime_ref = NULL WHERE id = $1 AND runtime_ref = $2`, id, ref)
	}
	if err != nil {
		return fmt.Errorf("clear the runtime reference of %s: %w", id, err)
	}
	return nil
}

// NodeRecords is the records of node's servers only, for the agent that
// is node (noderpc.RecordsHandler answers it with these): a server of
// another node is ErrNotFound to it, as one that does not exist, for a
// read and for every write, and NodeServers lists node's whatever node
// it is asked for. A game host so reaches no other node's servers.
func (s *Service) NodeRecords(node string) gameserver.Records {
	return nodeRecords{all: sqlRecords{s}, node: node}
}

type nodeRecords struct {
	all  sqlRecords
	node string
}

// mine checks that server id is the node's.
func (r nodeRecords) mine(ctx context.Context, id string) error {
	sv, err := r.all.Server(ctx, id)
	if err != nil {
		return err
	}
	if sv.Node != r.node {
		return ErrNotFound
	}
	return nil
}

func (r nodeRecords) Server(ctx context.Context, id string) (gameserver.Record, error) {
	sv, err := r.all.Server(ctx, id)
	if err == nil && sv.Node != r.node {
		return gameserver.Record{}, ErrNotFound
	}
	return sv, err
}

func (r nodeRecords) NodeServers(ctx context.Context, _ string) ([]gameserver.Record, error) {
	return r.all.NodeServers(ctx, r.node)
}

func (r nodeRecords) SetStatus(ctx context.Context, id, status string) error {
	if err := r.mine(ctx, id); err != nil {
		return err
	}
	return r.all.SetStatus(ctx, id, status)
}

func (r nodeRecords) SetDesired(ctx context.Context, id, desired string) error {
	if err := r.mine(ctx, id); err != nil {
		return err
	}
	return r.all.SetDesired(ctx, id, desired)
}

func (r nodeRecords) Installed(ctx context.Context, id string, res catalog.Result) error {
	if err := r.mine(ctx, id); err != nil {
		return err
	}
	return r.all.Installed(ctx, id, res)
}

func (r nodeRecords) InstallFailed(ctx context.Context, id, reason string) error {
	if err := r.mine(ctx, id); err != nil {
		return err
	}
	return r.all.InstallFailed(ctx, id, reason)
}

func (r nodeRecords) Reinstalling(ctx context.Context, id, software, version string, env map[string]string) error {
	if err := r.mine(ctx, id); err != nil {
		return err
	}
	return r.all.Reinstalling(ctx, id, software, version, env)
}

func (r nodeRecords) SetRuntimeRef(ctx context.Context, id, ref string) error {
	if err := r.mine(ctx, id); err != nil {
		return err
	}
	return r.all.SetRuntimeRef(ctx, id, ref)
}

func (r nodeRecords) ClearRuntimeRef(ctx context.Context, id, ref string) error {
	if err := r.mine(ctx, id); err != nil {
		return err
	}
	return r.all.ClearRuntimeRef(ctx, id, ref)
}

// IDsOn lists the ids of node's servers (every team's): the servers whose
// live figures a remote driver fetches from their agent.
func (s *Service) IDsOn(ctx context.Context, node string) ([]string, error) {
	rows, err := s.db.Read().QueryContext(ctx, `SELECT id FROM servers WHERE node = $1`, node)
	if err != nil {
		return nil, fmt.Errorf("list the servers of node %s: %w", node, err)
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("list the servers of node %s: %w", node, err)
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}
