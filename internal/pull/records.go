package pull

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/kilnhq/kiln/internal/store"
)

const columns = `id, team_id, server_id, url, directory, filename, status, size, written, error, created_at, updated_at, finished_at`

type scanner interface{ Scan(dest ...any) error }

func scan(s scanner) (Download, error) {
	var d Download
	var status string
	var errText sql.NullString
	var finished sql.NullInt64
	err := s.Scan(&d.ID, &d.TeamID, &d.ServerID, &d.URL, &d.Directory, &d.Filename, &status,
		&d.Size, &d.Written, &errText, &d.CreatedAt, &d.UpdatedAt, &finished)
	d.Status, d.Error, d.FinishedAt = Status(status), errText.String, finished.Int64
	return d, err
}

// insert records d (queued) unless its server already has MaxActive
// active downloads (ErrTooMany). The count and the insert are one
// transaction under a per-server lock: SQLite's writer is a single
// connection with BEGIN IMMEDIATE, PostgreSQL takes a transaction-scoped
// advisory lock on the server id, so two replicas cannot both insert the
// fourth.
func (m *Manager) insert(ctx context.Context, d Download) error {
	return m.db.Tx(ctx, func(tx *sql.Tx) error {
		if m.db.Dialect() == store.Postgres {
			if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock(hashtextextended($1, 0))`, "kiln.pull:"+d.ServerID); err != nil {
				return fmt.Errorf("lock server downloads: %w", err)
			}
		}
		var n int
		err := tx.QueryRowContext(ctx,
			`SELECT count(*) FROM downloads WHERE server_id = $1 AND status IN ('queued', 'running')`, d.ServerID).Scan(&n)
		if err != nil {
			return fmt.Errorf("count active downloads: %w", err)
		}
		if n >= MaxActive {
			return ErrTooMany
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO downloads (`+columns+`)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, NULL, $10, $10, NULL)`,
			d.ID, d.TeamID, d.ServerID, d.URL, d.Directory, d.Filename, string(d.Status), d.Size, d.Written, d.CreatedAt)
		if err != nil {
			return fmt.Errorf("insert download: %w", err)
		}
		return nil
	})
}

// get returns one download of the team's server; ErrNotFound otherwise.
func (m *Manager) get(ctx context.Context, teamID, serverID, id string) (Download, error) {
	row := m.db.Read().QueryRowContext(ctx, `SELECT `+columns+` FROM downloads
		WHERE id = $1 AND team_id = $2 AND server_id = $3`, id, teamID, serverID)
	d, err := scan(row)
	if errors.Is(err, sql.ErrNoRows) {
		return Download{}, ErrNotFound
	}
	if err != nil {
		return Download{}, fmt.Errorf("get download: %w", err)
	}
	return d, nil
}

// setRunning moves a queued download to running; false when it is no
// longer queued (canceled meanwhile).
func (m *Manager) setRunning(ctx context.Context, id string) (bool, error) {
	res, err := m.db.Write().ExecContext(ctx,
		`UPDATE downloads SET status = 'running', updated_at = $1 WHERE id = $2 AND status = 'queued'`, m.now(), id)
	if err != nil {
		return false, fmt.Errorf("mark download running: %w", err)
	}
	n, err := res.RowsAffected()
	return n == 1, err
}

// setProgress records size and written of a running download; false when
// it is no longer running (canceled by another process).
func (m *Manager) setProgress(ctx context.Context, id string, size, written int64) (bool, error) {
	res, err := m.db.Write().ExecContext(ctx,
		`UPDATE downloads SET size = $1, written = $2, updated_at = $3 WHERE id = $4 AND status = 'running'`,
		size, written, m.now(), id)
	if err != nil {
		return false, fmt.Errorf("record download progress: %w", err)
	}
	n, err := res.RowsAffected()
	return n == 1, err
}

// finish moves an active download to a final status. errText is stored
// only for StatusFailed. It changes nothing when the download is no longer
// active (a final status is never overwritten).
func (m *Manager) finish(ctx context.Context, id string, st Status, size, written int64, errText string) error {
	var e any
	if st == StatusFailed {
		e = errText
	}
	now := m.now()
	_, err := m.db.Write().ExecContext(ctx, `UPDATE downloads
		SET status = $1, size = $2, written = $3, error = $4, updated_at = $5, finished_at = $5
		WHERE id = $6 AND status IN ('queued', 'running')`,
		string(st), size, written, e, now, id)
	if err != nil {
		return fmt.Errorf("mark download %s: %w", st, err)
	}
	return nil
}

// list returns the server's active downloads and those finished since
// `since`, newest first, at most MaxList.
func (m *Manager) list(ctx context.Context, teamID, serverID string, since int64) ([]Download, error) {
	rows, err := m.db.Read().QueryContext(ctx, `SELECT `+columns+` FROM downloads
		WHERE server_id = $1 AND team_id = $2 AND (status IN ('queued', 'running') OR finished_at >= $3)
		ORDER BY created_at DESC, id DESC LIMIT $4`, serverID, teamID, since, MaxList)
	if err != nil {
		return nil, fmt.Errorf("list downloads: %w", err)
	}
	defer rows.Close()
	out := []Download{}
	for rows.Next() {
		d, err := scan(rows)
		if err != nil {
			return nil, fmt.Errorf("list downloads: %w", err)
		}
		out = append(out, d)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list downloads: %w", err)
	}
	return out, nil
}

// leftovers returns every active download in the database.
func (m *Manager) leftovers(ctx context.Context) ([]Download, error) {
	rows, err := m.db.Read().QueryContext(ctx, `SELECT `+columns+` FROM downloads
		WHERE status IN ('queued', 'running') ORDER BY created_at`)
	if err != nil {
		return nil, fmt.Errorf("find interrupted downloads: %w", err)
	}
	defer rows.Close()
	var out []Download
	for rows.Next() {
		d, err := scan(rows)
		if err != nil {
			return nil, fmt.Errorf("find interrupted downloads: %w", err)
		}
		out = append(out, d)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("find interrupted downloads: %w", err)
	}
	return out, nil
}

// prune deletes downloads that finished before `before`.
func (m *Manager) prune(ctx context.Context, before int64) (int64, error) {
	res, err := m.db.Write().ExecContext(ctx, `DELETE FROM downloads WHERE finished_at < $1`, before)
	if err != nil {
		return 0, fmt.Errorf("prune downloads: %w", err)
	}
	return res.RowsAffected()
}
