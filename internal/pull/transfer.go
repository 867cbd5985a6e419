package pull

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/kilnhq/kiln/internal/files"
	"github.com/kilnhq/kiln/internal/netguard"
	"github.com/kilnhq/kiln/internal/panics"
	"github.com/kilnhq/kiln/internal/quota"
	"github.com/kilnhq/kiln/internal/serverroot"
)

// Causes of a transfer's context ending.
var (
	errCanceled      = errors.New("canceled")
	errShutdown      = errors.New("kiln serve is stopping")
	errHeaderTimeout = errors.New("response header timeout")
	errIdleTimeout   = errors.New("idle timeout")
	errTotalTimeout  = errors.New("total timeout")
	errTooSlow       = errors.New("below the minimum rate")
)

// failure is a download failure whose sentence is already written.
type failure struct{ msg string }

func (f *failure) Error() string { return f.msg }

func failf(format string, args ...any) error { return &failure{msg: fmt.Sprintf(format, args...)} }

// transfer is one download this process runs.
type transfer struct {
	d      Download
	req    request
	ctx    context.Context // canceled by Cancel (errCanceled) or Run (errShutdown)
	cancel context.CancelCauseFunc
	done   chan struct{} // closed once the final status is stored

	size    atomic.Int64 // Content-Length, once known
	written atomic.Int64 // bytes received
	running atomic.Bool  // the row says running (set once setRunning succeeded)

	// Owned by the transfer's goroutine (the flusher reads only the
	// atomics above).
	readErr error // the upstream's read error, if any
}

func (m *Manager) newTransfer(d Download, req request) *transfer {
	ctx, cancel := context.WithCancelCause(m.base)
	return &transfer{d: d, req: req, ctx: ctx, cancel: cancel, done: make(chan struct{})}
}

// run owns one transfer from queued to its final status.
func (m *Manager) run(t *transfer) {
	defer m.wg.Done()
	log := m.log.With("download_id", t.d.ID, "server_id", t.d.ServerID)
	st, msg := m.execute(t, log)
	written := t.written.Load()
	size := t.size.Load()
	if st == StatusDone {
		size = written
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(t.ctx), 30*time.Second)
	if err := m.finish(ctx, t.d.ID, st, size, written, msg); err != nil {
		log.ErrorContext(ctx, "record download outcome", "status", string(st), "err", err)
	}
	cancel()
	switch st {
	case StatusDone:
		log.InfoContext(ctx, "download done", "bytes", written)
	case StatusFailed:
		log.InfoContext(ctx, "download failed", "reason", msg)
	case StatusCanceled:
		log.InfoContext(ctx, "download canceled")
	}
	m.mu.Lock()
	delete(m.active, t.d.ID)
	m.mu.Unlock()
	t.cancel(nil)
	close(t.done)
}

// execute waits for a slot, runs the transfer and says how it ended.
func (m *Manager) execute(t *transfer, log *slog.Logger) (Status, string) {
	// The team's slot first: a team's queued downloads wait for the
	// team's own running ones, never holding a slot of the node.
	team := m.teamSlot(t.d.TeamID)
	select {
	case team <- struct{}{}:
		defer func() { <-team }()
	case <-t.ctx.Done():
		return m.outcome(t.ctx, t, context.Cause(t.ctx), log)
	}
	select {
	case m.slots <- struct{}{}:
		defer func() { <-m.slots }()
	case <-t.ctx.Done():
		return m.outcome(t.ctx, t, context.Cause(t.ctx), log)
	}
	ok, err := m.setRunning(t.ctx, t.d.ID)
	switch {
	case err != nil:
		return m.outcome(t.ctx, t, err, log)
	case !ok: // canceled by another process meanwhile
		return StatusCanceled, ""
	}
	t.running.Store(true)
	ctx, stop := context.WithTimeoutCause(t.ctx, m.opts.TotalTimeout, errTotalTimeout)
	defer stop()
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	// A panic fails this download (logged with its stack by outcome),
	// never the process.
	err = panics.Catch(func() error { return m.fetch(ctx, cancel, t) })
	return m.outcome(ctx, t, err, log)
}

// teamSlot is the semaphore of a team's running downloads.
func (m *Manager) teamSlot(teamID string) chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	c := m.teamSlots[teamID]
	if c == nil {
		c = make(chan struct{}, m.opts.MaxRunningPerTeam)
		m.teamSlots[teamID] = c
	}
	return c
}

// rateGuard fails t (errTooSlow) when it received fewer than MinRate bytes
// a second over the last MinRateWindow; it checks every tenth of the
// window until stop is called.
func (m *Manager) rateGuard(cancel context.CancelCauseFunc, t *transfer) (stop func()) {
	quit, done := make(chan struct{}), make(chan struct{})
	window := m.opts.MinRateWindow
	need := int64(float64(m.opts.MinRate) * window.Seconds())
	go func() {
		defer close(done)
		type mark struct {
			at time.Time
			n  int64
		}
		start := time.Now()
		marks := []mark{{start, t.written.Load()}}
		tick := time.NewTicker(window / 10)
		defer tick.Stop()
		for {
			select {
			case <-quit:
				return
			case now := <-tick.C:
				n := t.written.Load()
				marks = append(marks, mark{now, n})
				// The oldest mark at least a window old is the base.
				i := 0
				for i+1 < len(marks) && now.Sub(marks[i+1].at) >= window {
					i++
				}
				marks = marks[i:]
				if now.Sub(marks[0].at) >= window && n-marks[0].n < need {
					cancel(errTooSlow)
					return
				}
			}
		}
	}()
	return func() {
		close(quit)
		<-done
	}
}

// fetch requests the URL and writes the body into the server's root
// through the temporary file of the download's id.
func (m *Manager) fetch(ctx context.Context, cancel context.CancelCauseFunc, t *transfer) error {
	acc, err := m.servers.Access(ctx, t.d.TeamID, t.d.ServerID, true)
	if err != nil {
		return err
	}
	// The body is written through the server's disk ledger, shared with
	// every other writer into the root (files.Writing).
	return files.Writing(acc, func(root *files.Root, res *quota.Reservation) error {
		return m.fetchInto(ctx, cancel, t, root, res)
	})
}

func (m *Manager) fetchInto(ctx context.Context, cancel context.CancelCauseFunc, t *transfer, root *files.Root, res *quota.Reservation) error {
	var credit int64 // the cost of the file being replaced
	if e, err := root.Stat(t.req.rel); err == nil && e.IsFile() {
		credit = quota.Cost(e.Size)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, t.req.url.String(), nil)
	if err != nil {
		return failf("the url cannot be requested: %v", err)
	}
	req.Header.Set("User-Agent", m.opts.UserAgent)
	headers := time.AfterFunc(m.opts.HeaderTimeout, func() { cancel(errHeaderTimeout) })
	resp, err := m.client.Do(req)
	headers.Stop()
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return failf("the server answered HTTP %s", statusLine(resp))
	}
	if n := resp.ContentLength; n >= 0 {
		t.size.Store(n)
		if err := m.flush(ctx, cancel, t); err != nil {
			return err
		}
		// Refusing early on a claimed size is safe; allowing never is:
		// the limit is enforced on the bytes written below.
		if avail := res.Free() + credit; quota.Cost(n) > avail {
			return failf("the file (%d bytes) is larger than the server's free disk space (%d bytes)", n, max(0, avail))
		}
	}
	stopFlusher := m.flusher(ctx, cancel, t)
	defer stopFlusher()
	stopGuard := m.rateGuard(cancel, t)
	defer stopGuard()
	idle := time.AfterFunc(m.opts.IdleTimeout, func() { cancel(errIdleTimeout) })
	defer idle.Stop()
	body := &body{m: m, t: t, r: resp.Body, idle: idle}
	e, err := root.WriteFileTemp(t.req.rel, t.d.ID, newVerifying(body, t.req.sum), res)
	if err != nil {
		// WriteFileTemp removed its temporary file; make sure.
		if rerr := root.RemoveTemp(t.req.dir, t.d.ID, res.Names()); rerr != nil && !errors.Is(rerr, files.ErrNotFound) && !errors.Is(rerr, files.ErrNotDirectory) {
			m.log.WarnContext(ctx, "remove partial download", "download_id", t.d.ID, "err", rerr)
		}
		return err
	}
	t.written.Store(e.Size)
	return nil
}

// statusLine is "404 Not Found": the code and its standard text, not the
// upstream's reason phrase, so that the upstream cannot write the sentence
// the user reads.
func statusLine(resp *http.Response) string {
	if text := http.StatusText(resp.StatusCode); text != "" {
		return fmt.Sprintf("%d %s", resp.StatusCode, text)
	}
	return fmt.Sprint(resp.StatusCode)
}

// body counts what the upstream sends and re-arms the idle timer (the
// write it feeds takes the bytes from the disk ledger). It never waits on
// the database.
type body struct {
	m    *Manager
	t    *transfer
	r    io.Reader
	idle *time.Timer
}

func (b *body) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if n > 0 {
		b.idle.Reset(b.m.opts.IdleTimeout)
		b.t.written.Add(int64(n))
	}
	if err != nil && err != io.EOF {
		b.t.readErr = err
	}
	return n, err
}

// flusher writes t's progress every ProgressInterval until the returned
// function is called (which waits for it). The write doubles as a check
// that the row is still running: another process's Cancel stops the
// transfer within an interval even while the upstream sends nothing.
func (m *Manager) flusher(ctx context.Context, cancel context.CancelCauseFunc, t *transfer) (stop func()) {
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(m.opts.ProgressInterval)
		defer tick.Stop()
		for {
			select {
			case <-quit:
				return
			case <-ctx.Done():
				return
			case <-tick.C:
				if m.flush(ctx, cancel, t) != nil {
					return
				}
			}
		}
	}()
	return func() {
		close(quit)
		<-done
	}
}

// flush writes size and written to the database. A row no longer running
// was canceled by another process: the transfer stops (errCanceled).
func (m *Manager) flush(ctx context.Context, cancel context.CancelCauseFunc, t *transfer) error {
	ok, err := m.setProgress(ctx, t.d.ID, t.size.Load(), t.written.Load())
	if err != nil {
		if ctx.Err() == nil {
			m.log.WarnContext(ctx, "record download progress", "download_id", t.d.ID, "err", err)
		}
		return nil // progress is advisory; the final status is what counts
	}
	if !ok {
		cancel(errCanceled)
		return errCanceled
	}
	return nil
}

// outcome turns how a transfer ended into its final status and, for a
// failure, the sentence the user reads. Details the user must not see
// (host paths, SQL) are logged instead.
func (m *Manager) outcome(ctx context.Context, t *transfer, err error, log *slog.Logger) (Status, string) {
	if err == nil {
		return StatusDone, ""
	}
	if ctx.Err() != nil {
		switch cause := context.Cause(ctx); {
		case errors.Is(cause, errCanceled):
			return StatusCanceled, ""
		case errors.Is(cause, errShutdown):
			return StatusFailed, interrupted
		case errors.Is(cause, errHeaderTimeout):
			return StatusFailed, "no response from the server within " + human(m.opts.HeaderTimeout)
		case errors.Is(cause, errIdleTimeout):
			return StatusFailed, "no data received for " + human(m.opts.IdleTimeout)
		case errors.Is(cause, errTotalTimeout):
			return StatusFailed, "the download took longer than " + human(m.opts.TotalTimeout)
		case errors.Is(cause, errTooSlow):
			return StatusFailed, fmt.Sprintf("the server sent less than %d bytes a second for %s", m.opts.MinRate, human(m.opts.MinRateWindow))
		}
	}
	if f, ok := errors.AsType[*failure](err); ok {
		return StatusFailed, f.msg
	}
	if be, ok := errors.AsType[*netguard.BlockedError](err); ok {
		return StatusFailed, blockedSentence(be)
	}
	switch {
	case errors.Is(err, files.ErrQuota):
		return StatusFailed, fmt.Sprintf("the server's disk limit would be exceeded: stopped after %d bytes", t.written.Load())
	case errors.Is(err, netguard.ErrTooManyRedirects):
		return StatusFailed, fmt.Sprintf("the server redirected more than %d times", netguard.MaxRedirects)
	case errors.Is(err, netguard.ErrUnsupportedScheme):
		return StatusFailed, "the server redirected to a URL that is not http or https"
	case errors.Is(err, serverroot.ErrNotFound):
		return StatusFailed, "the server was deleted"
	case errors.Is(err, serverroot.ErrInstalling):
		return StatusFailed, "the server is being installed"
	case errors.Is(err, serverroot.ErrRestoring):
		return StatusFailed, "a snapshot is being restored into the server"
	case errors.Is(err, files.ErrNotDirectory):
		return StatusFailed, fmt.Sprintf("%s cannot be created: part of it is not a directory", t.d.Directory)
	case errors.Is(err, files.ErrNotFile):
		return StatusFailed, fmt.Sprintf("%s is a directory", t.d.File())
	case errors.Is(err, files.ErrNotFound):
		return StatusFailed, fmt.Sprintf("%s cannot be written: it leads outside the server's files", t.d.File())
	}
	if t.readErr != nil {
		return StatusFailed, fmt.Sprintf("the transfer broke off after %d bytes: %v", t.written.Load(), t.readErr)
	}
	if ue, ok := errors.AsType[*url.Error](err); ok {
		return StatusFailed, fmt.Sprintf("the request failed: %v", ue.Err)
	}
	if pe, ok := errors.AsType[*panics.Error](err); ok {
		log.ErrorContext(ctx, "download failed", "err", err, "stack", string(pe.Stack))
	} else {
		log.ErrorContext(ctx, "download failed", "err", err)
	}
	return StatusFailed, "the download failed because of an internal error"
}

// blockedSentence explains a refused address with netguard's reason.
func blockedSentence(be *netguard.BlockedError) string {
	switch {
	case !be.Addr.IsValid():
		return "the connection was refused: " + be.Reason
	case be.Host != "":
		return fmt.Sprintf("%s resolves to %s, an address downloads may not reach: %s", be.Host, be.Addr, be.Reason)
	}
	return fmt.Sprintf("%s is an address downloads may not reach: %s", be.Addr, be.Reason)
}

// human writes a duration without zero units: "1h", "30s", "1m30s".
func human(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}
