package nodes

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/kilnhq/kiln/internal/node"
	"github.com/kilnhq/kiln/internal/store"
)

// Known reads the cluster's nodes by name, each with its game ports (the
// zero range for a node that has not said yet: an agent not joined, a
// local node not started). internal/deploy checks with it that a spec
// names nodes that exist and asks for a proxy port within its node's
// range, without the rest of a listing.
func Known(ctx context.Context, db *store.DB) (map[string]node.PortRange, error) {
	rows, err := db.Read().QueryContext(ctx, `SELECT name, port_first, port_last FROM nodes`)
	if err != nil {
		return nil, fmt.Errorf("read the nodes: %w", err)
	}
	defer rows.Close()
	out := map[string]node.PortRange{}
	for rows.Next() {
		var name string
		var r node.PortRange
		if err := rows.Scan(&name, &r.First, &r.Last); err != nil {
			return nil, fmt.Errorf("read the nodes: %w", err)
		}
		out[name] = r
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read the nodes: %w", err)
	}
	return out, nil
}

// Kind reads whether node is a kiln serve's local node or an agent
// (*UnknownNodeError for a node that does not exist).
func (s *Service) Kind(ctx context.Context, name string) (Kind, error) {
	var k Kind
	err := s.db.Read().QueryRowContext(ctx, `SELECT kind FROM nodes WHERE name = $1`, name).Scan(&k)
	if errors.Is(err, sql.ErrNoRows) {
		return "", &UnknownNodeError{Name: name}
	}
	if err != nil {
		return "", fmt.Errorf("read node %s: %w", name, err)
	}
	return k, nil
}

// Statuses reads every node's status (as List gives it, without the
// rest of a listing): the servers' API shows it beside each server.
func (s *Service) Statuses(ctx context.Context) (map[string]Status, error) {
	rows, err := s.db.Read().QueryContext(ctx, `SELECT name, kind, cert_serial IS NOT NULL, drained_at IS NOT NULL, reachable_until FROM nodes`)
	if err != nil {
		return nil, fmt.Errorf("read the nodes' statuses: %w", err)
	}
	defer rows.Close()
	now := s.now().UnixMilli()
	out := map[string]Status{}
	for rows.Next() {
		var name string
		var kind Kind
		var enrolled, draining bool
		var until sql.NullInt64
		if err := rows.Scan(&name, &kind, &enrolled, &draining, &until); err != nil {
			return nil, fmt.Errorf("read the nodes' statuses: %w", err)
		}
		out[name] = statusOf(kind, enrolled, draining, until, now)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read the nodes' statuses: %w", err)
	}
	return out, nil
}
