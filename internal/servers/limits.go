package servers

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/kilnhq/kiln/internal/store"
)

// TeamLimits are what the operator lets one team have in all (kiln admin
// team limits); 0 is no limit. Bounding servers also bounds the game
// ports a team holds; bounding snapshots bounds what a team's snapshots,
// its deployments' automatic ones included, can make the blob store hold.
type TeamLimits struct {
	Servers   int
	MemoryMB  int
	DiskMB    int
	Snapshots int // pending, creating and ready snapshots (internal/snapshot)
}

// TeamLimitError says which of its team's limits a new server would pass.
type TeamLimitError struct {
	Limit string // "servers", "memory", "disk" or "snapshots"
	Max   int    // the limit (servers, snapshots, or MB)
	Used  int    // what the team holds now
	Asked int    // what the new object asks (1 server or snapshot, or MB)
}

func (e *TeamLimitError) Error() string {
	switch e.Limit {
	case "servers":
		return fmt.Sprintf("the team may have at most %s and has %d (team limit: servers)", count(e.Max, "server"), e.Used)
	case "snapshots":
		return fmt.Sprintf("the team may keep at most %s and has %d; delete one first (team limit: snapshots)", count(e.Max, "snapshot"), e.Used)
	case "memory":
		return fmt.Sprintf("the team's servers may use at most %d MB of memory in all; they use %d MB and this one asks %d MB (team limit: memory)", e.Max, e.Used, e.Asked)
	default:
		return fmt.Sprintf("the team's servers may use at most %d MB of disk in all; they use %d MB and this one asks %d MB (team limit: disk)", e.Max, e.Used, e.Asked)
	}
}

// count is n things, singular for one.
func count(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return fmt.Sprintf("%d %ss", n, thing)
}

// SetTeamLimits records a team's limits (replacing the previous ones).
// Servers that already pass a new limit stay; the limit refuses the next
// server.
func SetTeamLimits(ctx context.Context, db *store.DB, teamID string, l TeamLimits) error {
	if l.Servers < 0 || l.MemoryMB < 0 || l.DiskMB < 0 || l.Snapshots < 0 {
		return errors.New("team limits must not be negative")
	}
	_, err := db.Write().ExecContext(ctx, `
		INSERT INTO team_limits (team_id, max_servers, max_memory_mb, max_disk_mb, max_snapshots, updated_at)
		VALUES ($1, $2, $3, $4, $5, $6)
		ON CONFLICT (team_id) DO UPDATE SET max_servers = $2, max_memory_mb = $3, max_disk_mb = $4, max_snapshots = $5,
			updated_at = $6`,
		teamID, nullInt(l.Servers), nullInt(l.MemoryMB), nullInt(l.DiskMB), nullInt(l.Snapshots), store.Now())
	if err != nil {
		return fmt.Errorf("set team limits: %w", err)
	}
	return nil
}

// GetTeamLimits reads a team's limits (all 0 when none were set).
func GetTeamLimits(ctx context.Context, db *store.DB, teamID string) (TeamLimits, error) {
	return teamLimits(ctx, db.Read(), teamID)
}

type querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

func teamLimits(ctx context.Context, q querier, teamID string) (TeamLimits, error) {
	var s, m, d, sn sql.NullInt64
	err := q.QueryRowContext(ctx, `SELECT max_servers, max_memory_mb, max_disk_mb, max_snapshots FROM team_limits
		WHERE team_id = $1`, teamID).Scan(&s, &m, &d, &sn)
	if errors.Is(err, sql.ErrNoRows) {
		return TeamLimits{}, nil
	}
	if err != nil {
		return TeamLimits{}, fmt.Errorf("read team limits: %w", err)
	}
	return TeamLimits{Servers: int(s.Int64), MemoryMB: int(m.Int64), DiskMB: int(d.Int64), Snapshots: int(sn.Int64)}, nil
}

// LockTeamLimits reads a team's limits inside tx, the transaction that
// inserts what they bound (another package's objects: snapshots), after
// taking the team's lock on PostgreSQL as checkTeamGrowth does, so that
// two replicas adding to one team at once see each other's rows (SQLite
// has one writer).
func LockTeamLimits(ctx context.Context, db *store.DB, tx *sql.Tx, teamID string) (TeamLimits, error) {
	if db.Dialect() == store.Postgres {
		if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('kiln.team_limits:' || $1, 0))`, teamID); err != nil {
			return TeamLimits{}, fmt.Errorf("lock team: %w", err)
		}
	}
	return teamLimits(ctx, tx, teamID)
}

func nullInt(n int) sql.NullInt64 { return sql.NullInt64{Int64: int64(n), Valid: n > 0} }

// checkTeamLimits refuses a new server of memoryMB and diskMB that would
// pass one of the team's limits (*TeamLimitError). It runs in the
// transaction that inserts the server; on PostgreSQL it first takes a
// transaction-scoped advisory lock of the team, so that two replicas
// creating servers of one team at once see each other's (SQLite has one
// writer). Not a row lock of teams: the servers' triggers update that row
// (servers_version), and a status update waiting for it while holding its
// server's row made a deadlock with FOR UPDATE.
func (s *Service) checkTeamLimits(ctx context.Context, tx *sql.Tx, teamID string, memoryMB, diskMB int) error {
	return s.checkTeamGrowth(ctx, tx, teamID, 1, memoryMB, diskMB)
}

// checkTeamGrowth is checkTeamLimits for a team growing by servers
// servers (0: a server's own limits change) and memoryMB and diskMB more
// (a growth of 0 or less passes that limit: shrinking is always allowed).
func (s *Service) checkTeamGrowth(ctx context.Context, tx *sql.Tx, teamID string, servers, memoryMB, diskMB int) error {
	l, err := LockTeamLimits(ctx, s.db, tx, teamID)
	if err != nil || (l.Servers == 0 && l.MemoryMB == 0 && l.DiskMB == 0) {
		return err
	}
	var n, mem, disk int
	err = tx.QueryRowContext(ctx, `SELECT count(*), coalesce(sum(memory_mb), 0), coalesce(sum(disk_mb), 0) FROM servers WHERE team_id = $1`,
		teamID).Scan(&n, &mem, &disk)
	if err != nil {
		return fmt.Errorf("sum the team's servers: %w", err)
	}
	switch {
	case servers > 0 && l.Servers > 0 && n+servers > l.Servers:
		return &TeamLimitError{Limit: "servers", Max: l.Servers, Used: n, Asked: servers}
	case memoryMB > 0 && l.MemoryMB > 0 && mem+memoryMB > l.MemoryMB:
		return &TeamLimitError{Limit: "memory", Max: l.MemoryMB, Used: mem, Asked: memoryMB}
	case diskMB > 0 && l.DiskMB > 0 && disk+diskMB > l.DiskMB:
		return &TeamLimitError{Limit: "disk", Max: l.DiskMB, Used: disk, Asked: diskMB}
	}
	return nil
}
