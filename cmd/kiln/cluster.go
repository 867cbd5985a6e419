package main

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/kilnhq/kiln/internal/agent"
	"github.com/kilnhq/kiln/internal/blob"
	"github.com/kilnhq/kiln/internal/cluster"
	"github.com/kilnhq/kiln/internal/node"
	"github.com/kilnhq/kiln/internal/noderpc"
	"github.com/kilnhq/kiln/internal/nodes"
	"github.com/kilnhq/kiln/internal/servers"
	"github.com/kilnhq/kiln/internal/store"
)

// The cluster's side of kiln serve and the node commands of kiln admin.
// kiln serve makes the cluster CA at its first start (sealed with the
// secret key, in the database), lists its local node (--node-name) and
// reports it as agents report theirs, and with --cluster-addr serves the
// node endpoint agents join and report to (internal/nodes).

// registerClusterFlags adds kiln serve's cluster flags.
func registerClusterFlags(s *settings, c *serveConfig) {
	s.fs.StringVar(&c.ClusterAddr, "cluster-addr", "", "HOST:PORT of the node endpoint kiln agent joins and reports to (mutual TLS with the cluster's CA); empty: none")
	s.fs.DurationVar(&c.NodeUnreachableAfter, "node-unreachable-after", nodes.DefaultUnreachableAfter, "silence after which a node is listed unreachable (1s to 10m; nodes are asked to report a sixth as often, at most every 5 s)")
}

// validateCluster checks kiln serve's cluster flags.
func validateCluster(c serveConfig) error {
	if c.ClusterAddr != "" {
		if _, _, err := net.SplitHostPort(c.ClusterAddr); err != nil {
			return usageError{fmt.Sprintf("--cluster-addr %q: %v", c.ClusterAddr, err)}
		}
	}
	if c.NodeUnreachableAfter < time.Second || c.NodeUnreachableAfter > 10*time.Minute {
		return usageError{fmt.Sprintf("--node-unreachable-after %s: want 1s to 10m", c.NodeUnreachableAfter)}
	}
	return nil
}

// listenCluster binds --cluster-addr (nil when not set), with the
// other listeners: before the database is touched.
func listenCluster(cfg serveConfig, log *slog.Logger) (net.Listener, error) {
	if cfg.ClusterAddr == "" {
		return nil, nil
	}
	ln, err := net.Listen("tcp", cfg.ClusterAddr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s (--cluster-addr): %w", cfg.ClusterAddr, err)
	}
	log.Info("node endpoint listening", "addr", ln.Addr().String())
	return ln, nil
}

// clusterParts are what kiln serve runs for the cluster.
type clusterParts struct {
	svc      *nodes.Service
	endpoint *nodes.Endpoint // nil without --cluster-addr
	local    string
	measure  nodes.Measure
	within   time.Duration
	// records answers agents' calls for their servers' records once the
	// servers service exists (it is made after the endpoint).
	records atomic.Pointer[http.Handler]
	// remotes are the drivers of agents' servers, one a node.
	remotesMu sync.Mutex
	remotes   map[string]*noderpc.Remote
	// statuses are the nodes' statuses as last read (statusesAt), and
	// an epoch that moves when one changes: servers' NodeStatuses.
	statusMu   sync.Mutex
	statuses   map[string]string
	statusesAt time.Time
	epoch      uint64
}

// nodeStatuses reads the nodes' statuses at most once a second (a status
// moves on heartbeats, seconds apart; the servers' list asks at every
// request), and moves the epoch when one changed.
func (p *clusterParts) nodeStatuses() (map[string]string, uint64) {
	p.statusMu.Lock()
	defer p.statusMu.Unlock()
	if p.statuses != nil && time.Since(p.statusesAt) < time.Second {
		return p.statuses, p.epoch
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	st, err := p.svc.Statuses(ctx)
	p.statusesAt = time.Now() // a failed read is not tried again at once either
	if err != nil {
		return p.statuses, p.epoch
	}
	m := make(map[string]string, len(st))
	changed := p.statuses == nil || len(st) != len(p.statuses)
	for n, s := range st {
		m[n] = string(s)
		if p.statuses[n] != m[n] {
			changed = true
		}
	}
	if changed {
		p.statuses = m
		p.epoch++
	}
	return p.statuses, p.epoch
}

// serveRecords answers agents' calls for their servers' records from srv.
func (p *clusterParts) serveRecords(srv *servers.Service) {
	h := noderpc.RecordsHandler(nodes.NodeName, srv.NodeRecords)
	p.records.Store(&h)
}

func (p *clusterParts) recordsHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := p.records.Load()
		if h == nil {
			http.Error(w, `{"error":"the control plane is starting","code":"STARTING"}`, http.StatusServiceUnavailable)
			return
		}
		(*h).ServeHTTP(w, r)
	})
}

// remote is the driver of the servers of node when node is an agent
// (nil otherwise: this kiln serve's local node has its Host, another
// replica's local node is driven by that replica). Without the node
// endpoint no agent is driven.
func (p *clusterParts) remote(ctx context.Context, node string, ids func(ctx context.Context) ([]string, error)) servers.Driver {
	if p.endpoint == nil || node == p.local {
		return nil
	}
	p.remotesMu.Lock()
	defer p.remotesMu.Unlock()
	if rm, ok := p.remotes[node]; ok {
		return rm
	}
	kind, err := p.svc.Kind(ctx, node)
	if err != nil || kind != nodes.KindAgent {
		return nil
	}
	if p.remotes == nil {
		p.remotes = map[string]*noderpc.Remote{}
	}
	rm := &noderpc.Remote{Node: node, Client: func() (*http.Client, error) { return p.endpoint.Client(node) }, IDs: ids}
	p.remotes[node] = rm
	go func() { _ = rm.Run(ctx) }()
	return rm
}

// startCluster makes or opens the CA and lists the local node; it runs
// nothing yet (run does).
func startCluster(ctx context.Context, cfg serveConfig, db *store.DB, box nodes.Sealer, blobs blob.Store, roots string, ports node.PortRange, sftpLn net.Listener, runtimeName, ver string, log *slog.Logger) (*clusterParts, error) {
	sftpAddr := ""
	if sftpLn != nil {
		sftpAddr = sftpLn.Addr().String()
	}
	// The CA's key is opened only to serve the node endpoint: a replica
	// given another --secret-key runs on without one, as before.
	var ca *cluster.CA
	var err error
	if cfg.ClusterAddr != "" {
		ca, err = nodes.LoadCA(ctx, db, box, time.Now())
		if err == nil {
			log.Info("cluster CA", "fingerprint", ca.Fingerprint())
		}
	} else {
		var c *x509.Certificate
		if c, err = nodes.EnsureCA(ctx, db, box, time.Now()); err == nil {
			log.Info("cluster CA", "fingerprint", cluster.Fingerprint(c))
		}
	}
	if err != nil {
		return nil, err
	}
	svc := nodes.New(db, nil)
	err = svc.RegisterLocal(ctx, cfg.NodeName, cluster.Hello{Version: ver, PublicHost: cfg.PublicHost, SFTPAddr: sftpAddr,
		PortFirst: ports.First, PortLast: ports.Last, Runtime: runtimeName})
	if nt, ok := errors.AsType[*nodes.NameTakenError](err); ok {
		return nil, usageError{"--node-name: " + nt.Error()}
	}
	if err != nil {
		return nil, err
	}
	p := &clusterParts{svc: svc, local: cfg.NodeName, measure: agent.Measure(roots, ports, cfg.nodeOffer), within: cfg.NodeUnreachableAfter}
	if cfg.ClusterAddr != "" {
		// Agents prove they share the blob store by this marker.
		marker, err := nodes.WriteMarker(ctx, blobs)
		if err != nil {
			return nil, fmt.Errorf("the blob store agents must share (--blob-url): %w", err)
		}
		log.Info("blob store marker for agents", "store", blobs.String(), "key", marker.Key, "sha256", marker.SHA256)
		p.endpoint = nodes.NewEndpoint(svc, ca, nodes.EndpointOptions{UnreachableAfter: cfg.NodeUnreachableAfter, Marker: &marker,
			Records: p.recordsHandler()}, log)
	}
	return p, nil
}

// run reports the local node and serves the node endpoint on ln until
// ctx ends.
func (p *clusterParts) run(ctx context.Context, ln net.Listener, log *slog.Logger) error {
	if p.endpoint == nil {
		p.svc.RunLocal(ctx, p.local, p.within, p.measure, log)
		return nil
	}
	done := make(chan struct{})
	go func() { defer close(done); p.svc.RunLocal(ctx, p.local, p.within, p.measure, log) }()
	err := p.endpoint.Serve(ctx, ln)
	<-done
	return err
}

// The node commands of kiln admin other than stop-all.
var nodeAbout = map[string]string{
	"add": `Make a join token for a new node NAME and print only the token (stdout; how
to use it goes to stderr). It is valid for one hour and for one agent:
kiln agent --server https://CONTROL-PLANE:PORT --join-token TOKEN … on the
game host. The token carries the fingerprint of the cluster's CA, so the
agent checks the control plane before it sends the token. Adding a node
that has not joined yet again makes a new token (the older one stops
working).`,
	"list": `List the nodes: status (pending: added, not joined; ready; draining; or
unreachable: silent longer than kiln serve's --node-unreachable-after),
the address its connection comes from, its public host, last heartbeat,
memory allocated to its servers of its total, disk free of total, free
game ports, servers, version and when its certificate expires (agents
renew theirs when a third of its year is left; "(renewing)": a renewed one
is signed, not used yet). --json prints every field.`,
	"drain":   `Drain node NAME: no new servers are placed on it (placement across nodes comes with a later version: today servers are created on the local node of the kiln serve asked).`,
	"undrain": `Undrain node NAME: servers may be placed on it again.`,
	"remove": `Remove node NAME. Refused while servers are on it (delete them first), and
for the local node of a kiln serve that runs. Its certificate is refused
from then on: the control plane cuts its open connection within a second
and the agent stops, saying so. To join the host again, run kiln admin
node add and give the agent a fresh --data-dir (or remove its ca.pem,
node.key and node.pem) with the new token.`,
}

// adminNode runs kiln admin node add|list|drain|undrain|remove.
func adminNode(ctx context.Context, cmd adminCommand, args []string, stdout, stderr io.Writer) error {
	var sc storeConfig
	s := newSettings(command{synopsis: cmd.line() + " [flags]", about: nodeAbout[cmd.verb]}, stdout, stderr)
	sc.register(s)
	var asJSON bool
	if cmd.verb == "list" {
		s.fs.BoolVar(&asJSON, "json", false, "print JSON: {\"nodes\": [...]}")
	}
	pos, err := s.parse(args)
	if err != nil {
		return err
	}
	if err := sc.validate(); err != nil {
		return err
	}
	if len(pos) != len(cmd.args) {
		return usageError{fmt.Sprintf("%s takes %d argument(s), got %d", cmd.line(), len(cmd.args), len(pos))}
	}
	if len(pos) == 1 {
		if err := cluster.ValidName(pos[0]); err != nil {
			return usageError{"NAME: " + err.Error()}
		}
	}
	db, err := sc.openExisting(ctx, stderr)
	if err != nil {
		return err
	}
	defer db.Close()
	svc := nodes.New(db, nil)
	switch cmd.verb {
	case "add":
		ca, err := nodes.CACertificate(ctx, db)
		if err != nil {
			return err
		}
		tok, expires, err := svc.Add(ctx, pos[0], ca)
		if err != nil {
			return err
		}
		fmt.Fprintln(stdout, tok.String())
		fmt.Fprintf(stderr, "kiln: join token of node %s, valid until %s, for one agent. On the game host:\n"+
			"  kiln agent --server https://CONTROL-PLANE:PORT --join-token TOKEN --data-dir DIR --public-host HOST ...\n"+
			"(CONTROL-PLANE:PORT: where kiln serve --cluster-addr is reached)\n", tok.Node, stamp(expires))
	case "list":
		list, err := svc.List(ctx)
		if err != nil {
			return err
		}
		if asJSON {
			return writeNodesJSON(stdout, list)
		}
		return writeNodesTable(stdout, list)
	case "drain", "undrain":
		err := svc.SetDraining(ctx, pos[0], cmd.verb == "drain")
		if errors.Is(err, nodes.ErrNotFound) {
			return fmt.Errorf("node %q not found", pos[0])
		}
		if err != nil {
			return err
		}
		if cmd.verb == "drain" {
			fmt.Fprintf(stdout, "drained %s: no new servers are placed on it\n", pos[0])
		} else {
			fmt.Fprintf(stdout, "undrained %s\n", pos[0])
		}
	case "remove":
		err := svc.Remove(ctx, pos[0])
		if errors.Is(err, nodes.ErrNotFound) {
			return fmt.Errorf("node %q not found", pos[0])
		}
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "removed %s: its certificate is refused from now on\n", pos[0])
	}
	return nil
}

// nodeJSON is one node of node list --json. A value not known yet (no
// heartbeat, a local node's address) is null.
type nodeJSON struct {
	Name              string  `json:"name"`
	Kind              string  `json:"kind"`
	Status            string  `json:"status"`
	Draining          bool    `json:"draining"`
	Address           *string `json:"address"`
	PublicHost        *string `json:"public_host"`
	SFTPAddr          *string `json:"sftp_addr"`
	PortRange         *string `json:"port_range"`
	Runtime           *string `json:"runtime"`
	Version           *string `json:"version"`
	LastHeartbeatAt   *int64  `json:"last_heartbeat_at"`
	MemoryTotalMB     *int64  `json:"memory_total_mb"`
	MemoryFreeMB      *int64  `json:"memory_free_mb"`
	MemoryAllocatedMB int64   `json:"memory_allocated_mb"`
	DiskTotalMB       *int64  `json:"disk_total_mb"`
	DiskFreeMB        *int64  `json:"disk_free_mb"`
	PortsFree         *int    `json:"ports_free"`
	Servers           int     `json:"servers"`
	JoinExpiresAt     *int64  `json:"join_expires_at"`
	CertExpiresAt     *int64  `json:"certificate_expires_at"`
	CertRenewing      bool    `json:"certificate_renewing"`
	EnrolledAt        *int64  `json:"enrolled_at"`
	CreatedAt         int64   `json:"created_at"`
}

func writeNodesJSON(w io.Writer, list []nodes.Node) error {
	str := func(s string) *string {
		if s == "" {
			return nil
		}
		return &s
	}
	out := struct {
		Nodes []nodeJSON `json:"nodes"`
	}{Nodes: []nodeJSON{}}
	for _, n := range list {
		j := nodeJSON{Name: n.Name, Kind: string(n.Kind), Status: string(n.Status), Draining: n.Draining,
			Address: str(n.Address), PublicHost: str(n.PublicHost), SFTPAddr: str(n.SFTPAddr), Runtime: str(n.Runtime), Version: str(n.Version),
			LastHeartbeatAt: n.LastHeartbeatAt, MemoryAllocatedMB: n.MemoryAllocatedMB, Servers: n.Servers,
			JoinExpiresAt: n.JoinExpiresAt, CertExpiresAt: n.CertExpiresAt, CertRenewing: n.CertRenewing, EnrolledAt: n.EnrolledAt, CreatedAt: n.CreatedAt}
		if n.PortFirst > 0 {
			j.PortRange = str(node.PortRange{First: n.PortFirst, Last: n.PortLast}.String())
		}
		if n.LastHeartbeatAt != nil {
			mb := func(b int64) *int64 { v := b >> 20; return &v }
			j.MemoryTotalMB, j.MemoryFreeMB, j.DiskTotalMB, j.DiskFreeMB = mb(n.MemoryTotal), mb(n.MemoryFree), mb(n.DiskTotal), mb(n.DiskFree)
			pf := n.PortsFree
			j.PortsFree = &pf
		}
		out.Nodes = append(out.Nodes, j)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

func writeNodesTable(w io.Writer, list []nodes.Node) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tSTATUS\tADDRESS\tPUBLIC HOST\tLAST HEARTBEAT\tMEMORY (ALLOCATED/TOTAL)\tDISK (FREE/TOTAL)\tFREE PORTS\tSERVERS\tVERSION\tCERTIFICATE EXPIRES")
	dash := func(s string) string {
		if s == "" {
			return "-"
		}
		return s
	}
	for _, n := range list {
		addr := n.Address
		if n.Kind == nodes.KindLocal {
			addr = "(local)"
		}
		beat, mem, disk, ports := "-", "-", "-", "-"
		if n.LastHeartbeatAt != nil {
			beat = stamp(*n.LastHeartbeatAt)
			mem = humanBytes(n.MemoryAllocatedMB<<20) + "/" + humanBytes(n.MemoryTotal)
			disk = humanBytes(n.DiskFree) + "/" + humanBytes(n.DiskTotal)
			ports = fmt.Sprint(n.PortsFree)
		}
		status := string(n.Status)
		if n.Status == nodes.StatusPending && n.JoinExpiresAt != nil && *n.JoinExpiresAt <= time.Now().UnixMilli() {
			status += " (token expired)"
		}
		cert := "-"
		if n.CertExpiresAt != nil {
			// An agent renews its certificate when a third of its year is
			// left; one closer to its end than that has not managed to.
			cert = time.UnixMilli(*n.CertExpiresAt).UTC().Format(time.DateOnly)
			if n.CertRenewing {
				cert += " (renewing)"
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\n", n.Name, status, dash(addr), dash(n.PublicHost), beat, mem, disk, ports, n.Servers, dash(n.Version), cert)
	}
	return tw.Flush()
}

// humanBytes writes a size for people: 512M, 15.6G.
func humanBytes(b int64) string {
	units := []string{"B", "K", "M", "G", "T", "P"}
	v := float64(b)
	i := 0
	for v >= 1024 && i < len(units)-1 {
		v /= 1024
		i++
	}
	if v >= 100 || v == float64(int64(v)) {
		return fmt.Sprintf("%.0f%s", v, units[i])
	}
	return strings.TrimSuffix(fmt.Sprintf("%.1f", v), ".0") + units[i]
}
