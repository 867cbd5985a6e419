package pull

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"sync"
	"time"

	"github.com/kilnhq/kiln/internal/netguard"
	"github.com/kilnhq/kiln/internal/serverroot"
	"github.com/kilnhq/kiln/internal/store"
)

// Limits of the API (api.md §4).
const (
	// MaxActive is how many downloads of one server may be queued or
	// running at once.
	MaxActive = 3
	// MaxURLLen is the longest URL accepted, in bytes.
	MaxURLLen = 2048
	// ListWindow is how long a finished download stays in List.
	ListWindow = time.Hour
	// MaxList bounds List.
	MaxList = 1000
)

// Errors callers tell apart. Invalid input is a *validate.Error naming the
// field ("url", "directory", "filename"); an unknown server or one of
// another team is serverroot.ErrNotFound, a server being installed
// serverroot.ErrInstalling (both from Servers.Access, passed through).
var (
	// ErrNotFound: no such download on that server of that team.
	ErrNotFound = errors.New("download not found")
	// ErrTooMany: the server already has MaxActive queued or running
	// downloads.
	ErrTooMany = fmt.Errorf("the server already has %d active downloads", MaxActive)
	// ErrClosed: the Manager is not taking work: kiln serve is stopping,
	// or Run failed to recover the downloads of a previous process.
	ErrClosed = errors.New("remote downloads are unavailable")
)

// Status is where a download is in its life: queued → running → done,
// failed or canceled. The last three are final.
type Status string

const (
	StatusQueued   Status = "queued"   // accepted, waiting for a transfer slot
	StatusRunning  Status = "running"  // connecting or receiving
	StatusDone     Status = "done"     // the file is in place
	StatusFailed   Status = "failed"   // Error says why; nothing was left behind
	StatusCanceled Status = "canceled" // stopped by Cancel; nothing was left behind
)

// Active reports whether s is queued or running.
func (s Status) Active() bool { return s == StatusQueued || s == StatusRunning }

// Download is one remote download as stored.
type Download struct {
	ID        string // "dl_…"
	TeamID    string
	ServerID  string
	URL       string // as the user gave it
	Directory string // server-relative, as the user sees it: "/" or "/plugins"
	Filename  string // a plain name inside Directory
	Status    Status
	// Size is the file's size in bytes: the Content-Length once the
	// response arrived, the bytes written once done, 0 while unknown.
	Size int64
	// Written is how many bytes were received so far.
	Written int64
	// Error says why the download failed, as a sentence for the user;
	// empty unless Status is StatusFailed (the API answers null then).
	Error string
	// CreatedAt, UpdatedAt and FinishedAt are Unix milliseconds;
	// FinishedAt is 0 while the download is active (the API answers null).
	CreatedAt, UpdatedAt, FinishedAt int64
}

// Progress is the share received, 0 to 100 with one decimal: 100 once
// done, 0 while the size is unknown, never 100 before the file is in place.
func (d Download) Progress() float64 {
	switch {
	case d.Status == StatusDone:
		return 100
	case d.Size <= 0 || d.Written <= 0:
		return 0
	}
	p := math.Floor(float64(d.Written)*1000/float64(d.Size)) / 10
	return min(p, 99.9)
}

// File is the server-relative path of the downloaded file: "/plugins/x.jar".
func (d Download) File() string {
	if d.Directory == "/" {
		return "/" + d.Filename
	}
	return d.Directory + "/" + d.Filename
}

// Servers is what downloads need of the servers package; *servers.Service
// implements it.
type Servers interface {
	// Access checks that one of the team's servers exists and returns its
	// root and, with write, its disk ledger (serverroot.ErrNotFound,
	// serverroot.ErrInstalling).
	Access(ctx context.Context, teamID, id string, write bool) (serverroot.Access, error)
}

// Options tune the Manager; zero values take the defaults.
type Options struct {
	// HeaderTimeout bounds the time from sending the request to receiving
	// the response headers: dialing, TLS handshakes and redirects included
	// (default 30 s).
	HeaderTimeout time.Duration
	// IdleTimeout fails a download that receives no byte for this long
	// (default 60 s).
	IdleTimeout time.Duration
	// TotalTimeout bounds a whole download, from the request to the file
	// in place (default 1 h).
	TotalTimeout time.Duration
	// MaxRunning is how many transfers one process runs at once; more
	// wait as queued (default 16).
	MaxRunning int
	// MaxRunningPerTeam is how many of them one team's downloads may
	// take, so that one team cannot starve the others (default 4).
	MaxRunningPerTeam int
	// MinRate and MinRateWindow: a transfer that receives fewer than
	// MinRate bytes a second, on average over any MinRateWindow, fails
	// (defaults 10 KiB/s over 60 s): a trickling upstream does not hold a
	// slot for its whole TotalTimeout.
	MinRate       int64
	MinRateWindow time.Duration
	// ProgressInterval is how often a running download's byte count is
	// written to the database, and so how soon it notices a Cancel made
	// by another process (default 1 s). List and Get answer live figures
	// for the downloads of this process either way.
	ProgressInterval time.Duration
	// Retention is how long finished downloads are kept in the database
	// before Run deletes them (default 24 h, at least ListWindow).
	Retention time.Duration
	// PruneInterval is how often Run deletes old finished downloads
	// (default 1 h).
	PruneInterval time.Duration
	// UserAgent is sent with every request (default "kiln").
	UserAgent string
	// Now is the clock of the stored timestamps, the List window and
	// retention (default time.Now). Timeouts and progress writes use real
	// timers.
	Now func() time.Time
}

func (o *Options) defaults() {
	if o.HeaderTimeout <= 0 {
		o.HeaderTimeout = 30 * time.Second
	}
	if o.IdleTimeout <= 0 {
		o.IdleTimeout = 60 * time.Second
	}
	if o.TotalTimeout <= 0 {
		o.TotalTimeout = time.Hour
	}
	if o.MaxRunning <= 0 {
		o.MaxRunning = 16
	}
	if o.MaxRunningPerTeam <= 0 {
		o.MaxRunningPerTeam = 4
	}
	if o.MinRate <= 0 {
		o.MinRate = 10 << 10
	}
	if o.MinRateWindow <= 0 {
		o.MinRateWindow = time.Minute
	}
	if o.ProgressInterval <= 0 {
		o.ProgressInterval = time.Second
	}
	if o.Retention <= 0 {
		o.Retention = 24 * time.Hour
	}
	o.Retention = max(o.Retention, ListWindow)
	if o.PruneInterval <= 0 {
		o.PruneInterval = time.Hour
	}
	if o.UserAgent == "" {
		o.UserAgent = "kiln"
	}
	if o.Now == nil {
		o.Now = time.Now
	}
}

// Manager runs a process's remote downloads: it validates and records
// them, transfers them in the background through the netguard policy into
// the server's root, and keeps their records current. Call Run to recover
// what a previous process left and to own the transfers; Start and Cancel
// wait until Run has recovered. It is safe for concurrent use.
type Manager struct {
	db      *store.DB
	servers Servers
	client  *http.Client
	opts    Options
	log     *slog.Logger

	// base is the parent of every transfer's context; Run cancels it with
	// errShutdown when it stops.
	base       context.Context
	baseCancel context.CancelCauseFunc
	slots      chan struct{}            // MaxRunning transfer slots
	teamSlots  map[string]chan struct{} // MaxRunningPerTeam slots by team, under mu
	recovered  chan struct{}            // closed when Run has recovered (or failed to)
	recoverErr error                    // set before recovered is closed
	wg         sync.WaitGroup

	mu     sync.Mutex
	closed bool                 // no new transfers: stopping, or recovery failed
	active map[string]*transfer // by download id, this process's transfers
}

// NewManager returns a Manager that records downloads in db, reaches
// servers' roots through srv and connects only as policy allows.
func NewManager(db *store.DB, srv Servers, policy *netguard.Policy, opts Options, log *slog.Logger) *Manager {
	opts.defaults()
	base := &http.Transport{
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          32,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   opts.HeaderTimeout,
		ResponseHeaderTimeout: opts.HeaderTimeout,
		ExpectContinueTimeout: time.Second,
		// The file is stored as the server sends it: no transparent gzip,
		// which would also hide the Content-Length.
		DisableCompression: true,
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	return &Manager{
		db: db, servers: srv, client: policy.Client(base), opts: opts, log: log,
		base: ctx, baseCancel: cancel,
		slots:     make(chan struct{}, opts.MaxRunning),
		teamSlots: map[string]chan struct{}{},
		recovered: make(chan struct{}),
		active:    map[string]*transfer{},
	}
}

// Recovered is closed once Run has dealt with the downloads a previous
// process left (or failed to, in which case Run returns the error).
func (m *Manager) Recovered() <-chan struct{} { return m.recovered }

// RecoveryFailed reports, once Recovered is closed, whether recovery
// failed (Run then returns why).
func (m *Manager) RecoveryFailed() bool { return m.recoverErr != nil }

// ready waits until Run has recovered; ErrClosed if the Manager is not
// taking work.
func (m *Manager) ready(ctx context.Context) error {
	select {
	case <-m.recovered:
	case <-ctx.Done():
		return ctx.Err()
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return ErrClosed
	}
	return nil
}

func (m *Manager) now() int64 { return m.opts.Now().UnixMilli() }
