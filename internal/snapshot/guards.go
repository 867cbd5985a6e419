package snapshot

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/kilnhq/kiln/internal/servers"
)

// What may run at once on one server, and what is refused, decided here
// in one place (doc.go says why each):
//
//   - A snapshot being taken (beginTake) and a restore into the server
//     (beginRestore) never overlap: a restore asked for meanwhile is
//     refused (*TakingError); a snapshot whose turn comes during a restore
//     waits for it.
//   - One restore per server (ErrBusy).
//   - While a snapshot walks a server's root it reads it through
//     servers.Reading: a reinstall is refused (servers.ErrSnapshotting),
//     and a snapshot whose walk would begin during an install fails
//     (servers.ErrInstalling). A start, stop or crash of the server is
//     not refused: the walk under it is done again (walk).
//   - A delete of the server (ServerDeleting, until DeleteEnded) is
//     refused while a snapshot of it is pending or creating
//     (*TakingError); once it begins, a restore into the server is
//     cancelled and waited for, new restores are refused and snapshots of
//     it not yet walking fail (ErrSourceDeleted).
//
// All of it is this process's: a server's snapshots and restores run on
// its node, and one process holds a node.

// TakingError refuses the delete of a server a snapshot is being taken
// of (pending or creating), or a restore into it (creating): its files
// would go or change under the walk, and the snapshot — perhaps the one
// a user took to delete the server safely — would end ready with part of
// them.
type TakingError struct{ SnapshotID string }

func (e *TakingError) Error() string {
	return fmt.Sprintf("snapshot %s of this server is being taken; try again once it is ready or failed", e.SnapshotID)
}

// beginTake registers snapshot snap as being taken of its server, so no
// restore begins into the server until done is called (once or more;
// beginRestore answers *TakingError): a restore swapping the tree under the walk would
// leave a ready snapshot holding part of each tree. A restore already
// running is waited for first, so the snapshot holds the restored files.
// Errors: ErrSourceDeleted (the server is being deleted), ctx's.
func (s *Service) beginTake(ctx context.Context, snap Snapshot) (done func(), err error) {
	id := snap.SourceServerID
	waited := false
	for {
		s.mu.Lock()
		if s.deleted[id] {
			s.mu.Unlock()
			return nil, ErrSourceDeleted // its files are going (ServerDeleting)
		}
		run := s.restoring[id]
		if run == nil {
			if s.taking[id] == nil {
				s.taking[id] = map[string]struct{}{}
			}
			s.taking[id][snap.ID] = struct{}{}
			s.mu.Unlock()
			var once sync.Once
			return func() {
				once.Do(func() {
					s.mu.Lock()
					delete(s.taking[id], snap.ID)
					if len(s.taking[id]) == 0 {
						delete(s.taking, id)
					}
					s.mu.Unlock()
				})
			}, nil
		}
		s.mu.Unlock()
		if !waited {
			// Said once: the snapshot is creating and reads nothing yet.
			s.servers.Note(id, fmt.Sprintf("snapshot %s waits for the restore into this server to end", snap.ID))
			waited = true
		}
		select {
		case <-run.ended:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// restoreRun is a restore running here: ServerDeleting stops it and waits
// for done.
type restoreRun struct {
	cancel context.CancelCauseFunc
	ended  chan struct{}
	record string // its restore record's id ("" for none: RestoreNow)
	// The bytes written and the snapshot's total, set by the restore's
	// Progress callback (which must not block), read by withProgress and
	// flushed to the record now and then (flushProgress).
	done, total atomic.Int64
}

// beginRestore registers a restore into server id: ErrBusy while another
// runs, *TakingError while a snapshot of it is being taken here
// (beginTake), servers.ErrNotFound once the server was deleted (or is
// being deleted: its files are about to go). The returned context ends with
// the cause ErrServerDeleted when the server is deleted.
func (s *Service) beginRestore(parent context.Context, id string) (context.Context, *restoreRun, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.deleted[id] {
		return nil, nil, servers.ErrNotFound
	}
	if s.restoring[id] != nil {
		return nil, nil, ErrBusy
	}
	if taking := s.taking[id]; len(taking) > 0 {
		return nil, nil, &TakingError{SnapshotID: slices.Sorted(maps.Keys(taking))[0]}
	}
	ctx, cancel := context.WithCancelCause(parent)
	run := &restoreRun{cancel: cancel, ended: make(chan struct{})}
	s.restoring[id] = run
	return ctx, run, nil
}

// endRestore ends what beginRestore registered.
func (s *Service) endRestore(id string, run *restoreRun) {
	s.mu.Lock()
	delete(s.restoring, id)
	s.mu.Unlock()
	run.cancel(nil)
	close(run.ended)
}

// ServerDeleting is what the servers service runs before it deletes
// server id (servers.OnDelete, the first hook: it may refuse, and then
// nothing else was ended). A snapshot of the server being taken (pending
// or creating) refuses the delete (*TakingError). Otherwise the restore
// writing into the server, if any, is stopped and waited for, and from
// then on restores into it are refused and snapshots of it not yet
// started fail (ErrSourceDeleted), so nothing reads or writes a root
// being removed: a restore before its commit point removes its staging
// directory and fails with ErrServerDeleted; one past it finishes its
// swap (a few renames) first. A delete that fails after this and leaves
// the server undoes the refusals (DeleteEnded). Errors: *TakingError,
// the database's, ctx's if it ends first.
//
// The mark is set before the snapshots are looked up, and a snapshot
// checks it (take) only after its record was written: either the lookup
// sees the record, or the snapshot sees the mark.
func (s *Service) ServerDeleting(ctx context.Context, id string) error {
	s.mu.Lock()
	s.deleted[id] = true
	s.mu.Unlock()
	var taking string
	err := s.db.Read().QueryRowContext(ctx, `SELECT id FROM snapshots WHERE source_server_id = $1 AND status IN ($2, $3)
		ORDER BY created_at LIMIT 1`, id, StatusPending, StatusCreating).Scan(&taking)
	switch {
	case err == nil:
		return &TakingError{SnapshotID: taking}
	case !errors.Is(err, sql.ErrNoRows):
		return fmt.Errorf("look up the server's snapshots being taken: %w", err)
	}
	s.mu.Lock()
	run := s.restoring[id]
	s.mu.Unlock()
	if run == nil {
		return nil
	}
	run.cancel(ErrServerDeleted)
	select {
	case <-run.ended:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// DeleteEnded drops ServerDeleting's mark when the server's delete ends
// (servers.OnDeleteEnded). If it failed and the server stays, restores
// into it are accepted again; if its row is gone, a restore that begins
// finds no server to hold (servers.Hold answers ErrNotFound), so the mark
// would only be memory kept for the process's life.
func (s *Service) DeleteEnded(id string) {
	s.mu.Lock()
	delete(s.deleted, id)
	s.mu.Unlock()
}

// ErrStopping: the service is stopping (Close waits for its work), and
// takes no new work.
var ErrStopping = errors.New("the service is stopping; try again once Kiln is back")

// goTracked runs fn on a goroutine Close waits for, unless Close waits
// already (then false, and fn is not run: what it would do is left to
// the next start). Requests start background work at any time, and a
// sync.WaitGroup's Add from zero must come before its Wait.
func (s *Service) goTracked(fn func()) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.wg.Go(fn)
	return true
}
