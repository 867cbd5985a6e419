package gameserver

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"sync"
	"time"

	"github.com/kilnhq/kiln/internal/catalog"
	"github.com/kilnhq/kiln/internal/panics"
	"github.com/kilnhq/kiln/internal/quota"
	"github.com/kilnhq/kiln/internal/runtime"
	"github.com/kilnhq/kiln/internal/serverroot"
)

// Node is the host the servers run on (package node's Local; see package
// node for why this seam exists).
type Node interface {
	Name() string
	Root(serverID string) string
	Runtime() runtime.Runtime
}

// Catalog finds software profiles.
type Catalog interface {
	Get(typ string) (catalog.Profile, bool)
}

// Installer puts a profile's artifacts into a server root.
type Installer interface {
	// Install resolves version ("latest" included) and writes the software
	// into root; env holds the variables the user set.
	Install(ctx context.Context, p catalog.Profile, version, root string, env map[string]string) (catalog.Result, error)
	// Configure writes where the software listens (host, empty for every
	// interface, and port) and the settings its environment sets into its
	// config files in root (eula.txt, ops and whitelist included); it runs
	// before every start.
	Configure(ctx context.Context, p catalog.Profile, root string, env map[string]string, host string, port int) error
}

// EnvSource gives the variables Kiln adds to the environment of the
// server a configuration's resource key names (*dbservice.Service): read
// when it starts, never stored with the server.
type EnvSource interface {
	InjectedEnv(ctx context.Context, configurationID, resourceKey string) (map[string]string, error)
}

// Options tune the lifecycle; zero values take the defaults.
type Options struct {
	// KilnBinary is the kiln executable as the runtime sees it, for profiles
	// that run kiln itself (kiln-test): the running executable for the
	// process runtime (the default), its path inside the image for docker.
	KilnBinary string
	// PublicHost is the host used for status pings and on which the docker
	// runtime publishes game ports.
	PublicHost string
	// BindHost is the address game servers of the process runtime listen
	// on; empty for every interface. Docker servers listen on every
	// interface of their container and the runtime publishes the port on
	// PublicHost.
	BindHost string
	// StopTimeout bounds a graceful stop before the instance is killed
	// (DefaultStopTimeout when zero).
	StopTimeout time.Duration
	// PingInterval is how often a starting server is pinged.
	PingInterval time.Duration
	// SampleInterval is how often CPU and memory are sampled.
	SampleInterval time.Duration
	// DiskInterval is how often disk usage is recomputed.
	DiskInterval time.Duration
	// DiskFresh is how old a disk figure may be before a write asks for a
	// walk in the background (see Access).
	DiskFresh time.Duration
	// RestartBackoff is the first wait before restarting a crashed server;
	// it doubles with each restart in the window.
	RestartBackoff time.Duration
	// After is the clock of the restart policy's waits (time.After when
	// nil): the one place a crash schedules work for later, so a caller
	// can count what was scheduled.
	After func(time.Duration) <-chan time.Time
	// TempNames name Kiln's temporary entries in the servers' roots (the
	// disk ledger's: quota.TempNames), keyed by a key users never see, so
	// that what a walk removes as a crash's leftover and what a restore's
	// recovery replays is only ever what Kiln made. The zero value makes
	// walks leave every look-alike alone (nothing is Kiln's).
	TempNames quota.TempNames
	// Users is the range of user ids servers run as, one each (process
	// runtime, kiln running as root; users.go): each server's root is
	// its user's (mode 0700), its process runs as it with no_new_privs,
	// and what Kiln writes into the root is given to it. The zero range
	// runs every server as kiln's own user.
	Users UIDRange
	// Injected adds variables to the environment of servers a deployment
	// owns (a dbservice's credentials), read at every start; nil for none.
	Injected EnvSource
	// StopServersOnExit stops every server when Run ends (kiln serve's
	// --stop-servers-on-exit), as servers that end with kiln (a process
	// runtime without holders) always are: their stop command, then
	// StopTimeout. Off, servers that run on without kiln (under holders,
	// in containers) keep running and the next Run re-adopts them.
	// Either way their desired state is kept.
	StopServersOnExit bool
	// Javas are the host's Java installations: on the process runtime a
	// server runs the java of the major its game version needs
	// (runtime.Javas.Home's rule), and fails to start with a sentence
	// naming that major when the host has none. nil runs the java on
	// PATH, whatever its version.
	Javas *runtime.Javas
}

func (o *Options) defaults() {
	if o.PublicHost == "" {
		o.PublicHost = "127.0.0.1"
	}
	if o.StopTimeout == 0 {
		o.StopTimeout = DefaultStopTimeout
	}
	if o.PingInterval == 0 {
		o.PingInterval = 100 * time.Millisecond
	}
	if o.SampleInterval == 0 {
		o.SampleInterval = 5 * time.Second
	}
	if o.DiskFresh == 0 {
		o.DiskFresh = 5 * time.Second
	}
	if o.DiskInterval == 0 {
		o.DiskInterval = time.Minute
	}
	if o.RestartBackoff == 0 {
		o.RestartBackoff = 2 * time.Second
	}
	if o.After == nil {
		o.After = time.After
	}
}

// DefaultStopTimeout is how long a server has to save and end after its
// stop command before it is killed. kiln serve gives the docker runtime
// the same grace (docker.Options.StopTimeout), so the engine waits as long
// when it stops a container itself.
const DefaultStopTimeout = 30 * time.Second

// Restart policy: at most restartLimit automatic restarts in restartWindow.
const (
	restartLimit  = 3
	restartWindow = 10 * time.Minute
)

// Host runs the game servers of one node: their processes, consoles,
// roots and users, and their records' lifecycle fields through Records.
// Its methods take a server's id: whoever names a server to it has
// checked that the caller may act on it (its team).
type Host struct {
	records   Records
	log       *slog.Logger
	node      Node
	catalog   Catalog
	installer Installer
	opts      Options

	mu   sync.Mutex
	live map[string]*live // by server id; created on first use
	// supervised are the instances being supervised, with their server's
	// id, until each has ended (shutdown stops every one).
	supervised map[runtime.Instance]string

	recovered  chan struct{} // closed when Run's recovery is done
	remeasure  chan string   // servers whose disk figure a write found stale (sample walks them)
	started    time.Time     // temporary files older than this are crash leftovers
	recoverErr error         // set before recovered is closed
	users      *users        // nil: servers run as kiln's user (Options.Users)

	ctx    context.Context // of Run; background work stops with it
	cancel context.CancelFunc
	wg     sync.WaitGroup // background work and supervisors; added to only through track
	wgMu   sync.Mutex     // orders track's Add before shutdown's Wait
	closed bool           // shutdown waits on wg: nothing more is tracked
}

// New builds the host of node n's servers, whose records it reads and
// writes through records; call Run to recover them, start background work
// (sampling) and own the servers' supervisors.
func New(records Records, n Node, cat Catalog, inst Installer, opts Options, log *slog.Logger) *Host {
	opts.defaults()
	ctx, cancel := context.WithCancel(context.Background())
	h := &Host{
		records: records, log: log, node: n, catalog: cat, installer: inst, opts: opts,
		live: map[string]*live{}, supervised: map[runtime.Instance]string{}, ctx: ctx, cancel: cancel,
		recovered: make(chan struct{}), remeasure: make(chan string, 64), started: time.Now(),
	}
	if !opts.Users.IsZero() {
		// The node keeps every root in one directory: Root of any id.
		h.users = &users{rng: opts.Users, dir: filepath.Dir(n.Root("x"))}
	}
	return h
}

// track adds one to wg for a goroutine about to start, unless shutdown
// already waits on it (then false: the goroutine must not start). An Add
// that may happen while the counter is zero must come before Wait
// (sync.WaitGroup), and requests start background work at any time.
func (h *Host) track() bool {
	h.wgMu.Lock()
	defer h.wgMu.Unlock()
	if h.closed {
		return false
	}
	h.wg.Add(1)
	return true
}

// goBackground runs fn on the host's context, tracked for shutdown. A
// panic in it (work a request started: an install, a power action) is
// logged with its stack, never the end of the process.
func (h *Host) goBackground(fn func(ctx context.Context)) {
	if !h.track() {
		return // shutting down: nothing new begins; recovery does the rest at the next start
	}
	go func() {
		defer h.wg.Done()
		if err := panics.Catch(func() error { fn(h.ctx); return nil }); err != nil {
			pe, _ := errors.AsType[*panics.Error](err)
			h.log.Error("background work panicked", "err", err, "stack", string(pe.Stack))
		}
	}()
}

// getRetried reads a server's record for background work that must not
// be lost to a transient error of the records (an install, a start, the
// record of an exit): serverroot.ErrNotFound at once, any other error
// tried again, 100 ms doubling to 5 s apart, until ctx ends (then that
// error). What the work leaves undone at shutdown the next start's
// recovery does.
func (h *Host) getRetried(ctx context.Context, id string) (Record, error) {
	wait := 100 * time.Millisecond
	for {
		sv, err := h.records.Server(ctx, id)
		if err == nil || errors.Is(err, serverroot.ErrNotFound) {
			return sv, err
		}
		h.log.Warn("read a server's record; trying again", "server_id", id, "err", err, "in", wait)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return Record{}, err
		case <-t.C:
		}
		wait = min(2*wait, 5*time.Second)
	}
}

// setStatus stores a status change and tells console subscribers.
func (h *Host) setStatus(ctx context.Context, id, status string) error {
	if err := h.records.SetStatus(ctx, id, status); err != nil {
		return err
	}
	h.liveOf(id).setStatus(status)
	return nil
}

func (h *Host) setDesired(ctx context.Context, id, desired string) error {
	return h.records.SetDesired(ctx, id, desired)
}
