package servers

import (
	"context"
	"database/sql"
	"log/slog"
	"time"

	"github.com/kilnhq/kiln/internal/catalog"
	"github.com/kilnhq/kiln/internal/gameserver"
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

// Installer puts a profile's artifacts into a server root (gameserver's).
type Installer = gameserver.Installer

// Options tune the service and the lifecycle of its node's servers: every
// field but Placement and Secrets is gameserver.Options', passed to the
// node's Host as it is. Zero values take the defaults.
type Options struct {
	// Placement chooses the node and port of new servers; its candidates
	// must be nodes this service drives (its local node, and the nodes
	// Remote gives a driver of). Without it Create refuses.
	Placement Placer
	// Remote gives the driver of a node other than the local one (an
	// agent's: noderpc.Remote over its channel), or nil when this
	// process does not drive that node (another replica's local node: an
	// operation on its servers is *OtherNodeError). nil drives the local
	// node alone.
	Remote func(node string) Driver
	// NodeStatuses gives the nodes' statuses, for each server's
	// NodeStatus (and Status unknown on an unreachable node); nil leaves
	// NodeStatus empty.
	NodeStatuses NodeStatuses
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
// server a configuration's resource key names (gameserver's).
type EnvSource = gameserver.EnvSource

// lifecycle is what of o the node's gameserver.Host takes.
func (o Options) lifecycle() gameserver.Options {
	return gameserver.Options{
		KilnBinary: o.KilnBinary, PublicHost: o.PublicHost, BindHost: o.BindHost, StopTimeout: o.StopTimeout,
		PingInterval: o.PingInterval, SampleInterval: o.SampleInterval, DiskInterval: o.DiskInterval,
		DiskFresh: o.DiskFresh, RestartBackoff: o.RestartBackoff, After: o.After, TempNames: o.TempNames,
		Users: o.Users, Injected: o.Injected, StopServersOnExit: o.StopServersOnExit, Javas: o.Javas,
	}
}

// DefaultStopTimeout is how long a server has to save and end after its
// stop command before it is killed (gameserver's).
const DefaultStopTimeout = gameserver.DefaultStopTimeout

// deleteTimeout bounds a delete, which its caller going away does not end
// (remove).
const deleteTimeout = 5 * time.Minute

// UIDRange is the range of user ids (and group ids, the same numbers) the
// servers of this node run as, one each (--uid-range; gameserver's).
type UIDRange = gameserver.UIDRange

// DefaultUIDRange is --uid-range's default (gameserver's).
var DefaultUIDRange = gameserver.DefaultUIDRange

// ParseUIDRange reads "FIRST-LAST" or "off" (gameserver.ParseUIDRange).
func ParseUIDRange(s string) (UIDRange, error) { return gameserver.ParseUIDRange(s) }

// CheckUIDRange refuses a range holding the id of a user or a group the
// host already has (gameserver.CheckUIDRange).
func CheckUIDRange(r UIDRange, passwd, group string) error {
	return gameserver.CheckUIDRange(r, passwd, group)
}

// TempNamesPurpose is what the key of Options.TempNames is derived for
// (secretbox.Box.Derive): the same secret key gives the same names after
// a restart, so leftovers of a crash are recognised.
const TempNamesPurpose = "kiln temp names v1"

// NewService builds the service and the gameserver.Host of its node n,
// which reads and writes its records in db; call Run to start the host's
// background work (recovery, sampling) and to own the servers'
// supervisors.
func NewService(db *store.DB, n Node, cat Catalog, inst Installer, opts Options, log *slog.Logger) *Service {
	if opts.PublicHost == "" {
		opts.PublicHost = "127.0.0.1"
	}
	svc := &Service{
		db: db, log: log, publicHost: opts.PublicHost, node: n, catalog: cat, opts: opts,
		lists: map[string]listCache{},
	}
	svc.driver = gameserver.New(sqlRecords{svc}, n, cat, inst, opts.lifecycle(), log)
	return svc
}
