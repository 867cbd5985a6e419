package nodes

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/kilnhq/kiln/internal/store"
)

// DefaultOvercommit is kiln serve's --memory-overcommit: the memory of a
// node's servers may reach its total, no more.
const DefaultOvercommit = 1.0

// MaxOvercommit bounds --memory-overcommit: far beyond it the memory a
// node offers means nothing (and a total times it overflows).
const MaxOvercommit = 100.0

// Request is what a new server asks of a node.
type Request struct {
	MemoryMB int // its memory_mb, in MiB
	DiskMB   int // its disk_mb, in MiB
	// Port is the game port asked for (a deployment's proxy port); 0 for
	// the lowest free one of the node's range.
	Port int
	// Runtime is the runtime the server needs (process or docker); ""
	// takes either.
	Runtime string
	// Node is the node asked for; "" lets Place choose.
	Node string
	// Spread names the deployment configuration the server is made for
	// (its id; "" for a server made by hand): when Place chooses, it
	// prefers the fitting node holding the fewest servers of that
	// configuration, so a network's servers spread over the nodes
	// (deployment-spec.md §1) rather than filling the roomiest first.
	Spread string
	// Taken are ports found taken since the tables were read (an insert
	// that lost a race for the port, a probe of the host), by node: Place
	// hands none of them out.
	Taken map[string]map[int]bool
}

// Placement is where a new server goes: its node and game port.
type Placement struct {
	Node string
	Port int
}

// Refusal is why one node cannot take a server: Reason is a phrase for
// the team asking ("1024 MiB of memory free, 2048 asked").
type Refusal struct {
	Node   string
	Reason string
}

// NoCapacityError: no node can take the server. Refusals say why, one a
// node by name: every node when Place chose, the node asked for else.
type NoCapacityError struct {
	Refusals []Refusal
}

func (e *NoCapacityError) Error() string {
	if len(e.Refusals) == 0 {
		return "no node can take the server: the cluster has no node"
	}
	parts := make([]string, len(e.Refusals))
	for i, r := range e.Refusals {
		parts[i] = "node " + r.Node + ": " + r.Reason
	}
	return "no node can take the server: " + strings.Join(parts, "; ")
}

// UnknownNodeError: the node asked for does not exist.
type UnknownNodeError struct{ Name string }

func (e *UnknownNodeError) Error() string { return fmt.Sprintf("no node is named %q", e.Name) }

// ErrNoLongerFits: Reserve found that the node Place chose cannot take
// the server any more (another server took its room, it was drained or
// removed meanwhile): place again.
var ErrNoLongerFits = errors.New("the node chosen can no longer take the server")

// Placer chooses the node of every new server: the one place that
// choice is made. It reads the nodes table and what the servers placed
// on each node hold.
type Placer struct {
	svc        *Service
	candidates map[string]bool
	overcommit float64
	// also admits more candidates: the agents whose channel reaches this
	// process (Endpoint.Connected), asked at each placement.
	also func(node string) bool
}

// AlsoCandidates makes the nodes f says yes to candidates too (the
// agents this kiln serve drives: Endpoint.Connected).
func (p *Placer) AlsoCandidates(f func(node string) bool) { p.also = f }

// isCandidate says whether this process may place servers on node.
func (p *Placer) isCandidate(node string) bool {
	return p.candidates[node] || p.also != nil && p.also(node)
}

// NewPlacer places servers on the nodes named by candidates only: the
// nodes this process can drive (today its local node; agents join them
// when servers run on agents). overcommit is --memory-overcommit, more
// than 0 and at most MaxOvercommit (DefaultOvercommit otherwise).
func NewPlacer(svc *Service, candidates []string, overcommit float64) *Placer {
	if !(overcommit > 0 && overcommit <= MaxOvercommit) {
		overcommit = DefaultOvercommit
	}
	c := map[string]bool{}
	for _, n := range candidates {
		c[n] = true
	}
	return &Placer{svc: svc, candidates: c, overcommit: overcommit}
}

// Place chooses a node and a game port for r: the node asked, if it can
// take the server; else, of the candidates that are ready and have room
// (memory within total × overcommit, disk, a free port, the runtime),
// the one with the most memory free, the first by name of equals. It
// reads outside any transaction: the insert calls Reserve to check it
// again, and the unique (node, port) index of servers settles a port.
// Errors: *UnknownNodeError, *NoCapacityError.
func (p *Placer) Place(ctx context.Context, r Request) (Placement, error) {
	list, taken, err := p.svc.list(ctx, p.svc.db.Read(), "")
	if err != nil {
		return Placement{}, fmt.Errorf("place: %w", err)
	}
	v := view{p: p, r: r, taken: taken}
	if r.Node != "" {
		for _, n := range list {
			if n.Name != r.Node {
				continue
			}
			if why := v.refuse(n); why != "" {
				return Placement{}, &NoCapacityError{Refusals: []Refusal{{Node: n.Name, Reason: why}}}
			}
			return Placement{Node: n.Name, Port: v.port(n)}, nil
		}
		return Placement{}, &UnknownNodeError{Name: r.Node}
	}
	spread, err := p.spread(ctx, r.Spread)
	if err != nil {
		return Placement{}, fmt.Errorf("place: %w", err)
	}
	var best *Node
	refusals := []Refusal{}
	for i, n := range list { // by name: of equals, the first stays best
		if why := v.refuse(n); why != "" {
			refusals = append(refusals, Refusal{Node: n.Name, Reason: why})
			continue
		}
		if best == nil || spread[n.Name] < spread[best.Name] ||
			spread[n.Name] == spread[best.Name] && p.freeMiB(n) > p.freeMiB(*best) {
			best = &list[i]
		}
	}
	if best == nil {
		return Placement{}, &NoCapacityError{Refusals: refusals}
	}
	return Placement{Node: best.Name, Port: v.port(*best)}, nil
}

// spread counts, by node, the servers of the configuration cfg (none
// when cfg is "").
func (p *Placer) spread(ctx context.Context, cfg string) (map[string]int, error) {
	out := map[string]int{}
	if cfg == "" {
		return out, nil
	}
	rows, err := p.svc.db.Read().QueryContext(ctx, `SELECT node, count(*) FROM servers WHERE configuration_id = $1 GROUP BY node`, cfg)
	if err != nil {
		return nil, fmt.Errorf("count the configuration's servers by node: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var node string
		var n int
		if err := rows.Scan(&node, &n); err != nil {
			return nil, fmt.Errorf("count the configuration's servers by node: %w", err)
		}
		out[node] = n
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("count the configuration's servers by node: %w", err)
	}
	return out, nil
}

// Reserve checks pl again in tx, the transaction that inserts the
// server, after taking the node's lock on PostgreSQL (SQLite has one
// writer): two servers placed at once on one node, by this process or
// another replica, never take together more than it has. Errors:
// ErrNoLongerFits (wrapped, with the reason): call Place again.
func (p *Placer) Reserve(ctx context.Context, tx *sql.Tx, pl Placement, r Request) error {
	if p.svc.db.Dialect() == store.Postgres {
		if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('kiln.node_capacity:' || $1, 0))`, pl.Node); err != nil {
			return fmt.Errorf("lock node %s: %w", pl.Node, err)
		}
	}
	list, taken, err := p.svc.list(ctx, tx, pl.Node)
	if err != nil {
		return fmt.Errorf("reserve on node %s: %w", pl.Node, err)
	}
	if len(list) == 0 {
		return fmt.Errorf("%w: node %s was removed", ErrNoLongerFits, pl.Node)
	}
	r.Port, r.Taken = pl.Port, nil
	if why := (view{p: p, r: r, taken: taken}).refuse(list[0]); why != "" {
		return fmt.Errorf("%w: node %s: %s", ErrNoLongerFits, pl.Node, why)
	}
	return nil
}

// freeMiB is the memory n may still give its servers: its total (as
// reported: --node-memory, or the machine's) times the overcommit, less
// what its servers have; below 0 when the overcommit was lowered since.
func (p *Placer) freeMiB(n Node) int64 {
	return int64(math.Floor(float64(n.MemoryTotal>>20)*p.overcommit)) - n.MemoryAllocatedMB
}

// view is one reading of the tables for one request.
type view struct {
	p     *Placer
	r     Request
	taken map[string]map[int]bool // by node: ports its servers hold or its host has busy
}

// refuse says why n cannot take the server ("" when it can).
func (v view) refuse(n Node) string {
	r := v.r
	switch {
	case !v.p.isCandidate(n.Name) && n.Kind == KindAgent && n.Status == StatusReady && v.p.also != nil:
		return "not connected to this kiln serve (its channel is down, or it reached another replica)"
	case !v.p.isCandidate(n.Name) && n.Kind == KindAgent && n.Status == StatusReady:
		return "game servers on agents need kiln serve --cluster-addr"
	case !v.p.isCandidate(n.Name) && n.Kind != KindAgent:
		return "the local node of another kiln serve, which alone creates servers on it in this version"
	case n.Status == StatusPending:
		return "not joined yet"
	case n.Status == StatusUnreachable:
		return "unreachable"
	case n.Status == StatusDraining:
		return "draining"
	}
	var why []string
	if r.Runtime != "" && n.Runtime != r.Runtime {
		why = append(why, fmt.Sprintf("it runs %s servers, %s needed", n.Runtime, r.Runtime))
	}
	if free := v.p.freeMiB(n); int64(r.MemoryMB) > free {
		why = append(why, fmt.Sprintf("%d MiB of memory free, %d asked", max(free, 0), r.MemoryMB))
	}
	if disk := n.DiskTotal >> 20; int64(r.DiskMB) > disk {
		why = append(why, fmt.Sprintf("a disk of %d MiB, %d asked", disk, r.DiskMB))
	}
	switch {
	case r.Port != 0 && (r.Port < n.PortFirst || r.Port > n.PortLast):
		why = append(why, fmt.Sprintf("port %d is outside its range %d-%d", r.Port, n.PortFirst, n.PortLast))
	case r.Port != 0 && v.isTaken(n.Name, r.Port):
		why = append(why, fmt.Sprintf("port %d is taken", r.Port))
	case r.Port == 0 && v.port(n) == 0:
		why = append(why, fmt.Sprintf("no free game port in %d-%d", n.PortFirst, n.PortLast))
	}
	return strings.Join(why, " and ")
}

// port is the game port the server gets on n: the one asked, else the
// lowest free one of its range; 0 when none is free.
func (v view) port(n Node) int {
	if v.r.Port != 0 {
		return v.r.Port
	}
	if n.PortFirst <= 0 {
		return 0
	}
	for port := n.PortFirst; port <= n.PortLast; port++ {
		if !v.isTaken(n.Name, port) {
			return port
		}
	}
	return 0
}

// isTaken says whether port of node is held by a server, busy on its
// host as it last reported, or found taken since (Request.Taken).
func (v view) isTaken(node string, port int) bool {
	return v.taken[node][port] || v.r.Taken[node][port]
}
