package snapshot

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/kilnhq/kiln/internal/blob"
	"github.com/kilnhq/kiln/internal/ids"
	"github.com/kilnhq/kiln/internal/store"
)

// The chunk ledger (table chunks, refs in snapshot_chunks) is what keeps
// the invariant of doc.go — no manifest ever references a missing chunk —
// whatever creates, deletes and collections run at once, on any replica:
//
//   - pin: a snapshot in progress pins each chunk before it looks it up or
//     uploads it: under the chunk row's lock it makes the row live (a new
//     row if none) and adds its reference. A row being deleted is waited
//     for (its blob may be going), then made anew and the chunk uploaded
//     again.
//   - unpin (a failed or deleted snapshot): its references go; chunks no
//     one references are reaped.
//   - reap: under the row's lock, a chunk with no reference is marked
//     deleting with the reaper's claim (committed), its blob deleted, then
//     its row — by that claim only. A pin after the mark waits for the row
//     to go; a pin before it holds a reference, and the reap leaves the
//     chunk. A deleting row someone else claimed is left to them: a second
//     reaper deleting the blob after the first removed the row could
//     delete the blob a snapshot has just uploaded again (a real race,
//     found by TestConcurrentCreateDelete). A claim is taken over only
//     when its process is gone (the claim names its instance: not
//     beating, or an earlier process of this node) or it is older than
//     staleClaim.
//
//   - quarantine (integrity.go): a chunk found corrupt is moved aside by
//     the one process that marked its row quarantine with its claim (taken
//     over only as a reaper's is); pins add references and leave the row
//     to it, reapers leave it while the claim lives, and it makes the row
//     live again once the chunk is moved (or the collector does, once its
//     process is gone).
//
// So a chunk's blob is deleted only by the one reaper holding the row's
// claim, while the row says deleting, and a row says deleting only if no
// reference existed when it was marked and none can be added until the
// row is gone. A crash between the mark and the row's removal leaves a
// deleting row, which the collector finishes once its claim's process is
// known dead (at the next start of this node, or a minute later from
// another replica).

// Chunk states.
const (
	chunkLive     = "live"
	chunkDeleting = "deleting"
	// chunkQuarantine: found corrupt, its blob being moved aside by the
	// claim's holder (integrity.go); referenced as a live one is.
	chunkQuarantine = "quarantine"
)

// lockChunk locks key's row for the rest of tx (PostgreSQL; SQLite's one
// writer transaction already excludes every other writer) and returns
// its state, "" when there is no row.
func (s *Service) lockChunk(ctx context.Context, tx *sql.Tx, key string) (string, error) {
	q := `SELECT state FROM chunks WHERE key = $1`
	if s.db.Dialect() == store.Postgres {
		q += ` FOR UPDATE`
	}
	var state string
	err := tx.QueryRowContext(ctx, q, key).Scan(&state)
	if errors.Is(err, sql.ErrNoRows) {
		return "", nil
	}
	return state, err
}

// pinWait is how often a pin looks again at a chunk being deleted.
const pinWait = 20 * time.Millisecond

// pin references key from the snapshot uuid (in progress), making its row
// live; it waits while the chunk is being deleted. Once it returns nil the
// chunk's blob is not deleted by anyone until the reference goes.
func (s *Service) pin(ctx context.Context, uuid, key string) error {
	waited := false
	for {
		deleting := false
		err := s.db.Tx(ctx, func(tx *sql.Tx) error {
			state, err := s.lockChunk(ctx, tx, key)
			if err != nil {
				return err
			}
			now := store.Now()
			switch state {
			case chunkDeleting:
				deleting = true
				return nil
			case "":
				// A racing pin (PostgreSQL) may insert it first: then this
				// transaction fails on the key and the loop looks again.
				if _, err := tx.ExecContext(ctx, `INSERT INTO chunks (key, state, stored_size, updated_at) VALUES ($1, $2, 0, $3)`,
					key, chunkLive, now); err != nil {
					return err
				}
			case chunkQuarantine:
				// Being moved aside: the reference is added and the claim
				// left to its holder, who makes the row live again. The
				// snapshot finds the chunk gone and stores it anew, or (a
				// look-up just before the move) references what was moved:
				// a snapshot that reads it, or a check, finds it damaged.
			default:
				if _, err := tx.ExecContext(ctx, `UPDATE chunks SET state = $1, claim = NULL, updated_at = $2 WHERE key = $3`,
					chunkLive, now, key); err != nil {
					return err
				}
			}
			_, err = tx.ExecContext(ctx, `INSERT INTO snapshot_chunks (snapshot_uuid, chunk) VALUES ($1, $2) ON CONFLICT DO NOTHING`, uuid, key)
			return err
		})
		if err != nil && !store.IsUniqueViolation(err) {
			return fmt.Errorf("pin chunk %s: %w", key, err)
		}
		if err == nil && !deleting {
			return nil
		}
		if deleting && !waited {
			s.log.Debug("pin waits for a chunk being deleted", "chunk", key)
			waited = true
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(pinWait):
		}
	}
}

// recordSize stores a chunk's size in the store (what a delete frees).
func (s *Service) recordSize(ctx context.Context, key string, size int64) {
	if _, err := s.db.Write().ExecContext(ctx, `UPDATE chunks SET stored_size = $1 WHERE key = $2 AND stored_size <> $1`, size, key); err != nil {
		s.log.Warn("record a chunk's size", "chunk", key, "err", err)
	}
}

// staleClaim is how long a reaper may hold a chunk's deleting row before
// another one takes it over (its process died between the mark and the
// row's removal).
const staleClaim = 10 * time.Minute

// reap deletes key's blob and row if no snapshot references it. freed is
// the chunk's stored size when it was deleted; shared reports a chunk
// another snapshot still references. A chunk another reaper is deleting
// is left to it (unless its claim is stale). A store error leaves the row
// deleting (the collector finishes it once the claim is stale).
func (s *Service) reap(ctx context.Context, key string) (freed int64, shared bool, err error) {
	var size int64
	claim := ""
	err = s.db.Tx(ctx, func(tx *sql.Tx) error {
		state, err := s.lockChunk(ctx, tx, key)
		if err != nil || state == "" {
			return err
		}
		var refs int
		var updated int64
		if err := tx.QueryRowContext(ctx, `SELECT stored_size, updated_at,
			(SELECT count(*) FROM snapshot_chunks WHERE chunk = $1) FROM chunks WHERE key = $1`, key).Scan(&size, &updated, &refs); err != nil {
			return err
		}
		if refs > 0 {
			shared = true
			return nil
		}
		if state != chunkLive && store.Now()-updated < staleClaim.Milliseconds() {
			// Another reaper's (or a quarantine's): deleting it here could
			// delete the blob a snapshot uploads again once that reaper
			// removed the row — unless that reaper's process is dead.
			var held string
			if err := tx.QueryRowContext(ctx, `SELECT claim FROM chunks WHERE key = $1`, key).Scan(&held); err != nil {
				return err
			}
			alive, err := s.claimAlive(ctx, tx, held)
			if err != nil || alive {
				return err
			}
		}
		claim = s.newClaim()
		_, err = tx.ExecContext(ctx, `UPDATE chunks SET state = $1, claim = $2, updated_at = $3 WHERE key = $4`,
			chunkDeleting, claim, store.Now(), key)
		return err
	})
	if err != nil {
		return 0, false, fmt.Errorf("reap chunk %s: %w", key, err)
	}
	if shared {
		return size, true, nil
	}
	if claim == "" {
		return 0, false, nil
	}
	return size, false, s.finishReap(ctx, key, claim)
}

// newClaim is a reaper's claim: this process's instance id and a random
// part (claimAlive reads the id).
func (s *Service) newClaim() string { return s.opts.Owner + "/" + ids.RandomBase62(16) }

// claimAlive reports whether the process that made claim may still be
// deleting: its instance beats, and is not an earlier process of this
// node (see failAbandoned).
func (s *Service) claimAlive(ctx context.Context, tx *sql.Tx, claim string) (bool, error) {
	owner, _, ok := strings.Cut(claim, "/")
	if !ok {
		return false, nil
	}
	if owner == s.opts.Owner {
		return true, nil
	}
	var n int
	err := tx.QueryRowContext(ctx, `SELECT count(*) FROM instances WHERE id = $1 AND seen_at > $2 AND node_id <> $3`,
		owner, store.Now()-time.Minute.Milliseconds(), s.opts.Node).Scan(&n)
	return n > 0, err
}

// finishReap deletes the blob of a chunk this reaper claimed, then its row
// (only if the claim is still this one's).
func (s *Service) finishReap(ctx context.Context, key, claim string) error {
	if err := s.store.Delete(ctx, key); err != nil {
		return &storeError{err: fmt.Errorf("delete chunk %s: %w", key, err)}
	}
	if _, err := s.db.Write().ExecContext(ctx, `DELETE FROM chunks WHERE key = $1 AND state = $2 AND claim = $3`,
		key, chunkDeleting, claim); err != nil {
		return fmt.Errorf("forget chunk %s: %w", key, err)
	}
	return nil
}

// storeError is a failure of the blob store (storage_unavailable).
type storeError struct{ err error }

func (e *storeError) Error() string { return e.err.Error() }
func (e *storeError) Unwrap() error { return e.err }

// unpin drops every reference of the snapshot uuid and reaps the chunks
// no one references any more (a failed or deleted snapshot). It returns
// what was freed and what stays shared.
func (s *Service) unpin(ctx context.Context, uuid string) (freed, shared int64, err error) {
	keys, err := s.refsOf(ctx, uuid)
	if err != nil {
		return 0, 0, err
	}
	if _, err := s.db.Write().ExecContext(ctx, `DELETE FROM snapshot_chunks WHERE snapshot_uuid = $1`, uuid); err != nil {
		return 0, 0, fmt.Errorf("drop the chunk references of %s: %w", uuid, err)
	}
	return s.reapAll(ctx, keys)
}

// reapAll reaps keys, adding up what was freed and what stays shared; it
// stops at the first store error.
func (s *Service) reapAll(ctx context.Context, keys []string) (freed, shared int64, err error) {
	for _, k := range keys {
		f, sh, err := s.reap(ctx, k)
		if err != nil {
			return freed, shared, err
		}
		if sh {
			shared += f
		} else {
			freed += f
		}
	}
	return freed, shared, nil
}

func (s *Service) refsOf(ctx context.Context, uuid string) ([]string, error) {
	rows, err := s.db.Write().QueryContext(ctx, `SELECT chunk FROM snapshot_chunks WHERE snapshot_uuid = $1 ORDER BY chunk`, uuid)
	if err != nil {
		return nil, fmt.Errorf("read the chunks of %s: %w", uuid, err)
	}
	defer rows.Close()
	var keys []string
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			return nil, err
		}
		keys = append(keys, k)
	}
	return keys, rows.Err()
}

// collect is one pass of the background collector: snapshots whose
// creator died are failed and unpinned; readers whose process died are
// dropped (reads.go) and the references of deleted snapshots no one reads
// go; chunk rows no one references (left by a crash, or deleting when it
// struck) are reaped; blobs with no row and manifests with neither a
// snapshot (but a failed one) nor a reader, older than grace, are deleted
// (a crash between a put and its record, a failed snapshot's manifest
// whose delete failed, or a database restored from an older backup).
func (s *Service) collect(ctx context.Context, grace time.Duration) error {
	if err := s.failAbandoned(ctx); err != nil {
		return err
	}
	if err := s.endAbandonedRestores(ctx); err != nil {
		return err
	}
	if err := s.dropDeadReaders(ctx); err != nil {
		return err
	}
	if err := s.releaseQuarantines(ctx); err != nil {
		return err
	}
	// References of snapshots whose record is gone (a crash during a
	// delete, or a snapshot deleted while it was taken) go too, unless a
	// restore or a download still reads it (reads.go).
	if _, err := s.db.Write().ExecContext(ctx, `DELETE FROM snapshot_chunks
		WHERE NOT EXISTS (SELECT 1 FROM snapshots s WHERE s.uuid = snapshot_chunks.snapshot_uuid)
		AND NOT EXISTS (SELECT 1 FROM snapshot_reads r WHERE r.snapshot_uuid = snapshot_chunks.snapshot_uuid)`); err != nil {
		return fmt.Errorf("drop the references of deleted snapshots: %w", err)
	}
	rows, err := s.db.Read().QueryContext(ctx, `SELECT c.key FROM chunks c
		WHERE NOT EXISTS (SELECT 1 FROM snapshot_chunks r WHERE r.chunk = c.key) ORDER BY c.key`)
	if err != nil {
		return fmt.Errorf("list unreferenced chunks: %w", err)
	}
	idle, err := scanAll(rows, func(rows *sql.Rows) (k string, err error) { return k, rows.Scan(&k) })
	if err != nil {
		return fmt.Errorf("list unreferenced chunks: %w", err)
	}
	if _, _, err := s.reapAll(ctx, idle); err != nil {
		return err
	}
	cutoff := time.Now().Add(-grace)
	// Stored chunks old enough to be orphans are checked against the
	// ledger a batch at a time (one query per orphanBatch keys, not one per
	// chunk), so memory stays bounded by the batch and the orphans.
	var orphans, batch []string
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		known, err := s.knownChunks(ctx, batch)
		if err != nil {
			return err
		}
		for _, k := range batch {
			if !known[k] {
				orphans = append(orphans, k)
			}
		}
		batch = batch[:0]
		return nil
	}
	err = s.store.List(ctx, chunkPrefix, func(in blob.Info) error {
		if !in.ModTime.Before(cutoff) {
			return nil
		}
		batch = append(batch, in.Key)
		if len(batch) < orphanBatch {
			return nil
		}
		return flush()
	})
	if err == nil {
		err = flush()
	}
	if err != nil {
		return &storeError{err: fmt.Errorf("list chunks: %w", err)}
	}
	for _, k := range orphans {
		if err := s.reapOrphan(ctx, k); err != nil {
			return err
		}
	}
	var manifests []string
	err = s.store.List(ctx, manifestPrefix, func(in blob.Info) error {
		if in.ModTime.Before(cutoff) {
			manifests = append(manifests, in.Key)
		}
		return nil
	})
	if err != nil {
		return &storeError{err: fmt.Errorf("list manifests: %w", err)}
	}
	for _, k := range manifests {
		var n int
		uuid := strings.TrimPrefix(k, manifestPrefix)
		if err := s.db.Read().QueryRowContext(ctx, `SELECT (SELECT count(*) FROM snapshots WHERE uuid = $1 AND status <> $2)
			+ (SELECT count(*) FROM snapshot_reads WHERE snapshot_uuid = $1)`, uuid, StatusFailed).Scan(&n); err != nil {
			return err
		}
		if n == 0 {
			if err := s.store.Delete(ctx, k); err != nil {
				return &storeError{err: fmt.Errorf("delete manifest %s: %w", k, err)}
			}
		}
	}
	return nil
}

// reapOrphan deletes a chunk blob that has no row: a claimed deleting row
// is made first (so a pin waits), then the blob and the row go. A chunk
// that has a row is the ledger's, left alone.
func (s *Service) reapOrphan(ctx context.Context, key string) error {
	claim := s.newClaim()
	res, err := s.db.Write().ExecContext(ctx, `INSERT INTO chunks (key, state, stored_size, claim, updated_at) VALUES ($1, $2, 0, $3, $4)
		ON CONFLICT (key) DO NOTHING`, key, chunkDeleting, claim, store.Now())
	if err != nil {
		return fmt.Errorf("claim orphan chunk %s: %w", key, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return nil
	}
	return s.finishReap(ctx, key, claim)
}

// orphanBatch is how many stored chunk keys the collector checks against
// the ledger in one query.
const orphanBatch = 500

// knownChunks returns which of keys the chunks table holds.
func (s *Service) knownChunks(ctx context.Context, keys []string) (map[string]bool, error) {
	args := make([]any, len(keys))
	marks := make([]string, len(keys))
	for i, k := range keys {
		args[i] = k
		marks[i] = "$" + strconv.Itoa(i+1)
	}
	rows, err := s.db.Read().QueryContext(ctx, `SELECT key FROM chunks WHERE key IN (`+strings.Join(marks, ", ")+`)`, args...)
	if err != nil {
		return nil, fmt.Errorf("look chunks up: %w", err)
	}
	defer rows.Close()
	known := make(map[string]bool, len(keys))
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			return nil, fmt.Errorf("look chunks up: %w", err)
		}
		known[k] = true
	}
	return known, rows.Err()
}

// scanAll reads every row of rows with scan, and closes rows. The
// iteration's own error (rows.Err: the connection lost, the context
// ended, the database failing a row mid-way) is returned like a scan's:
// a loop that stops at rows.Next() == false without asking would take
// the rows read so far for all of them — the collector would leave
// abandoned snapshots or idle chunks for its next pass, and say nothing.
func scanAll[T any](rows *sql.Rows, scan func(*sql.Rows) (T, error)) ([]T, error) {
	defer rows.Close()
	var out []T
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return out, nil
}
