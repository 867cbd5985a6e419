package servers

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/kilnhq/kiln/internal/gameserver"
	"github.com/kilnhq/kiln/internal/store"
)

// Errors callers tell apart (and those of a server's root: disk.go; of
// its lifecycle: driver.go).
var (
	// ErrOwned: a deployment owns the server; change it through the deployment.
	ErrOwned = errors.New("the server is owned by a deployment configuration; change or delete it through the configuration")
)

// MaxList bounds every list answer (api.md §0).
const MaxList = 1000

// Statuses are every value of a server's status (api.md §3).
var Statuses = []string{StatusInstalling, StatusOffline, StatusStarting, StatusRunning, StatusStopping, StatusCrashed, StatusUnknown}

// Server statuses, gameserver's (the lifecycle writes them).
const (
	StatusInstalling = gameserver.StatusInstalling
	StatusOffline    = gameserver.StatusOffline
	StatusStarting   = gameserver.StatusStarting
	StatusRunning    = gameserver.StatusRunning
	StatusStopping   = gameserver.StatusStopping
	StatusCrashed    = gameserver.StatusCrashed
	StatusUnknown    = gameserver.StatusUnknown
)

// Resources are live usage figures (gameserver's).
type Resources = gameserver.Resources

// Server is one game server or proxy.
type Server struct {
	ID       string
	TeamID   string
	Name     string
	Software string
	Version  string
	Status   string
	Node     string
	// NodeStatus is the node's status (ready, draining, unreachable,
	// pending; "" when not known: Options.NodeStatuses unset). A server
	// of an unreachable node reads Status "unknown": what runs there
	// cannot be told.
	NodeStatus      string
	Port            int
	Address         string // host:port of the game port
	MemoryMB        int
	DiskMB          int
	CPUPercent      int
	Env             map[string]string
	ConfigurationID *string
	InstallError    *string
	DesiredState    string
	// Image is the docker image chosen for the server ("" lets its
	// profile pick by Java version).
	Image     string
	CreatedAt int64
	UpdatedAt int64
	Resources Resources

	envStored   string         // env as the row holds it (secrets sealed): SetEnv's compare-and-swap
	resourceKey sql.NullString // the deployment's key of an owned server
	runtimeRef  sql.NullString
	javaMajor   int
	jar         string
	argsFile    string
}

// record is what the lifecycle reads of sv.
func (sv Server) record() gameserver.Record {
	r := gameserver.Record{
		ID: sv.ID, Name: sv.Name, Software: sv.Software, Version: sv.Version, Status: sv.Status,
		DesiredState: sv.DesiredState, Node: sv.Node, Port: sv.Port, MemoryMB: sv.MemoryMB, DiskMB: sv.DiskMB,
		CPUPercent: sv.CPUPercent, Env: sv.Env, Image: sv.Image, ResourceKey: sv.resourceKey.String,
		RuntimeRef: sv.runtimeRef.String, InstallError: sv.InstallError, JavaMajor: sv.javaMajor, Jar: sv.jar, ArgsFile: sv.argsFile,
	}
	if sv.ConfigurationID != nil {
		r.ConfigurationID = *sv.ConfigurationID
	}
	return r
}

const serverColumns = `id, team_id, name, software, version, status, node, port,
	memory_mb, disk_mb, cpu_percent, configuration_id, env, desired_state,
	runtime_ref, install_error, java_major, jar, args_file, created_at, updated_at, image, resource_key`

type scanner interface{ Scan(dest ...any) error }

func (s *Service) scan(row scanner) (Server, error) {
	var sv Server
	var env string
	err := row.Scan(&sv.ID, &sv.TeamID, &sv.Name, &sv.Software, &sv.Version, &sv.Status, &sv.Node, &sv.Port,
		&sv.MemoryMB, &sv.DiskMB, &sv.CPUPercent, &sv.ConfigurationID, &env, &sv.DesiredState,
		&sv.runtimeRef, &sv.InstallError, &sv.javaMajor, &sv.jar, &sv.argsFile, &sv.CreatedAt, &sv.UpdatedAt, &sv.Image, &sv.resourceKey)
	if err != nil {
		return sv, err
	}
	if err := json.Unmarshal([]byte(env), &sv.Env); err != nil {
		return sv, fmt.Errorf("server %s env: %w", sv.ID, err)
	}
	sv.envStored = env
	for k, v := range sv.Env {
		if sealed, ok := strings.CutPrefix(v, sealedPrefix); ok {
			if s.opts.Secrets == nil {
				return sv, fmt.Errorf("server %s env.%s is sealed and this process has no secret key", sv.ID, k)
			}
			plain, err := s.opts.Secrets.Open(sealed)
			if err != nil {
				return sv, fmt.Errorf("server %s env.%s: %w (is --secret-key the one it was sealed with?)", sv.ID, k, err)
			}
			sv.Env[k] = string(plain)
		}
	}
	sv.Address = net.JoinHostPort(s.hostOf(sv.Node), strconv.Itoa(sv.Port))
	return sv, nil
}

// Service owns server records, and drives their lifecycle on one node
// through its Driver.
type Service struct {
	db         *store.DB
	log        *slog.Logger
	publicHost string
	node       Node
	catalog    Catalog
	opts       Options
	driver     Driver // the node's: its gameserver.Host
	hostsMu    sync.Mutex
	hosts      map[string]nodeHost // other nodes' public hosts (hostOf)

	stmtMu    sync.Mutex
	listSt    *sql.Stmt // listQuery, prepared on first use, closed by Run's end
	versionSt *sql.Stmt // a team's servers_version, idem
	getSt     *sql.Stmt // one server of a team (every server and file request), idem
	anySt     *sql.Stmt // one server of any team (sqlRecords.Server), idem

	cacheMu sync.Mutex
	lists   map[string]listCache // by team id

	onDelete []func(ctx context.Context, id string) error
	onEnded  []func(id string) // a delete that ran onDelete ended (failed or done)
	onHold   []func(id string) // a root was held (Hold)
}

// listQuery has its limit written into the text: a bound LIMIT makes
// SQLite re-prepare the statement at every execution (docs/benchmarks.md,
// foundation section), and the list is the hottest query of the API.
var listQuery = `SELECT ` + serverColumns + ` FROM servers WHERE team_id = $1
	ORDER BY created_at DESC, id DESC LIMIT ` + strconv.Itoa(MaxList)

// prepared returns the statement in *slot, preparing query on first use.
func (s *Service) prepared(ctx context.Context, slot **sql.Stmt, query string) (*sql.Stmt, error) {
	s.stmtMu.Lock()
	defer s.stmtMu.Unlock()
	if *slot == nil {
		pctx, cancel := s.db.PointRead(ctx)
		st, err := s.db.Read().PrepareContext(pctx, query)
		cancel()
		if err != nil {
			return nil, err
		}
		*slot = st
	}
	return *slot, nil
}

// Listing is one team's list at one list version. Servers and the Listing
// itself are shared by every caller until the version moves on: read-only.
// The same *Listing is returned while the version stands, so a caller may
// key its own derived data (an encoded answer) by the pointer.
type Listing struct {
	Servers []Server // newest first; Resources left zero: see Resources
	svc     *Service // whose drivers Resources asks
}

// Resources is the latest sample of Servers[i]'s usage.
func (l *Listing) Resources(i int) Resources { return l.svc.resourcesOf(l.Servers[i]) }

// Listing returns the team's servers, newest first, at most MaxList,
// shared (see Listing). The rows come from memory while the team's list
// version (kept by database triggers on every change of a listed field,
// whichever process makes it) stands; one primary-key read checks it. The
// servers share their Env maps with the cache: callers must not modify
// them.
func (s *Service) Listing(ctx context.Context, teamID string) (*Listing, error) {
	version, err := s.listVersion(ctx, teamID)
	if err != nil {
		return nil, fmt.Errorf("list servers: %w", err)
	}
	statuses, epoch := s.nodeStatuses()
	s.cacheMu.Lock()
	c, ok := s.lists[teamID]
	s.cacheMu.Unlock()
	if ok && c.version == version && c.epoch == epoch && version >= 0 {
		return c.list, nil
	}
	// Read after the version: the rows are at least as new as it, so a
	// change in between only costs the next request a read.
	rows, err := s.listRows(ctx, teamID)
	if err != nil {
		return nil, err
	}
	for i := range rows {
		withNode(&rows[i], statuses)
	}
	l := &Listing{Servers: rows, svc: s}
	s.cacheMu.Lock()
	if len(s.lists) >= maxCachedLists {
		clear(s.lists) // many teams: start over rather than grow without bound
	}
	s.lists[teamID] = listCache{version: version, epoch: epoch, list: l}
	s.cacheMu.Unlock()
	return l, nil
}

// maxCachedLists bounds the teams whose lists are kept in memory.
const maxCachedLists = 4096

// listCache is one team's list at a list version.
type listCache struct {
	version int64
	epoch   uint64 // of the node statuses the list shows
	list    *Listing
}

// listVersion reads the team's servers_version; -1 for an unknown team.
func (s *Service) listVersion(ctx context.Context, teamID string) (int64, error) {
	st, err := s.prepared(ctx, &s.versionSt, `SELECT servers_version FROM teams WHERE id = $1`)
	if err != nil {
		return 0, err
	}
	var v int64
	// A point read (store.PointRead): on SQLite not cancelled with the
	// request, which skips database/sql's watcher goroutine; on PostgreSQL
	// with a deadline.
	pctx, cancel := s.db.PointRead(ctx)
	defer cancel()
	err = st.QueryRowContext(pctx, teamID).Scan(&v)
	if errors.Is(err, sql.ErrNoRows) {
		return -1, nil
	}
	return v, err
}

func (s *Service) listRows(ctx context.Context, teamID string) ([]Server, error) {
	st, err := s.prepared(ctx, &s.listSt, listQuery)
	if err != nil {
		return nil, fmt.Errorf("list servers: %w", err)
	}
	rows, err := st.QueryContext(ctx, teamID)
	if err != nil {
		return nil, fmt.Errorf("list servers: %w", err)
	}
	defer rows.Close()
	out := make([]Server, 0)
	for rows.Next() {
		sv, err := s.scan(rows)
		if err != nil {
			return nil, fmt.Errorf("list servers: %w", err)
		}
		out = append(out, sv)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list servers: %w", err)
	}
	return out, nil
}

// OtherNodeError refuses an operation on a server another node runs (with
// PostgreSQL, replicas on several hosts share the servers table, and each
// manages only its own node's processes and files).
type OtherNodeError struct {
	Node, Here string
}

func (e *OtherNodeError) Error() string {
	return fmt.Sprintf("the server runs on node %q and this Kiln process manages node %q; send the request to that node's Kiln", e.Node, e.Here)
}

// getLocal is Get for an operation on the server's processes or files:
// a server of a node this process does not drive is *OtherNodeError.
func (s *Service) getLocal(ctx context.Context, teamID, id string) (Server, error) {
	sv, err := s.Get(ctx, teamID, id)
	if err == nil {
		_, err = s.driverOf(sv.Node)
	}
	if err != nil {
		return Server{}, err
	}
	return sv, nil
}

// target is getLocal with the driver of the server's node.
func (s *Service) target(ctx context.Context, teamID, id string) (Server, Driver, error) {
	sv, err := s.Get(ctx, teamID, id)
	if err != nil {
		return Server{}, nil, err
	}
	d, err := s.driverOf(sv.Node)
	return sv, d, err
}

// findOwnedLocal is FindOwned for an operation on the server itself.
func (s *Service) findOwnedLocal(ctx context.Context, teamID string, o Owner) (Server, error) {
	sv, err := s.FindOwned(ctx, teamID, o)
	if err == nil {
		_, err = s.driverOf(sv.Node)
	}
	if err != nil {
		return Server{}, err
	}
	return sv, nil
}

// driverOf is the driver of node: the local Host, an agent's remote
// driver (Options.Remote), or *OtherNodeError for a node this process
// does not drive.
func (s *Service) driverOf(node string) (Driver, error) {
	if node == s.node.Name() {
		return s.driver, nil
	}
	if s.opts.Remote != nil {
		if d := s.opts.Remote(node); d != nil {
			return d, nil
		}
	}
	return nil, &OtherNodeError{Node: node, Here: s.node.Name()}
}

// resourcesOf is the live figures of sv from its node's driver (zeros
// for a node this process does not drive).
func (s *Service) resourcesOf(sv Server) Resources {
	d, err := s.driverOf(sv.Node)
	if err != nil {
		return Resources{}
	}
	return d.Resources(sv.ID)
}

// Get returns one of the team's servers; ErrNotFound otherwise.
func (s *Service) Get(ctx context.Context, teamID, id string) (Server, error) {
	// Prepared once (parsing the query was half the cost of a GET of a
	// server, docs/benchmarks.md) and read as a point read, as
	// listVersion.
	st, err := s.prepared(ctx, &s.getSt, `SELECT `+serverColumns+` FROM servers WHERE id = $1 AND team_id = $2`)
	if err != nil {
		return Server{}, fmt.Errorf("get server %s: %w", id, err)
	}
	pctx, cancel := s.db.PointRead(ctx)
	defer cancel()
	sv, err := s.scan(st.QueryRowContext(pctx, id, teamID))
	if errors.Is(err, sql.ErrNoRows) {
		return Server{}, ErrNotFound
	}
	if err != nil {
		return Server{}, fmt.Errorf("get server %s: %w", id, err)
	}
	sv.Resources = s.resourcesOf(sv)
	statuses, _ := s.nodeStatuses()
	withNode(&sv, statuses)
	return sv, nil
}

// NodeStatuses gives every node's status and an epoch that changes
// whenever one of them does (Options.NodeStatuses).
type NodeStatuses func() (map[string]string, uint64)

// nodeStatuses is Options.NodeStatuses' answer (none without it).
func (s *Service) nodeStatuses() (map[string]string, uint64) {
	if s.opts.NodeStatuses == nil {
		return nil, 0
	}
	return s.opts.NodeStatuses()
}

// withNode sets sv's NodeStatus, and Status unknown on a node that is
// unreachable.
func withNode(sv *Server, statuses map[string]string) {
	sv.NodeStatus = statuses[sv.Node]
	if sv.NodeStatus == "unreachable" {
		sv.Status = gameserver.StatusUnknown
	}
}

// CountByStatus counts every team's servers by status (for /metrics).
func (s *Service) CountByStatus(ctx context.Context) (map[string]int, error) {
	rows, err := s.db.Read().QueryContext(ctx, `SELECT status, count(*) FROM servers GROUP BY status`)
	if err != nil {
		return nil, fmt.Errorf("count servers: %w", err)
	}
	defer rows.Close()
	out := map[string]int{}
	for _, st := range Statuses {
		out[st] = 0
	}
	for rows.Next() {
		var st string
		var n int
		if err := rows.Scan(&st, &n); err != nil {
			return nil, fmt.Errorf("count servers: %w", err)
		}
		out[st] = n
	}
	return out, rows.Err()
}

// hostOf is the host players reach node's servers at: this process's
// public host for its local node, an agent's as it said in its Hello
// (nodes' public_host), read once a minute at most.
func (s *Service) hostOf(node string) string {
	if node == s.node.Name() || s.opts.Placement == nil {
		return s.publicHost
	}
	s.hostsMu.Lock()
	h, ok := s.hosts[node]
	s.hostsMu.Unlock()
	if ok && time.Since(h.at) < time.Minute {
		return h.host
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var host string
	if err := s.db.Read().QueryRowContext(ctx, `SELECT public_host FROM nodes WHERE name = $1`, node).Scan(&host); err != nil || host == "" {
		if ok {
			return h.host
		}
		return s.publicHost
	}
	s.hostsMu.Lock()
	if s.hosts == nil {
		s.hosts = map[string]nodeHost{}
	}
	s.hosts[node] = nodeHost{host: host, at: time.Now()}
	s.hostsMu.Unlock()
	return host
}

// nodeHost is a node's public host as read at.
type nodeHost struct {
	host string
	at   time.Time
}
