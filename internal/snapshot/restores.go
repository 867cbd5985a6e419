package snapshot

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/kilnhq/kiln/internal/ids"
	"github.com/kilnhq/kiln/internal/store"
)

// Restore statuses (RestoreRecord.Status).
const (
	RestorePending   = "pending"   // accepted: the server is held, nothing written yet
	RestoreRestoring = "restoring" // the server stopped, its files being written
	RestoreDone      = "done"
	RestoreFailed    = "failed" // Error says why; the server's files are as they were
)

// MaxRestoresKept is how many restore records a server keeps, the newest
// (older ones are removed as a new one is made); ListRestores answers at
// most as many.
const MaxRestoresKept = 100

// RestoreRecord is what a client reads of a restore (GET /restores/{id}).
type RestoreRecord struct {
	ID         string
	TeamID     string
	SnapshotID string
	ServerID   string // the target
	Path       *string
	Status     string
	Error      *string
	// BytesDone counts the file content written so far into the staging
	// tree (files proven equal are not written: a restore may end done
	// below BytesTotal); BytesTotal is the snapshot's content, known once
	// its manifest is read.
	BytesDone, BytesTotal int64
	CreatedAt             int64
	StartedAt             *int64
	CompletedAt           *int64
}

// ErrRestoreNotFound: no restore of that id in the team.
var ErrRestoreNotFound = errors.New("restore not found")

const restoreColumns = `id, team_id, snapshot_id, server_id, path, status, error, bytes_done, bytes_total, created_at, started_at, completed_at`

func scanRestore(row interface{ Scan(...any) error }) (RestoreRecord, error) {
	var r RestoreRecord
	err := row.Scan(&r.ID, &r.TeamID, &r.SnapshotID, &r.ServerID, &r.Path, &r.Status, &r.Error,
		&r.BytesDone, &r.BytesTotal, &r.CreatedAt, &r.StartedAt, &r.CompletedAt)
	return r, err
}

// GetRestore returns one of the team's restore records, with the
// progress of one running in this process as of now. Errors:
// ErrRestoreNotFound, the database's.
func (s *Service) GetRestore(ctx context.Context, teamID, id string) (RestoreRecord, error) {
	r, err := scanRestore(s.db.Read().QueryRowContext(ctx, `SELECT `+restoreColumns+` FROM restores WHERE id = $1 AND team_id = $2`, id, teamID))
	if errors.Is(err, sql.ErrNoRows) {
		return RestoreRecord{}, ErrRestoreNotFound
	}
	if err != nil {
		return RestoreRecord{}, fmt.Errorf("get restore %s: %w", id, err)
	}
	return s.withProgress(r), nil
}

// ListRestores returns the team's restore records, newest first, at most
// MaxRestoresKept, of one server and/or one snapshot when given.
func (s *Service) ListRestores(ctx context.Context, teamID, serverID, snapshotID string) ([]RestoreRecord, error) {
	q := `SELECT ` + restoreColumns + ` FROM restores WHERE team_id = $1`
	args := []any{teamID}
	if serverID != "" {
		args = append(args, serverID)
		q += fmt.Sprintf(` AND server_id = $%d`, len(args))
	}
	if snapshotID != "" {
		args = append(args, snapshotID)
		q += fmt.Sprintf(` AND snapshot_id = $%d`, len(args))
	}
	q += fmt.Sprintf(` ORDER BY created_at DESC, id DESC LIMIT %d`, MaxRestoresKept)
	rows, err := s.db.Read().QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list restores: %w", err)
	}
	defer rows.Close()
	out := []RestoreRecord{}
	for rows.Next() {
		r, err := scanRestore(rows)
		if err != nil {
			return nil, fmt.Errorf("list restores: %w", err)
		}
		out = append(out, s.withProgress(r))
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list restores: %w", err)
	}
	return out, nil
}

// withProgress fills in the live figures of a restore running here (the
// row has them as of its last flush).
func (s *Service) withProgress(r RestoreRecord) RestoreRecord {
	if r.Status != RestoreRestoring {
		return r
	}
	s.mu.Lock()
	run := s.restoring[r.ServerID]
	s.mu.Unlock()
	if run != nil && run.record == r.ID {
		r.BytesDone, r.BytesTotal = run.done.Load(), run.total.Load()
	}
	return r
}

// recordRestore makes the record of a restore just accepted (pending),
// before the caller answers, and trims the server's older records.
func (s *Service) recordRestore(ctx context.Context, teamID, snapshotID, serverID, only string) (RestoreRecord, error) {
	r := RestoreRecord{ID: ids.New("rst"), TeamID: teamID, SnapshotID: snapshotID, ServerID: serverID,
		Status: RestorePending, CreatedAt: store.Now()}
	if only != "" && only != "." {
		r.Path = &only
	}
	err := s.db.Tx(ctx, func(tx *sql.Tx) error {
		// A server's records are ordered by created_at, strictly: one
		// made in the same millisecond as the last comes after it (ids
		// are random, so they cannot break the tie), and the trim below
		// keeps the newest ones.
		var last int64
		if err := tx.QueryRowContext(ctx, `SELECT coalesce(max(created_at), 0) FROM restores WHERE server_id = $1`, serverID).Scan(&last); err != nil {
			return err
		}
		r.CreatedAt = max(r.CreatedAt, last+1)
		if _, err := tx.ExecContext(ctx, `INSERT INTO restores (id, team_id, snapshot_id, server_id, path, status, owner, created_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`, r.ID, teamID, snapshotID, serverID, r.Path, r.Status, s.opts.Owner, r.CreatedAt); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `DELETE FROM restores WHERE server_id = $1 AND id NOT IN
			(SELECT id FROM restores WHERE server_id = $1 ORDER BY created_at DESC, id DESC LIMIT `+fmt.Sprint(MaxRestoresKept)+`)`, serverID)
		return err
	})
	if err != nil {
		return RestoreRecord{}, fmt.Errorf("record the restore: %w", err)
	}
	return r, nil
}

// restoreStarted marks a record restoring: its server is about to stop.
func (s *Service) restoreStarted(id string) {
	now := store.Now()
	s.updateRestore(id, `UPDATE restores SET status = $1, started_at = $2 WHERE id = $3 AND status = $4`,
		RestoreRestoring, now, id, RestorePending)
}

// restoreEnded records how a restore ended: done, or failed with err's
// sentence. The row is written with a context of its own: a restore
// canceled (kiln stopping, the server deleted) is still recorded.
func (s *Service) restoreEnded(id string, p *restoreRun, err error) {
	now := store.Now()
	done, total := p.done.Load(), p.total.Load()
	if err == nil {
		s.updateRestore(id, `UPDATE restores SET status = $1, bytes_done = $2, bytes_total = $3, completed_at = $4, owner = NULL,
			started_at = COALESCE(started_at, $4) WHERE id = $5`, RestoreDone, done, total, now, id)
		return
	}
	msg := restoreSentence(err)
	s.updateRestore(id, `UPDATE restores SET status = $1, error = $2, bytes_done = $3, bytes_total = $4, completed_at = $5, owner = NULL
		WHERE id = $6`, RestoreFailed, msg, done, total, now, id)
}

// flushProgress writes a running restore's figures to its row every
// interval until stop is closed: a client of another process (or after
// this one died) sees how far it got.
func (s *Service) flushProgress(id string, p *restoreRun, interval time.Duration, stop <-chan struct{}) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			s.updateRestore(id, `UPDATE restores SET bytes_done = $1, bytes_total = $2 WHERE id = $3 AND status = $4`,
				p.done.Load(), p.total.Load(), id, RestoreRestoring)
		}
	}
}

func (s *Service) updateRestore(id, query string, args ...any) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := s.db.Write().ExecContext(ctx, query, args...); err != nil {
		s.log.Error("record a restore", "restore_id", id, "err", err)
	}
}

// restoreSentence is a failed restore's error: one sentence a team may
// read (told), saying the files are as they were.
func restoreSentence(err error) string {
	if errors.Is(err, ErrServerDeleted) {
		return "The server was deleted during the restore."
	}
	msg := strings.TrimSuffix(told(err), ".")
	if msg == "" {
		return "The restore failed; the server's files are as they were."
	}
	return strings.ToUpper(msg[:1]) + msg[1:] + "; the server's files are as they were."
}

// restoreAbandoned is the error of a restore whose process stopped
// before its commit point (Recover undid it at the next start).
const restoreAbandoned = "Kiln stopped during the restore; the server's files are as they were. Restore again."

// endAbandonedRestores ends the restore records whose process stopped
// (the rule of failAbandoned): done when this node's start finished the
// interrupted swap (RecoverRoots, after its commit point), failed
// otherwise (undone, or never begun).
func (s *Service) endAbandonedRestores(ctx context.Context) error {
	stale := store.Now() - time.Minute.Milliseconds()
	rows, err := s.db.Read().QueryContext(ctx, `SELECT r.id, r.server_id FROM restores r WHERE r.status IN ($1, $2)
		AND NOT EXISTS (SELECT 1 FROM instances i WHERE i.id = r.owner AND i.seen_at > $3
			AND (i.node_id <> $4 OR i.id = $5))`, RestorePending, RestoreRestoring, stale, s.opts.Node, s.opts.Owner)
	if err != nil {
		return fmt.Errorf("find abandoned restores: %w", err)
	}
	type lost struct{ id, server string }
	var all []lost
	for rows.Next() {
		var l lost
		if err := rows.Scan(&l.id, &l.server); err != nil {
			rows.Close()
			return fmt.Errorf("find abandoned restores: %w", err)
		}
		all = append(all, l)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("find abandoned restores: %w", err)
	}
	now := store.Now()
	for _, l := range all {
		s.mu.Lock()
		run := s.restoring[l.server]
		finished := s.finishedRestores[l.server]
		s.mu.Unlock()
		if run != nil && run.record == l.id {
			continue // running here
		}
		if finished {
			s.updateRestore(l.id, `UPDATE restores SET status = $1, completed_at = $2, owner = NULL WHERE id = $3 AND status IN ($4, $5)`,
				RestoreDone, now, l.id, RestorePending, RestoreRestoring)
			continue
		}
		s.updateRestore(l.id, `UPDATE restores SET status = $1, error = $2, completed_at = $3, owner = NULL WHERE id = $4 AND status IN ($5, $6)`,
			RestoreFailed, restoreAbandoned, now, l.id, RestorePending, RestoreRestoring)
	}
	return nil
}

// RootsRecovered tells the service which servers' interrupted restores
// RecoverRoots finished (past their commit point) at this start: their
// records end done rather than failed. Call it before Run.
func (s *Service) RootsRecovered(finished map[string]bool) {
	s.mu.Lock()
	s.finishedRestores = finished
	s.mu.Unlock()
}
