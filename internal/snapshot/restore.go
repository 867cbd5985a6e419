package snapshot

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/kilnhq/kiln/internal/files"
	"github.com/kilnhq/kiln/internal/panics"
	"github.com/kilnhq/kiln/internal/quota"
	"github.com/kilnhq/kiln/internal/servers"
	"github.com/kilnhq/kiln/internal/snapshot/engine"
	"github.com/kilnhq/kiln/internal/snapshot/ignore"
	"github.com/kilnhq/kiln/internal/snapshot/manifest"
	"github.com/kilnhq/kiln/internal/snapshot/restore"
)

// Restore makes the server targetID (the snapshot's source when "") of
// the team equal to the snapshot, in the background: a running server is
// stopped first and started again after; a failure leaves its files as
// they were. It returns the restore's record (pending), which follows it
// (restoring, then done or failed: GetRestore); the outcome is written
// to the server's console too. From the call on, the server is held
// (servers.Hold): its files written by nothing else, its start refused,
// until the files are restored. Errors: ErrNotFound, ErrNotReady,
// ErrBusy, *TakingError (a snapshot of the server is being taken:
// guards.go), servers.ErrNotFound, servers.ErrInstalling,
// servers.ErrRestoring, *DamagedError (its manifest is gone, or it was
// found damaged and still is: integrity.go). A restore that fails
// because the snapshot's storage is damaged marks it so, and moves a
// corrupt chunk aside.
func (s *Service) Restore(ctx context.Context, teamID, id, targetID string) (RestoreRecord, error) {
	return s.RestorePath(ctx, teamID, id, targetID, "")
}

// RestorePath is Restore narrowed to one path of the snapshot and what is
// under it (only: clean and relative, files.Clean's; "" or "." for all):
// that path becomes what the snapshot holds there, the rest of the
// server's files are left as they are. The server is stopped and started
// again as for a whole restore (a running game would save over it).
// Errors: Restore's, and files.ErrNotFound when the snapshot holds
// nothing at only (checked before the server is touched).
func (s *Service) RestorePath(ctx context.Context, teamID, id, targetID, only string) (RestoreRecord, error) {
	snap, read, err := s.openReady(ctx, teamID, id)
	if err != nil {
		return RestoreRecord{}, err
	}
	started := false
	defer func() {
		if !started {
			read.end()
		}
	}()
	if err := s.usable(ctx, snap, only); err != nil {
		return RestoreRecord{}, err
	}
	if only != "" && only != "." {
		// A path the snapshot lacks is refused now, before the server is
		// stopped: OpenExport reads the manifest, checks it and finds the
		// path (one read more than the restore's two; a manifest is ~0.4
		// MB a GiB of world).
		if _, err := engine.OpenExport(ctx, s.store, manifest.Key(snap.UUID), only); err != nil {
			return RestoreRecord{}, fmt.Errorf("restore snapshot %s: %w", id, s.damaged(ctx, snap, err))
		}
	}
	if targetID == "" {
		targetID = snap.SourceServerID
	}
	sv, err := s.servers.Get(ctx, teamID, targetID)
	if err != nil {
		return RestoreRecord{}, err
	}
	if sv.Status == servers.StatusInstalling {
		return RestoreRecord{}, servers.ErrInstalling
	}
	if _, err := s.servers.Access(ctx, teamID, targetID, false); err != nil {
		return RestoreRecord{}, err // another node's server: servers.OtherNodeError
	}
	rctx, run, err := s.beginRestore(s.ctx, sv.ID)
	if err != nil {
		return RestoreRecord{}, err
	}
	// Held from now (not from when the goroutine runs): a start or a
	// write sent right after the 202 is refused, not raced.
	held, err := s.servers.Hold(ctx, teamID, sv.ID)
	if err != nil {
		s.endRestore(sv.ID, run)
		return RestoreRecord{}, err
	}
	// Recorded before it is acknowledged: a client polls the record from
	// the answer on.
	rec, err := s.recordRestore(ctx, teamID, snap.ID, sv.ID, only)
	if err != nil {
		held.Release()
		s.endRestore(sv.ID, run)
		return RestoreRecord{}, err
	}
	run.record = rec.ID
	started = s.goTracked(func() {
		defer read.end()
		defer s.endRestore(sv.ID, run)
		err := panics.Catch(func() error { return s.restore(rctx, snap, sv, held, only, run) })
		if err != nil {
			s.log.Warn("restore failed", "snapshot_id", snap.ID, "server_id", sv.ID, "restore_id", rec.ID, "err", err)
		}
		s.restoreEnded(rec.ID, run, err)
	})
	if !started {
		held.Release()
		s.endRestore(sv.ID, run)
		s.restoreEnded(rec.ID, run, ErrStopping)
		return RestoreRecord{}, ErrStopping
	}
	return rec, nil
}

// RestoreNow is Restore waiting for the end (the deployments executor).
func (s *Service) RestoreNow(ctx context.Context, teamID, id, targetID string) error {
	snap, read, err := s.openReady(ctx, teamID, id)
	if err != nil {
		return err
	}
	defer read.end()
	if err := s.usable(ctx, snap, ""); err != nil {
		return err
	}
	sv, err := s.servers.Get(ctx, teamID, targetID)
	if err != nil {
		return err
	}
	rctx, run, err := s.beginRestore(ctx, sv.ID)
	if err != nil {
		return err
	}
	defer s.endRestore(sv.ID, run)
	held, err := s.servers.Hold(ctx, teamID, sv.ID)
	if err != nil {
		return err
	}
	return s.restore(rctx, snap, sv, held, "", run)
}

// restore runs a restore registered by beginRestore (ctx is its own),
// with the server held (servers.Hold: no write but the restore's, no
// start): it releases the hold before it starts the server again.
func (s *Service) restore(ctx context.Context, snap Snapshot, sv servers.Server, held *servers.Held, only string, run *restoreRun) (err error) {
	defer held.Release()
	if run.record != "" {
		s.restoreStarted(run.record)
		stop := make(chan struct{})
		defer close(stop)
		go s.flushProgress(run.record, run, time.Second, stop)
	}
	what := "snapshot " + snap.ID
	if only != "" && only != "." {
		what = "/" + only + " of " + what
	}
	s.servers.Note(sv.ID, fmt.Sprintf("restoring %s (%s)", what, snap.Name))
	defer func() {
		if errors.Is(context.Cause(ctx), ErrServerDeleted) {
			// Whatever failed, it failed because the server went: say
			// so, and write nothing to the console of a server gone.
			if err != nil {
				err = fmt.Errorf("restore %s into %s: %w", snap.ID, sv.ID, ErrServerDeleted)
			}
			return
		}
		if err != nil {
			s.servers.Note(sv.ID, fmt.Sprintf("the restore of %s failed; the files are as they were: %s", what, told(err)))
		} else {
			s.servers.Note(sv.ID, fmt.Sprintf("%s restored", what))
		}
	}()
	wasRunning, err := held.Stop(ctx)
	if err != nil {
		return fmt.Errorf("stop the server: %w", err)
	}
	// However the restore ends from here (done, refused, failed), a
	// server it stopped is started again once the hold is released.
	defer func() {
		held.Release()
		if wasRunning && !errors.Is(context.Cause(ctx), ErrServerDeleted) {
			if err := s.servers.Power(context.WithoutCancel(ctx), sv.TeamID, sv.ID, "start"); err != nil {
				s.log.Warn("start the server again after a restore", "server_id", sv.ID, "err", err)
			}
		}
	}()
	m, err := ignore.Parse(snap.Ignore)
	if err != nil {
		return err
	}
	a, err := held.Access(ctx)
	if err != nil {
		return err
	}
	if err := s.drainWriters(ctx, sv.ID, a.Disk); err != nil {
		return err
	}
	rerr := files.Writing(a, func(r *files.Root, res *quota.Reservation) error {
		_, err := restore.Run(ctx, r, res, s.store, manifest.Key(snap.UUID), restore.Options{Ignore: m.Match, Only: only,
			Progress: func(done, total int64) { run.done.Store(done); run.total.Store(total) }})
		return err
	})
	if a.Disk != nil {
		a.Disk.Stale() // the restore replaced the tree: measure it again
	}
	if rerr != nil {
		return fmt.Errorf("restore %s into %s: %w", snap.ID, sv.ID, s.damaged(ctx, snap, rerr))
	}
	if only == "" || only == "." {
		s.clearDamage(context.WithoutCancel(ctx), snap.UUID) // every chunk was read and checked
	}
	return nil
}

// drainWriters waits, up to WriterWait, until no writer holds a
// reservation on the server's disk ledger: the writes that got their
// access before the hold (an upload, a download, a mod install) end
// before the restore replaces the files, so none of them lands in the
// tree the swap discards after it was acknowledged. Every writer into a
// root reserves from the ledger (internal/quota), so its count of
// reservations in flight is the count of writers; the hold refuses new
// ones. Errors: ErrWritersBusy, wrapped, when they do not end in time.
func (s *Service) drainWriters(ctx context.Context, serverID string, disk *quota.Account) error {
	if disk == nil {
		return nil
	}
	deadline := time.Now().Add(s.opts.WriterWait)
	noted := false
	for {
		f := disk.Figures()
		if f.Writers == 0 {
			return nil
		}
		if !noted {
			s.servers.Note(serverID, fmt.Sprintf("the restore waits for %d write(s) in progress to end", f.Writers))
			noted = true
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: %d still in progress after %s (uploads, downloads or installs into the server); nothing was restored",
				ErrWritersBusy, f.Writers, s.opts.WriterWait)
		}
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// openReady returns one of the team's ready snapshots registered as read
// by the caller (a restore), which must end the reader: a delete from now
// on leaves the storage until it does (reads.go). Errors: ErrNotFound,
// ErrNotReady, the database's.
func (s *Service) openReady(ctx context.Context, teamID, id string) (Snapshot, *reader, error) {
	snap, err := s.Get(ctx, teamID, id)
	if err != nil {
		return Snapshot{}, nil, err
	}
	if snap.Status != StatusReady {
		return Snapshot{}, nil, ErrNotReady
	}
	read, err := s.beginRead(ctx, snap.UUID)
	if err != nil {
		return Snapshot{}, nil, err
	}
	return snap, read, nil
}
