package gameserver

import (
	"context"
	"sync"
	"time"

	"github.com/kilnhq/kiln/internal/quota"
	"github.com/kilnhq/kiln/internal/serverroot"
)

// Disk is a server's disk limit and what its root holds, for the
// operations that write into the root (files, SFTP, snapshot restore):
// they check Free against the bytes they actually write.
type Disk struct {
	LimitBytes int64
	UsedBytes  int64
}

// Free is what may still be written before the limit; never negative.
func (d Disk) Free() int64 { return max(0, d.LimitBytes-d.UsedBytes) }

// Access returns what an operation on server id's files needs: its root;
// with write, also its disk ledger (limit set from disk_mb), and
// ErrInstalling while the installer writes into the root, ErrRestoring
// while a snapshot restore holds it (Hold). A read reads no record: the
// caller checked that the server exists. Errors (serverroot's, with
// write): ErrNotFound, ErrInstalling, ErrRestoring.
//
// The ledger's figure is the last walk of the root plus Kiln's own
// commits since. A figure older than Options.DiskFresh is walked again in
// the background, which also catches what the game server itself wrote;
// the write that finds it stale does not wait for that walk (a world of
// 20,000 files takes tens of ms to walk, and every save in a file manager
// would pay it). Only a server never measured, or whose figure an
// operation of unknown effect made stale (DiskChanged), is walked before
// the write.
func (h *Host) Access(ctx context.Context, id string, write bool) (serverroot.Access, error) {
	return h.access(ctx, id, write, false)
}

// access is Access; holder is a Hold's own access, which its hold lets
// through.
func (h *Host) access(ctx context.Context, id string, write, holder bool) (serverroot.Access, error) {
	a := serverroot.Access{Root: h.node.Root(id), Names: h.opts.TempNames}
	if !write {
		return a, nil
	}
	sv, err := h.records.Server(ctx, id)
	if err != nil {
		return serverroot.Access{}, err
	}
	if sv.Status == StatusInstalling {
		return serverroot.Access{}, serverroot.ErrInstalling
	}
	if !holder && h.liveOf(id).isHeld() {
		return serverroot.Access{}, serverroot.ErrRestoring
	}
	disk := h.liveOf(id).disk
	disk.SetLimit(int64(sv.DiskMB) << 20)
	switch at := disk.Figures().WalkedAt; {
	case at.IsZero():
		if _, err := h.measure(id); err != nil {
			return serverroot.Access{}, err
		}
	case time.Since(at) > h.opts.DiskFresh:
		select {
		case h.remeasure <- id:
		default: // the sampler is behind; its periodic walk catches up
		}
	}
	a.Disk = disk
	return a, nil
}

// Reading marks server id's root as being read whole (a
// snapshot's walk) until the Reader is released: a reinstall is refused
// meanwhile (ErrSnapshotting), as its installer would replace files under
// the walk and the snapshot would hold some of each install. The Reader
// also tells what changed since (Changed): a process started or stopped
// under the walk may have written the world without the save-off the
// reader sent or would have sent, and a batch of files moved into the
// root (a modpack, an extracted archive: quota.Reservation.Batch) may
// have been read in part. Errors (serverroot's): ErrNotFound,
// ErrInstalling (an install or a reinstall is under way: read the root
// once it is done).
func (h *Host) Reading(ctx context.Context, id string) (*Reader, error) {
	sv, err := h.records.Server(ctx, id)
	if err != nil {
		return nil, err
	}
	l := h.liveOf(id)
	l.mu.Lock()
	defer l.mu.Unlock()
	// The record says whether an install runs (it is written installing
	// before an install begins, offline when it ends), and l.reinstalling
	// covers a reinstall begun since it was read. The live status is not
	// asked: it follows the record a moment later, so right after an
	// install ended it still said installing and refused a reading the
	// record allowed (CI saw it).
	if sv.Status == StatusInstalling || l.reinstalling {
		return nil, serverroot.ErrInstalling
	}
	l.readers++
	r := &Reader{l: l, seen: l.changes}
	r.seenBatches, _ = l.disk.Batches()
	return r, nil
}

// Reader is a read of a server's root whole (Reading). Changed, Batching
// and Again are for the goroutine that reads; Release may come from any.
type Reader struct {
	l           *live
	once        sync.Once
	seen        uint64 // l.changes when the reading began, or at the last Again
	seenBatches uint64 // the ledger's batch count then
}

// ReadChange is what changed under a reading (Reader.Changed).
type ReadChange int

const (
	// Unchanged: neither the status nor a batch of files.
	Unchanged ReadChange = iota
	// StatusChanged: a process started, became running, stopped or
	// crashed.
	StatusChanged
	// FilesMoved: a batch of files was moved into the root, or is being
	// moved (a modpack installed, an archive extracted).
	FilesMoved
)

// Release ends the reading; later calls do nothing.
func (r *Reader) Release() {
	r.once.Do(func() {
		r.l.mu.Lock()
		r.l.readers--
		r.l.mu.Unlock()
	})
}

// Changed tells what changed since the reading began or since the last
// Again (a status change when both did).
func (r *Reader) Changed() ReadChange {
	if r.l.changeCount() != r.seen {
		return StatusChanged
	}
	if n, open := r.l.disk.Batches(); n != r.seenBatches || open > 0 {
		return FilesMoved
	}
	return Unchanged
}

// Batching tells whether a batch of files is being moved into the root
// now (a reader waits for its end before it reads again).
func (r *Reader) Batching() bool {
	_, open := r.l.disk.Batches()
	return open > 0
}

// Again makes Changed count from now (a reader that reads the root again
// after a change).
func (r *Reader) Again() {
	r.seen = r.l.changeCount()
	r.seenBatches, _ = r.l.disk.Batches()
}

// Held is a server's root held for one writer (Hold).
type Held struct {
	host *Host
	id   string
	disk *quota.Hold // the root's ledger held: the hold itself (writers with an earlier Access reserve no more)
}

// Hold reserves a server's root for one writer, a snapshot restore: until
// Release, Access for writing answers ErrRestoring to every other caller
// (the files API, SFTP, downloads, installs of mods, the deployments
// executor), and Power's start and restart and Reinstall refuse with it
// too; a stop or a kill goes on (the restore stops the server itself).
// It is held in this process's memory: a restart of Kiln ends it, as it
// ends the restore (whose journal is finished or undone at the next
// start, before any server starts). The root's disk ledger is held too
// (quota.Hold): a writer whose Access came before makes no new
// reservation (files.Writing answers ErrRestoring), the holder reserves
// through Access.Hold. Writers that keep their reservation open (an SFTP
// session's open files) are the caller's to end once the hold is taken.
// Errors (serverroot's): ErrNotFound, ErrInstalling, ErrRestoring (held
// already).
func (h *Host) Hold(ctx context.Context, id string) (*Held, error) {
	sv, err := h.records.Server(ctx, id)
	if err != nil {
		return nil, err
	}
	// Checked and taken in one step with Reinstall's check and mark:
	// either the reinstall refuses (ErrRestoring) or this does.
	l := h.liveOf(id)
	l.mu.Lock()
	if sv.Status == StatusInstalling || l.status == StatusInstalling || l.reinstalling {
		l.mu.Unlock()
		return nil, serverroot.ErrInstalling
	}
	dh, ok := l.disk.Hold()
	l.mu.Unlock()
	if !ok {
		return nil, serverroot.ErrRestoring
	}
	return &Held{host: h, id: id, disk: dh}, nil
}

// Access is Access for writing, for the holder.
func (h *Held) Access(ctx context.Context) (serverroot.Access, error) {
	a, err := h.host.access(ctx, h.id, true, true)
	a.Hold = h.disk
	return a, err
}

// Release ends the hold; later calls do nothing.
func (h *Held) Release() { h.disk.Release() }

// Stop stops the held server for the holder and returns once no process
// of it runs, telling whether it ran or was asked to (a start or restart recorded
// before the hold whose process had not begun): the holder starts it
// again when it is done (Power start, after Release). A start asked for
// before the hold has either launched its process by the time Stop looks
// (power operations are serialised), which it then stops, or is refused
// by the hold when its turn comes (start): until Release, no process of
// the server runs. It returns once the end is recorded (offline), also an
// end it did not cause (a restart's stop just before). A
// crashed server stays crashed. Errors: serverroot.ErrNotFound, the
// records', ctx's.
func (h *Held) Stop(ctx context.Context) (wasRunning bool, err error) {
	l := h.host.liveOf(h.id)
	l.op.Lock()
	inst := l.instance()
	l.op.Unlock()
	running := false
	if inst != nil {
		select {
		case <-inst.Done():
		default:
			running = true
		}
	}
	sv, err := h.host.records.Server(ctx, h.id)
	if err != nil {
		return false, err
	}
	// Asked to run and not running: a start not begun (offline), or a
	// restart between its stop and its start (stopping, its end not yet
	// recorded); a crashed server's restarts are its own.
	wasRunning = running || sv.DesiredState == "running" && (sv.Status == StatusOffline || sv.Status == StatusStopping)
	if running {
		if err := h.host.setDesired(ctx, h.id, "stopped"); err != nil {
			return false, err
		}
		h.host.stop(ctx, h.id, false)
	}
	// The process has ended (stopped here, or by a restart's stop just
	// before); its supervisor records the end (runtime ref cleared, then
	// offline) a moment later: wait for it, so the record says what is.
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		l.mu.Lock()
		st := l.status
		l.mu.Unlock()
		if st == StatusOffline || st == StatusCrashed || st == StatusInstalling {
			break
		}
		select {
		case <-ctx.Done():
			return wasRunning, ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
	return wasRunning, nil
}

// DiskChanged makes the next write measure the root again (after an
// operation whose effect on the size is not known, such as deleting a
// directory).
func (h *Host) DiskChanged(id string) { h.liveOf(id).disk.Stale() }

// measure walks a server's root and records the figure; temporary files
// of writes cut by a crash (older than this host) are removed.
func (h *Host) measure(id string) (int64, error) {
	return h.liveOf(id).disk.Walk(h.node.Root(id), h.started)
}

// DiskUsage measures server id now (a walk of its root; symlinks are
// counted as links, never followed), records the figure as its latest
// disk sample and returns it with the limit. Errors:
// serverroot.ErrNotFound.
func (h *Host) DiskUsage(ctx context.Context, id string) (Disk, error) {
	sv, err := h.records.Server(ctx, id)
	if err != nil {
		return Disk{}, err
	}
	used, err := h.measure(id)
	if err != nil {
		return Disk{}, err
	}
	return Disk{LimitBytes: int64(sv.DiskMB) << 20, UsedBytes: used}, nil
}
