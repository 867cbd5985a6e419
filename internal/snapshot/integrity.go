package snapshot

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/kilnhq/kiln/internal/blob"
	"github.com/kilnhq/kiln/internal/snapshot/engine"
	"github.com/kilnhq/kiln/internal/snapshot/manifest"
	"github.com/kilnhq/kiln/internal/store"
)

// Damage. A ready snapshot whose storage a read finds wanting — its
// manifest missing or corrupt, a chunk it references missing or corrupt —
// is marked damaged (snapshots.damage, the sentence the API shows, and
// damaged_at), and a restore or a download of the whole of it is refused
// with that sentence (*DamagedError, 409 SNAPSHOT_DAMAGED) rather than
// failing in the background or cutting an archive short (one path of it
// goes ahead: the data it needs may be whole). A chunk found corrupt is
// moved aside (engine.QuarantineChunk, holding the chunk's ledger row in
// state quarantine so that no one else moves or deletes it meanwhile),
// and every ready snapshot the ledger says references it is marked: they
// all miss it now. The next snapshot holding the same data stores the
// chunk again (a look-up no longer finds it), which makes those snapshots
// whole again: a restore or a download of a marked snapshot first checks
// that its manifest reads and every chunk it names is there (usable), and
// drops the mark if so; so does a check (Check), and a whole restore or
// download that succeeds.

// Why a snapshot is damaged: the sentences of snapshots.damage.
const (
	damageManifestMissing = "Its manifest is missing from the snapshot store: it cannot be restored or downloaded."
	damageManifestCorrupt = "Its manifest in the snapshot store is corrupt: it cannot be restored or downloaded."
	damageChunks          = "Data it holds is missing from the snapshot store or was found corrupt (and set aside): it cannot be restored or downloaded whole until a newer snapshot stores the same data again."
)

// DamagedError refuses a restore or a download of a snapshot found
// damaged; Reason is the sentence its record holds (Snapshot.Damage), Err
// what the read found, for the log.
type DamagedError struct {
	SnapshotID string
	Reason     string
	Err        error
}

func (e *DamagedError) Error() string {
	return "the snapshot is damaged: " + strings.ToLower(e.Reason[:1]) + e.Reason[1:]
}

func (e *DamagedError) Unwrap() error { return e.Err }

// errManifestMissing is what usable found: the manifest is not in the
// store.
var errManifestMissing = errors.New("the snapshot's manifest is not in the store")

// damageOf tells what err, from a read of a snapshot's storage, says of
// it: the sentence of its damage and, for a chunk, the chunk; "" when err
// is no damage (a store that failed, the context's end, a disk quota).
func damageOf(err error) (reason string, chunk *engine.ChunkError) {
	if ce, ok := errors.AsType[*engine.ChunkError](err); ok {
		return damageChunks, ce
	}
	if _, ok := errors.AsType[*blob.Error](err); ok {
		return "", nil // the store failed: nothing is known of the data
	}
	switch {
	case errors.Is(err, errManifestMissing), errors.Is(err, blob.ErrNotFound):
		return damageManifestMissing, nil
	case errors.Is(err, manifest.ErrInvalid):
		return damageManifestCorrupt, nil
	}
	return "", nil
}

// damaged deals with err, from a read of snap's storage (a restore, a
// download): a chunk found corrupt is moved aside and every ready
// snapshot referencing it marked, a chunk found missing likewise without
// the move, a missing or corrupt manifest marks snap. It returns a
// *DamagedError for those, err itself for anything else.
func (s *Service) damaged(ctx context.Context, snap Snapshot, err error) error {
	reason, ce := damageOf(err)
	if reason == "" {
		return err
	}
	ctx = context.WithoutCancel(ctx) // what was found is recorded whatever the reader does next
	log := s.log.With("snapshot_id", snap.ID, "snapshot_uuid", snap.UUID, "err", err)
	if ce == nil {
		if _, merr := s.markDamaged(ctx, snap.UUID, reason); merr != nil {
			log.Warn("mark a damaged snapshot", "mark_err", merr)
		} else {
			log.Warn("snapshot damaged: its manifest is missing or corrupt")
		}
		return &DamagedError{SnapshotID: snap.ID, Reason: reason, Err: err}
	}
	moved := ""
	if ce.Corrupt() {
		var qerr error
		if moved, qerr = s.quarantine(ctx, ce.Key, ce.Ref); qerr != nil {
			log.Warn("move a corrupt chunk aside (the next read or check tries again)", "chunk", ce.Key, "quarantine_err", qerr)
		}
	}
	n, merr := s.markChunkDamaged(ctx, ce.Key)
	if merr != nil {
		log.Warn("mark the snapshots referencing a damaged chunk", "chunk", ce.Key, "mark_err", merr)
	}
	log.Warn("snapshot damaged: a chunk is missing or corrupt", "chunk", ce.Key, "corrupt", ce.Corrupt(),
		"quarantined_to", moved, "snapshots_marked", n)
	return &DamagedError{SnapshotID: snap.ID, Reason: reason, Err: err}
}

// markDamaged marks the ready snapshot uuid damaged for reason (damaged_at
// stays the first time it was found), reporting whether it is there (a
// delete during a check removes it).
func (s *Service) markDamaged(ctx context.Context, uuid, reason string) (bool, error) {
	res, err := s.db.Write().ExecContext(ctx, `UPDATE snapshots SET damage = $1, damaged_at = COALESCE(damaged_at, $2), updated_at = $2
		WHERE uuid = $3 AND status = $4`, reason, store.Now(), uuid, StatusReady)
	if err != nil {
		return false, fmt.Errorf("mark snapshot %s damaged: %w", uuid, err)
	}
	n, _ := res.RowsAffected()
	return n > 0, nil
}

// markChunkDamaged marks damaged every ready snapshot that references the
// chunk key (the ledger's references) and is not marked yet; it returns
// how many it marked.
func (s *Service) markChunkDamaged(ctx context.Context, key string) (int64, error) {
	now := store.Now()
	res, err := s.db.Write().ExecContext(ctx, `UPDATE snapshots SET damage = $1, damaged_at = $2, updated_at = $2
		WHERE status = $3 AND damage IS NULL AND uuid IN (SELECT snapshot_uuid FROM snapshot_chunks WHERE chunk = $4)`,
		damageChunks, now, StatusReady, key)
	if err != nil {
		return 0, fmt.Errorf("mark the snapshots of chunk %s damaged: %w", key, err)
	}
	n, _ := res.RowsAffected()
	return n, nil
}

// clearDamage drops the mark of the snapshot uuid: it was found whole.
func (s *Service) clearDamage(ctx context.Context, uuid string) {
	if _, err := s.db.Write().ExecContext(ctx, `UPDATE snapshots SET damage = NULL, damaged_at = NULL, updated_at = $1
		WHERE uuid = $2 AND damage IS NOT NULL`, store.Now(), uuid); err != nil {
		s.log.Warn("clear the damage mark of a snapshot found whole", "snapshot_uuid", uuid, "err", err)
	}
}

// quarantine moves the chunk key (ref), found corrupt, aside
// (engine.QuarantineChunk) while holding its ledger row in state
// quarantine under a claim of this process: pins add their references but
// leave the row to it, a reaper or another quarantine leaves it while the
// claim is alive (reap: a claim of a dead process, or older than
// staleClaim, is taken over). Exactly one process moves a chunk at a
// time, so a second one, which read the same corrupt bytes, cannot move
// the good copy a snapshot stored after the first move. It returns where
// the chunk went, "" when it was not moved (whole now, gone, or being
// moved or deleted by someone else).
func (s *Service) quarantine(ctx context.Context, key string, ref manifest.ChunkRef) (string, error) {
	claim := s.newClaim()
	took := false
	err := s.db.Tx(ctx, func(tx *sql.Tx) error {
		took = false
		state, err := s.lockChunk(ctx, tx, key)
		if err != nil {
			return err
		}
		now := store.Now()
		switch state {
		case "":
			// No row (a database older than the store): one is made,
			// which the collector reaps once nothing references it.
			res, err := tx.ExecContext(ctx, `INSERT INTO chunks (key, state, stored_size, claim, updated_at) VALUES ($1, $2, 0, $3, $4)
				ON CONFLICT (key) DO NOTHING`, key, chunkQuarantine, claim, now)
			if err != nil {
				return err
			}
			n, _ := res.RowsAffected()
			took = n == 1
			return nil
		case chunkDeleting:
			return nil // its reaper deletes it
		case chunkQuarantine:
			var held string
			var updated int64
			if err := tx.QueryRowContext(ctx, `SELECT claim, updated_at FROM chunks WHERE key = $1`, key).Scan(&held, &updated); err != nil {
				return err
			}
			if now-updated < staleClaim.Milliseconds() {
				alive, err := s.claimAlive(ctx, tx, held)
				if err != nil || alive {
					return err // being moved by someone else
				}
			}
		}
		if _, err := tx.ExecContext(ctx, `UPDATE chunks SET state = $1, claim = $2, updated_at = $3 WHERE key = $4`,
			chunkQuarantine, claim, now, key); err != nil {
			return err
		}
		took = true
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("claim chunk %s for its quarantine: %w", key, err)
	}
	if !took {
		return "", nil
	}
	defer func() {
		if _, err := s.db.Write().ExecContext(context.WithoutCancel(ctx), `UPDATE chunks SET state = $1, claim = NULL, updated_at = $2
			WHERE key = $3 AND state = $4 AND claim = $5`, chunkLive, store.Now(), key, chunkQuarantine, claim); err != nil {
			s.log.Warn("release a chunk after its quarantine (the collector releases it)", "chunk", key, "err", err)
		}
	}()
	to, err := engine.QuarantineChunk(ctx, s.store, key, ref, time.Now())
	if err != nil {
		return "", &storeError{err: err}
	}
	if to != "" {
		s.log.Warn("corrupt snapshot chunk moved aside; the next snapshot holding its data stores it again", "chunk", key, "to", to)
	}
	return to, nil
}

// releaseQuarantines makes live again the chunks a quarantine held when
// its process died (the collector).
func (s *Service) releaseQuarantines(ctx context.Context) error {
	rows, err := s.db.Read().QueryContext(ctx, `SELECT key FROM chunks WHERE state = $1`, chunkQuarantine)
	if err != nil {
		return fmt.Errorf("list chunks being moved aside: %w", err)
	}
	var keys []string
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			rows.Close()
			return err
		}
		keys = append(keys, k)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	for _, k := range keys {
		err := s.db.Tx(ctx, func(tx *sql.Tx) error {
			state, err := s.lockChunk(ctx, tx, k)
			if err != nil || state != chunkQuarantine {
				return err
			}
			var held string
			var updated int64
			if err := tx.QueryRowContext(ctx, `SELECT claim, updated_at FROM chunks WHERE key = $1`, k).Scan(&held, &updated); err != nil {
				return err
			}
			if store.Now()-updated < staleClaim.Milliseconds() {
				if alive, err := s.claimAlive(ctx, tx, held); err != nil || alive {
					return err
				}
			}
			_, err = tx.ExecContext(ctx, `UPDATE chunks SET state = $1, claim = NULL, updated_at = $2 WHERE key = $3`, chunkLive, store.Now(), k)
			return err
		})
		if err != nil {
			return fmt.Errorf("release chunk %s after a dead quarantine: %w", k, err)
		}
	}
	return nil
}

// usable is asked before a restore or a download of snap (of the path
// only; "" or "." for all of it) is accepted. Its manifest must be in the
// store: one gone is marked and refused now, not in the background or
// after the answer's status line (a store that fails here is left to the
// read itself). A snapshot marked damaged is checked whole before a whole
// restore or download (its manifest read, every chunk it names looked
// up): still damaged, it is refused; whole again (a later snapshot stored
// the chunks it missed), its mark goes. One path of a damaged snapshot is
// not refused: the data it needs may be whole (a user's plugins beside a
// world whose chunk decayed), and the read checks every chunk it uses.
// Errors: *DamagedError.
func (s *Service) usable(ctx context.Context, snap Snapshot, only string) error {
	key := manifest.Key(snap.UUID)
	if snap.Damage == nil || (only != "" && only != ".") {
		if _, err := s.store.Stat(ctx, key); errors.Is(err, blob.ErrNotFound) {
			return s.damaged(ctx, snap, fmt.Errorf("%w: %w", errManifestMissing, err))
		}
		return nil
	}
	info, refs, err := engine.ChunkRefs(ctx, s.store, key)
	if err != nil {
		return s.damaged(ctx, snap, err)
	}
	var missing []string
	for _, st := range s.lookUp(ctx, info.Space, refs, false) {
		switch {
		case st.err != nil:
			return nil // the store failed: the read says how
		case st.missing:
			missing = append(missing, st.key)
		}
	}
	if len(missing) > 0 {
		return &DamagedError{SnapshotID: snap.ID, Reason: *snap.Damage,
			Err: fmt.Errorf("%d chunks missing, the first %s", len(missing), missing[0])}
	}
	s.clearDamage(ctx, snap.UUID)
	return nil
}

// chunkState is what a look-up (or a read) found of one chunk.
type chunkState struct {
	key     string
	ref     manifest.ChunkRef
	missing bool
	corrupt bool  // read (readData) and not what its name says
	read    int64 // bytes read (readData)
	err     error // the store failed
}

// lookUpWorkers look chunks up at once (S3 answers each in a round trip,
// which many at once hide); readWorkers read and check them, each holding
// a chunk's stored and decompressed bytes (up to 2 × engine.MaxChunk).
const (
	lookUpWorkers = 8
	readWorkers   = 4
)

// lookUp finds each of refs (of chunk space space) in the store, or with
// readData reads and checks it (engine.FetchChunk), several at once; the
// states come in refs' order. Once ctx ends, the states left say so.
func (s *Service) lookUp(ctx context.Context, space string, refs []manifest.ChunkRef, readData bool) []chunkState {
	out := make([]chunkState, len(refs))
	for i, ref := range refs {
		out[i] = chunkState{key: manifest.ChunkKey(space, ref.Sum), ref: ref}
	}
	workers := lookUpWorkers
	if readData {
		workers = readWorkers
	}
	jobs := make(chan *chunkState)
	var wg sync.WaitGroup
	for range min(workers, len(refs)) {
		wg.Go(func() {
			var dec *zstd.Decoder
			var comp, data []byte
			if readData {
				var err error
				if dec, err = zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxMemory(2*engine.MaxChunk)); err != nil {
					for st := range jobs {
						st.err = fmt.Errorf("chunk decoder: %w", err)
					}
					return
				}
				defer dec.Close()
			}
			for st := range jobs {
				if !readData {
					_, err := s.store.Stat(ctx, st.key)
					st.missing = errors.Is(err, blob.ErrNotFound)
					if err != nil && !st.missing {
						st.err = err
					}
					continue
				}
				var err error
				data, err = engine.FetchChunk(ctx, s.store, space, dec, st.ref, &comp, data)
				if ce, ok := errors.AsType[*engine.ChunkError](err); ok {
					st.missing, st.corrupt, err = !ce.Corrupt(), ce.Corrupt(), nil
				}
				if st.err = err; err == nil && !st.missing {
					st.read = int64(len(comp))
				}
			}
		})
	}
	for i := range out {
		if err := ctx.Err(); err != nil {
			for j := i; j < len(out); j++ {
				out[j].err = err
			}
			break
		}
		jobs <- &out[i]
	}
	close(jobs)
	wg.Wait()
	return out
}
