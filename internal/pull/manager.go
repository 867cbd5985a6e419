package pull

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/kilnhq/kiln/internal/files"
	"github.com/kilnhq/kiln/internal/ids"
)

// IDPrefix starts every download id: "dl_…".
const IDPrefix = "dl"

// interrupted is the error of a download that kiln serve stopped, or that
// a previous process left behind.
const interrupted = "interrupted: kiln serve stopped during the download"

// Start records a download of rawURL into directory/filename of one of the
// team's servers and starts it in the background; the record is in the
// database (queued) when Start returns. directory is server-relative
// ("" or "/" is the root; missing directories are created); filename must
// be a plain name and defaults to the last segment of the URL's path.
//
// Errors: *validate.Error (fields "url", "directory", "filename"),
// serverroot.ErrNotFound, serverroot.ErrInstalling, ErrTooMany, ErrClosed.
// Whether the address may be reached is decided when connecting; a refused
// one makes the download fail, it is not an error of Start.
func (m *Manager) Start(ctx context.Context, teamID, serverID, rawURL, directory, filename string) (Download, error) {
	return m.start(ctx, teamID, serverID, rawURL, directory, filename, Checksum{})
}

// start is Start, and StartVerified with a checksum (verify.go).
func (m *Manager) start(ctx context.Context, teamID, serverID, rawURL, directory, filename string, sum Checksum) (Download, error) {
	req, err := parseRequest(rawURL, directory, filename)
	if err != nil {
		return Download{}, err
	}
	req.sum = sum
	if _, err := m.servers.Access(ctx, teamID, serverID, true); err != nil {
		return Download{}, err
	}
	if err := m.ready(ctx); err != nil {
		return Download{}, err
	}
	now := m.now()
	d := Download{
		ID: ids.New(IDPrefix), TeamID: teamID, ServerID: serverID, URL: rawURL,
		Directory: req.directory, Filename: req.filename, Status: StatusQueued,
		CreatedAt: now, UpdatedAt: now,
	}
	t := m.newTransfer(d, req)
	// Registered before the row exists, so that no active row of this
	// process is ever unknown to Cancel, and counted in wg so that Run
	// waits for it.
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		t.cancel(errShutdown)
		return Download{}, ErrClosed
	}
	m.active[d.ID] = t
	m.wg.Add(1)
	m.mu.Unlock()
	if err := m.insert(ctx, d); err != nil {
		m.mu.Lock()
		delete(m.active, d.ID)
		m.mu.Unlock()
		t.cancel(errShutdown)
		m.wg.Done()
		return Download{}, err
	}
	go m.run(t)
	return d, nil
}

// List returns the server's queued and running downloads and those that
// finished within ListWindow, newest first, at most MaxList. Downloads
// this process is running show their live byte count.
//
// Errors: serverroot.ErrNotFound.
func (m *Manager) List(ctx context.Context, teamID, serverID string) ([]Download, error) {
	if _, err := m.servers.Access(ctx, teamID, serverID, false); err != nil {
		return nil, err
	}
	out, err := m.list(ctx, teamID, serverID, m.opts.Now().Add(-ListWindow).UnixMilli())
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for i := range out {
		m.overlay(&out[i])
	}
	return out, nil
}

// overlay puts the live figures of this process's transfer into d, which
// the database has only as of the last progress write. Call with m.mu.
func (m *Manager) overlay(d *Download) {
	if t := m.active[d.ID]; t != nil && d.Status.Active() {
		d.Size = max(d.Size, t.size.Load())
		d.Written = max(d.Written, t.written.Load())
		// The row may have been read just before the transfer marked it
		// running: live bytes with a "queued" status would contradict
		// each other.
		if d.Status == StatusQueued && t.running.Load() {
			d.Status = StatusRunning
		}
	}
}

// Get returns one download of the team's server, with live figures when
// this process runs it.
//
// Errors: serverroot.ErrNotFound, ErrNotFound.
func (m *Manager) Get(ctx context.Context, teamID, serverID, id string) (Download, error) {
	if _, err := m.servers.Access(ctx, teamID, serverID, false); err != nil {
		return Download{}, err
	}
	d, err := m.get(ctx, teamID, serverID, id)
	if err != nil {
		return Download{}, err
	}
	m.mu.Lock()
	m.overlay(&d)
	m.mu.Unlock()
	return d, nil
}

// Cancel stops an active download: the transfer ends, its partial file is
// removed and its status is canceled in the database before Cancel
// returns. It returns the download as it then is. A download that had
// already finished (done, failed or canceled, including one that finished
// while Cancel ran) is left as it is and returned without an error: Cancel
// never removes a completed file.
//
// Errors: serverroot.ErrNotFound, ErrNotFound (no such download on that
// server of that team), ErrClosed.
func (m *Manager) Cancel(ctx context.Context, teamID, serverID, id string) (Download, error) {
	if _, err := m.servers.Access(ctx, teamID, serverID, false); err != nil {
		return Download{}, err
	}
	if err := m.ready(ctx); err != nil && !errors.Is(err, ErrClosed) {
		return Download{}, err
	}
	d, err := m.get(ctx, teamID, serverID, id)
	if err != nil || !d.Status.Active() {
		return d, err
	}
	m.mu.Lock()
	t := m.active[id]
	m.mu.Unlock()
	if t != nil {
		t.cancel(errCanceled)
		select {
		case <-t.done:
		case <-ctx.Done():
			return Download{}, ctx.Err()
		}
	} else {
		// Not this process's (another replica's): record the cancel; its
		// owner sees it at its next progress write and stops. Remove the
		// partial file too in case that owner is gone.
		if err := m.finish(ctx, id, StatusCanceled, d.Size, d.Written, ""); err != nil {
			return Download{}, err
		}
		m.removePartial(ctx, d)
	}
	return m.get(ctx, teamID, serverID, id)
}

// Run recovers the downloads a previous process left queued or running
// (marked failed, "interrupted: …", partial files removed), deletes old
// records, closes Recovered, then prunes again every PruneInterval until
// ctx ends. Then it stops every
// transfer of this process the same way (failed as interrupted, partial
// files removed), waits for them and returns. Call it once; it returns an
// error only when recovery failed, after which Start answers ErrClosed.
func (m *Manager) Run(ctx context.Context) error {
	err := m.recover(ctx)
	if err != nil {
		m.mu.Lock()
		m.closed = true
		m.mu.Unlock()
	} else {
		m.pruneOld(ctx)
	}
	m.recoverErr = err
	close(m.recovered)
	if err != nil {
		return fmt.Errorf("recover downloads: %w", err)
	}
	tick := time.NewTicker(m.opts.PruneInterval)
	defer tick.Stop()
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case <-tick.C:
			m.pruneOld(ctx)
		}
	}
	m.mu.Lock()
	m.closed = true
	m.mu.Unlock()
	m.baseCancel(errShutdown)
	m.wg.Wait()
	m.client.CloseIdleConnections()
	return nil
}

// recover fails every download left active by a previous process and
// removes its partial file. The file goes first: a crash in between is
// then repaired by the next start.
func (m *Manager) recover(ctx context.Context) error {
	left, err := m.leftovers(ctx)
	if err != nil {
		return err
	}
	for _, d := range left {
		m.removePartial(ctx, d)
		if err := m.finish(ctx, d.ID, StatusFailed, d.Size, d.Written, interrupted); err != nil {
			return err
		}
		m.log.InfoContext(ctx, "download interrupted by a restart", "download_id", d.ID, "server_id", d.ServerID)
	}
	return nil
}

// removePartial removes d's temporary file, if any; failures are logged
// (the file is then an ordinary file the user can see and delete).
func (m *Manager) removePartial(ctx context.Context, d Download) {
	dir, err := files.Clean("directory", d.Directory)
	if err != nil {
		m.log.WarnContext(ctx, "stored download directory is invalid", "download_id", d.ID, "err", err)
		return
	}
	acc, err := m.servers.Access(ctx, d.TeamID, d.ServerID, false)
	if err != nil {
		return // the server is gone, and its root with it
	}
	root, err := files.Open(acc.Root)
	if err != nil {
		if !errors.Is(err, files.ErrNotFound) {
			m.log.WarnContext(ctx, "remove partial download", "download_id", d.ID, "server_id", d.ServerID, "err", err)
		}
		return
	}
	defer root.Close()
	if err := root.RemoveTemp(dir, d.ID, acc.Names); err != nil && !errors.Is(err, files.ErrNotFound) && !errors.Is(err, files.ErrNotDirectory) {
		m.log.WarnContext(ctx, "remove partial download", "download_id", d.ID, "server_id", d.ServerID, "err", err)
	}
}

// pruneOld deletes records that finished more than Retention ago.
func (m *Manager) pruneOld(ctx context.Context) {
	n, err := m.prune(ctx, m.opts.Now().Add(-m.opts.Retention).UnixMilli())
	if err != nil {
		if ctx.Err() == nil {
			m.log.WarnContext(ctx, "prune downloads", "err", err)
		}
		return
	}
	if n > 0 {
		m.log.DebugContext(ctx, "pruned finished downloads", "count", n)
	}
}

// InFlight is how many downloads this process has queued or running (for
// a metrics gauge).
func (m *Manager) InFlight() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.active)
}

// CancelServer stops every download this process has queued or running
// into one server and waits for them, as Cancel does for one: call it
// before deleting the server, so that nothing is still writing into its
// root. Their rows become canceled (and go with the server's row: the
// table cascades). Errors: the context's.
func (m *Manager) CancelServer(ctx context.Context, serverID string) error {
	m.mu.Lock()
	var ts []*transfer
	for _, t := range m.active {
		if t.d.ServerID == serverID {
			ts = append(ts, t)
		}
	}
	m.mu.Unlock()
	for _, t := range ts {
		t.cancel(errCanceled)
	}
	for _, t := range ts {
		select {
		case <-t.done:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}
