package servers

import (
	"context"
	"database/sql"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/kilnhq/kiln/internal/catalog"
	"github.com/kilnhq/kiln/internal/node"
	"github.com/kilnhq/kiln/internal/nodes"
	"github.com/kilnhq/kiln/internal/quota"
	"github.com/kilnhq/kiln/internal/runtime"
	"github.com/kilnhq/kiln/internal/secretbox"
	"github.com/kilnhq/kiln/internal/store"
)

// Node is the host the servers run on (today the local machine; see
// package node for why this seam exists).
type Node interface {
	Name() string
	Root(serverID string) string
	Ports() node.PortRange
	Runtime() runtime.Runtime
	Capacity(ctx context.Context) (node.Capacity, error)
}

// Placer chooses the node and game port of every new server
// (*nodes.Placer): servers never chooses them itself.
type Placer interface {
	// Place chooses; it reads outside any transaction.
	Place(ctx context.Context, r nodes.Request) (nodes.Placement, error)
	// Reserve checks the choice again in tx, the insert's transaction
	// (nodes.ErrNoLongerFits: place again).
	Reserve(ctx context.Context, tx *sql.Tx, p nodes.Placement, r nodes.Request) error
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

// Options tune the lifecycle; zero values take the defaults.
type Options struct {
	// Placement chooses the node and port of new servers; its candidates
	// must be the node this service drives. Without it Create refuses.
	Placement Placer
	// KilnBinary is the kiln executable as the runtime sees it, for profiles
	// that run kiln itself (kiln-test): the running executable for the
	// process runtime (the default), its path inside the image for docker.
	KilnBinary string
	// PublicHost is the host named in addresses and used for status pings.
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
	// Secrets seals the values of secret variables (RCON_PASSWORD) in the
	// servers table, so the database never holds them in the clear; nil
	// refuses to store one (a clear error at create/PATCH).
	Secrets *secretbox.Box
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

// EnvSource gives the variables Kiln adds to the environment of the
// server a configuration's resource key names (*dbservice.Service): read
// when it starts, never stored with the server.
type EnvSource interface {
	InjectedEnv(ctx context.Context, configurationID, resourceKey string) (map[string]string, error)
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
	// deleteTimeout bounds a delete, which its caller going away does
	// not end (remove).
	deleteTimeout = 5 * time.Minute
)

// TempNamesPurpose is what the key of Options.TempNames is derived for
// (secretbox.Box.Derive): the same secret key gives the same names after
// a restart, so leftovers of a crash are recognised.
const TempNamesPurpose = "kiln temp names v1"

// NewService builds the service; call Run to start background work
// (recovery, sampling) and to own the servers' supervisors.
func NewService(db *store.DB, n Node, cat Catalog, inst Installer, opts Options, log *slog.Logger) *Service {
	opts.defaults()
	ctx, cancel := context.WithCancel(context.Background())
	svc := &Service{
		db: db, log: log, publicHost: opts.PublicHost, node: n, catalog: cat, installer: inst, opts: opts,
		live: map[string]*live{}, supervised: map[runtime.Instance]string{}, lists: map[string]listCache{}, ctx: ctx, cancel: cancel, recovered: make(chan struct{}),
		remeasure: make(chan string, 64), started: time.Now(),
	}
	svc.records = sqlRecords{db: db, scan: svc.scan}
	if !opts.Users.IsZero() {
		// The node keeps every root in one directory: Root of any id.
		svc.users = &users{rng: opts.Users, dir: filepath.Dir(n.Root("x"))}
	}
	return svc
}
