package nodes

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
)

// Node is one node as listed. Sizes are bytes as the node last reported
// them; Servers and MemoryAllocatedMB are of the servers placed on it.
type Node struct {
	Name              string
	Kind              Kind
	Status            Status
	Draining          bool
	Address           string // where its connection came from (agents); "" for a local node
	PublicHost        string
	SFTPAddr          string
	PortFirst         int
	PortLast          int
	Runtime           string
	Version           string
	MemoryTotal       int64
	MemoryFree        int64
	DiskTotal         int64
	DiskFree          int64
	MemoryAllocatedMB int64
	Servers           int
	PortsFree         int
	LastHeartbeatAt   *int64 // Unix ms; nil: never
	JoinExpiresAt     *int64 // pending nodes: when the join token stops working
	CertExpiresAt     *int64 // agents: when their certificate expires
	CertRenewing      bool   // agents: a renewed certificate signed, not used yet
	EnrolledAt        *int64
	CreatedAt         int64
}

// usage is what the servers placed on a node take.
type usage struct {
	servers  int
	memoryMB int64
	ports    map[int]bool
}

// List returns every node, by name, with its status as of now:
// pending until it enrolls; unreachable when its last report is older
// than the silence its control plane allows (or it never reported);
// else draining or ready.
func (s *Service) List(ctx context.Context) ([]Node, error) {
	list, _, err := s.list(ctx, s.db.Read(), "")
	return list, err
}

// querier is a pool or a transaction.
type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// list is List on q, of node only when it is not "" (then none or one),
// with the ports of each node's range that are taken: held by its servers
// or, as its report says, by something else on the host.
func (s *Service) list(ctx context.Context, q querier, only string) ([]Node, map[string]map[int]bool, error) {
	use, err := s.usage(ctx, q, only)
	if err != nil {
		return nil, nil, err
	}
	query := `SELECT name, kind, cert_serial, join_expires_at, cert_expires_at, drained_at, address, public_host,
sftp_addr, port_first, port_last, runtime, version, memory_total, memory_free, disk_total, disk_free, ports_busy, heartbeat_at,
reachable_until, created_at, enrolled_at, cert_next_serial FROM nodes`
	var args []any
	if only != "" {
		query += ` WHERE name = $1`
		args = append(args, only)
	}
	rows, err := q.QueryContext(ctx, query+` ORDER BY name`, args...)
	if err != nil {
		return nil, nil, fmt.Errorf("list nodes: %w", err)
	}
	defer rows.Close()
	now := s.now().UnixMilli()
	var out []Node
	taken := map[string]map[int]bool{}
	for rows.Next() {
		var n Node
		var serial, next sql.NullString
		var joinExp, certExp, drained, beat, until, enrolled sql.NullInt64
		var busy string
		if err := rows.Scan(&n.Name, &n.Kind, &serial, &joinExp, &certExp, &drained, &n.Address, &n.PublicHost, &n.SFTPAddr,
			&n.PortFirst, &n.PortLast, &n.Runtime, &n.Version, &n.MemoryTotal, &n.MemoryFree, &n.DiskTotal, &n.DiskFree, &busy,
			&beat, &until, &n.CreatedAt, &enrolled, &next); err != nil {
			return nil, nil, fmt.Errorf("list nodes: %w", err)
		}
		n.Draining, n.CertRenewing = drained.Valid, next.Valid
		n.LastHeartbeatAt, n.CertExpiresAt, n.EnrolledAt = ptr(beat), ptr(certExp), ptr(enrolled)
		n.Status = statusOf(n.Kind, serial.Valid, n.Draining, until, now)
		if n.Status == StatusPending {
			n.JoinExpiresAt = ptr(joinExp)
		}
		u := use[n.Name]
		if u == nil {
			u = &usage{}
		}
		n.Servers, n.MemoryAllocatedMB = u.servers, u.memoryMB
		if n.PortFirst > 0 {
			var ports []int
			_ = json.Unmarshal([]byte(busy), &ports) // written by Beat: a list of ints
			held := map[int]bool{}
			for p := range u.ports {
				held[p] = true
			}
			for _, p := range ports {
				held[p] = true
			}
			n.PortsFree = n.PortLast - n.PortFirst + 1
			for p := range held {
				if p >= n.PortFirst && p <= n.PortLast {
					n.PortsFree--
				}
			}
			taken[n.Name] = held
		}
		out = append(out, n)
	}
	if err := rows.Err(); err != nil {
		return nil, nil, fmt.Errorf("list nodes: %w", err)
	}
	return out, taken, nil
}

// usage sums the servers of each node. It reads the servers table (owned
// by internal/servers) and never writes it: what a node holds is what
// listing and removing a node must know.
func (s *Service) usage(ctx context.Context, q querier, only string) (map[string]*usage, error) {
	query := `SELECT node, port, memory_mb FROM servers`
	var args []any
	if only != "" {
		query += ` WHERE node = $1`
		args = append(args, only)
	}
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("count servers per node: %w", err)
	}
	defer rows.Close()
	out := map[string]*usage{}
	for rows.Next() {
		var node string
		var port int
		var mem int64
		if err := rows.Scan(&node, &port, &mem); err != nil {
			return nil, fmt.Errorf("count servers per node: %w", err)
		}
		u := out[node]
		if u == nil {
			u = &usage{ports: map[int]bool{}}
			out[node] = u
		}
		u.servers++
		u.memoryMB += mem
		u.ports[port] = true
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("count servers per node: %w", err)
	}
	return out, nil
}

func ptr(v sql.NullInt64) *int64 {
	if !v.Valid {
		return nil
	}
	x := v.Int64
	return &x
}

// statusOf is a node's status from its row, read at now (unix ms):
// pending (an agent not enrolled), unreachable (past reachable_until),
// draining, ready — in that order.
func statusOf(kind Kind, enrolled, draining bool, until sql.NullInt64, now int64) Status {
	switch {
	case kind == KindAgent && !enrolled:
		return StatusPending
	case !until.Valid || until.Int64 <= now:
		return StatusUnreachable
	case draining:
		return StatusDraining
	default:
		return StatusReady
	}
}
