package snapshot

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/kilnhq/kiln/internal/snapshot/manifest"
	"github.com/kilnhq/kiln/internal/store"
)

// Readers. A restore or a download registers itself (table
// snapshot_reads, on any replica) before it reads the snapshot's manifest
// and ends after its last chunk. A delete while one reads removes the
// record — the snapshot is gone from the API and no new reader can begin
// — but leaves the manifest and the chunks (storage_cleanup_skipped,
// reason in_use), so the restore or download finishes whole; the last
// reader to end cleans them up, as unlink(2) leaves an open file's data
// to its last close. A reader whose process died holds nothing: the
// collector drops its row (its claim names its instance, as a reaper's
// does) and then cleans the storage as for any deleted snapshot.
//
// Ordering, on PostgreSQL with several replicas: beginRead and end lock
// the snapshot's row (FOR SHARE) while a delete's transaction deletes it,
// so a reader either registers before the delete counts the readers or
// finds no record; and the reader that ends last either sees the record
// still there (the delete, after it, counts no reader and cleans) or gone
// (the delete counted it and left the cleanup to it); readers of one
// snapshot end one at a time (an advisory lock on its uuid), so the last
// one sees no other. SQLite's one writer transaction orders them all the
// same way.

// reader is one registered restore or download of a snapshot.
type reader struct {
	s     *Service
	uuid  string
	claim string
	once  sync.Once
}

// readerEndTimeout bounds the statements of reader.end, which runs after
// the request or the restore that held it (its context may be over).
const readerEndTimeout = 30 * time.Second

// beginRead registers a reader of the ready snapshot uuid. Errors:
// ErrNotFound (its record is gone: deleted since it was looked up),
// ErrNotReady, the database's.
func (s *Service) beginRead(ctx context.Context, uuid string) (*reader, error) {
	r := &reader{s: s, uuid: uuid, claim: s.newClaim()}
	err := s.db.Tx(ctx, func(tx *sql.Tx) error {
		status, err := s.lockRecord(ctx, tx, uuid)
		switch {
		case err != nil:
			return err
		case status == "":
			return ErrNotFound
		case status != StatusReady:
			return ErrNotReady
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO snapshot_reads (claim, snapshot_uuid, started_at) VALUES ($1, $2, $3)`,
			r.claim, uuid, store.Now())
		return err
	})
	if errors.Is(err, ErrNotFound) || errors.Is(err, ErrNotReady) {
		return nil, err
	}
	if err != nil {
		return nil, fmt.Errorf("register a reader of snapshot %s: %w", uuid, err)
	}
	return r, nil
}

// lockRecord returns the status of the snapshot uuid, "" when it has no
// record, and holds a share lock on its row for the rest of tx on
// PostgreSQL (a delete of the row waits for tx, and tx for a delete).
func (s *Service) lockRecord(ctx context.Context, tx *sql.Tx, uuid string) (string, error) {
	q := `SELECT status FROM snapshots WHERE uuid = $1`
	if s.db.Dialect() == store.Postgres {
		q += ` FOR SHARE`
	}
	var status string
	err := tx.QueryRowContext(ctx, q, uuid).Scan(&status)
	if errors.Is(err, sql.ErrNoRows) {
		return "", nil
	}
	return status, err
}

// end unregisters the reader (once; later calls do nothing). When it was
// the last reader of a snapshot deleted meanwhile, the snapshot's storage
// is cleaned in the background. A failure is logged: the collector drops
// the row once this process is gone and finishes the cleanup.
func (r *reader) end() {
	r.once.Do(func() {
		s := r.s
		ctx, cancel := context.WithTimeout(context.WithoutCancel(s.ctx), readerEndTimeout)
		defer cancel()
		last := false
		err := s.db.Tx(ctx, func(tx *sql.Tx) error {
			if s.db.Dialect() == store.Postgres {
				// The ends of one snapshot's readers one at a time: two
				// ending together after the delete would each still see
				// the other's row (deleted, not committed) and neither
				// would clean up. The record, gone, locks nothing.
				if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock(hashtext($1))`, "snapshot-read:"+r.uuid); err != nil {
					return err
				}
			}
			status, err := s.lockRecord(ctx, tx, r.uuid)
			if err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, `DELETE FROM snapshot_reads WHERE claim = $1`, r.claim); err != nil {
				return err
			}
			if status != "" {
				return nil
			}
			busy, err := s.readersLeft(ctx, tx, r.uuid)
			last = !busy
			return err
		})
		if err != nil {
			s.log.Warn("unregister a snapshot reader (the collector drops it once this process is gone)", "snapshot_uuid", r.uuid, "err", err)
			return
		}
		if last {
			s.cleanDeleted(r.uuid)
		}
	})
}

// readersLeft reports whether a live reader of uuid is registered, and
// removes the rows of dead ones (their process gone) on the way.
func (s *Service) readersLeft(ctx context.Context, tx *sql.Tx, uuid string) (bool, error) {
	rows, err := tx.QueryContext(ctx, `SELECT claim FROM snapshot_reads WHERE snapshot_uuid = $1`, uuid)
	if err != nil {
		return false, err
	}
	var claims []string
	for rows.Next() {
		var c string
		if err := rows.Scan(&c); err != nil {
			rows.Close()
			return false, err
		}
		claims = append(claims, c)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return false, err
	}
	busy := false
	for _, c := range claims {
		alive, err := s.claimAlive(ctx, tx, c)
		if err != nil {
			return false, err
		}
		if alive {
			busy = true
			continue
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM snapshot_reads WHERE claim = $1`, c); err != nil {
			return false, err
		}
	}
	return busy, nil
}

// dropDeadReaders removes every reader row whose process is gone (the
// collector, before it cleans deleted snapshots' storage).
func (s *Service) dropDeadReaders(ctx context.Context) error {
	rows, err := s.db.Read().QueryContext(ctx, `SELECT DISTINCT snapshot_uuid FROM snapshot_reads`)
	if err != nil {
		return fmt.Errorf("list snapshot readers: %w", err)
	}
	var uuids []string
	for rows.Next() {
		var u string
		if err := rows.Scan(&u); err != nil {
			rows.Close()
			return err
		}
		uuids = append(uuids, u)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	for _, u := range uuids {
		if err := s.db.Tx(ctx, func(tx *sql.Tx) error {
			_, err := s.readersLeft(ctx, tx, u)
			return err
		}); err != nil {
			return fmt.Errorf("drop the dead readers of snapshot %s: %w", u, err)
		}
	}
	return nil
}

// cleanDeleted removes the storage of a snapshot whose record a delete
// removed while it was read, in the background: its manifest, then every
// chunk no other snapshot references. A failure is left to the collector.
func (s *Service) cleanDeleted(uuid string) {
	if s.ctx.Err() != nil {
		return // stopping: the collector cleans at the next start
	}
	s.goTracked(func() {
		freed, shared, err := s.dropStorage(s.ctx, uuid)
		if err != nil {
			s.log.Warn("clean a deleted snapshot's storage after its last reader (the collector finishes it)", "snapshot_uuid", uuid, "err", err)
			s.Wake()
			return
		}
		s.log.Info("deleted snapshot's storage cleaned after its last reader", "snapshot_uuid", uuid,
			"freed_bytes", freed, "shared_bytes", shared)
	})
}

// dropStorage deletes the manifest of the snapshot uuid (whose record is
// gone), then every chunk no other snapshot references: what a delete
// freed, and what stays shared.
func (s *Service) dropStorage(ctx context.Context, uuid string) (freed, shared int64, err error) {
	manifest := manifest.Key(uuid)
	var msize int64
	if in, err := s.store.Stat(ctx, manifest); err == nil {
		msize = in.Size
	}
	if err := s.store.Delete(ctx, manifest); err != nil {
		return 0, 0, &storeError{err: fmt.Errorf("delete manifest %s: %w", manifest, err)}
	}
	freed, shared, err = s.unpin(ctx, uuid)
	return freed + msize, shared, err
}
