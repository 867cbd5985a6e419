package servers

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"

	"github.com/kilnhq/kiln/internal/store"
)

// ErrNotFound is returned for a server that does not exist or belongs to
// another team.
var ErrNotFound = errors.New("server not found")

// Statuses are every value of a server's status (api.md §3).
var Statuses = []string{"installing", "offline", "starting", "running", "stopping", "crashed", "unknown"}

// MaxList bounds every list answer (api.md §0).
const MaxList = 1000

// Resources are live usage figures.
type Resources struct {
	CPU         float64 // percent of one core
	MemoryBytes int64
	DiskBytes   int64
	UptimeMS    int64
}

// Server is one game server or proxy.
type Server struct {
	ID              string
	TeamID          string
	Name            string
	Software        string
	Version         string
	Status          string
	Node            string
	Address         string // host:port of the game port
	MemoryMB        int
	DiskMB          int
	CPUPercent      int
	ConfigurationID *string
	CreatedAt       int64
	Resources       Resources
}

// Service reads and changes server records.
type Service struct {
	db         *store.DB
	publicHost string
}

// NewService returns a Service; publicHost is the host named in addresses.
func NewService(db *store.DB, publicHost string) *Service {
	return &Service{db: db, publicHost: publicHost}
}

// List returns the team's servers, newest first, at most MaxList.
func (s *Service) List(ctx context.Context, teamID string) ([]Server, error) {
	rows, err := s.db.Read().QueryContext(ctx, `
		SELECT id, team_id, name, software, version, status, node, port,
		       memory_mb, disk_mb, cpu_percent, configuration_id, created_at
		FROM servers WHERE team_id = $1
		ORDER BY created_at DESC, id DESC LIMIT $2`, teamID, MaxList)
	if err != nil {
		return nil, fmt.Errorf("list servers: %w", err)
	}
	defer rows.Close()
	out := make([]Server, 0)
	for rows.Next() {
		var sv Server
		var port int
		if err := rows.Scan(&sv.ID, &sv.TeamID, &sv.Name, &sv.Software, &sv.Version, &sv.Status, &sv.Node, &port,
			&sv.MemoryMB, &sv.DiskMB, &sv.CPUPercent, &sv.ConfigurationID, &sv.CreatedAt); err != nil {
			return nil, fmt.Errorf("list servers: %w", err)
		}
		sv.Address = net.JoinHostPort(s.publicHost, strconv.Itoa(port))
		out = append(out, sv)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list servers: %w", err)
	}
	return out, nil
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
