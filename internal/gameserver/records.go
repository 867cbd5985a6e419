package gameserver

import (
	"context"

	"github.com/kilnhq/kiln/internal/catalog"
)

// Server statuses (api.md §3). The lifecycle writes all but unknown,
// which the control plane reads for a server whose node does not answer.
const (
	StatusInstalling = "installing"
	StatusOffline    = "offline"
	StatusStarting   = "starting"
	StatusRunning    = "running"
	StatusStopping   = "stopping"
	StatusCrashed    = "crashed"
	StatusUnknown    = "unknown"
)

// Record is what the lifecycle reads of a server's record: what to run,
// with what limits, what the user asked for (DesiredState) and what the
// lifecycle itself recorded (Status, RuntimeRef, the install's outcome).
// It names no team: the caller that named the server checked it. Its
// fields are plain values with JSON names, so that the control plane can
// send it to an agent as it is.
type Record struct {
	ID       string `json:"id"`
	Name     string `json:"name"`
	Software string `json:"software"`
	Version  string `json:"version"`
	Status   string `json:"status"`
	// DesiredState is what the user asked for: "running" or "stopped".
	DesiredState string `json:"desired_state"`
	Node         string `json:"node"`
	Port         int    `json:"port"`
	MemoryMB     int    `json:"memory_mb"`
	DiskMB       int    `json:"disk_mb"`
	CPUPercent   int    `json:"cpu_percent"`
	// Env holds the variables the user set, secrets opened: the records'
	// keeper seals them where it stores them, and the game server needs
	// them in the clear.
	Env map[string]string `json:"env,omitempty"`
	// Image is the docker image chosen for the server ("" lets its
	// profile pick by Java version).
	Image string `json:"image,omitempty"`
	// ConfigurationID and ResourceKey name the deployment that owns the
	// server ("" for one made by hand): Options.Injected reads by them.
	ConfigurationID string `json:"configuration_id,omitempty"`
	ResourceKey     string `json:"resource_key,omitempty"`
	// RuntimeRef is the reference of the instance that runs the server
	// (a holder's or a container's; "" for none), for its re-adoption.
	RuntimeRef string `json:"runtime_ref,omitempty"`
	// InstallError is the last install's failure, as a sentence for the
	// team; nil when it succeeded (or none ended yet).
	InstallError *string `json:"install_error,omitempty"`
	// JavaMajor, Jar and ArgsFile are what the install recorded
	// (catalog.Result): the Java the game needs and how to start it.
	JavaMajor int    `json:"java_major,omitempty"`
	Jar       string `json:"jar,omitempty"`
	ArgsFile  string `json:"args_file,omitempty"`
}

// Records is what a node's lifecycle reads and writes of its servers'
// records: the server it acts on, the servers of its node at recovery,
// and what it learns (a status, the desired state, an install's outcome,
// the runtime's reference to the instance). It is the seam between the
// node-local lifecycle (supervision, installs, recovery, the restart
// policy) and where the records live: the database, through
// internal/servers' SQL implementation, for the local node of kiln serve;
// the control plane, over the node protocol, for a game server on an
// agent (issue 31), which holds no database credentials. The control
// plane's own work on records (create, list, team limits, ownership, env)
// stays on the database.
//
// Every method is of a server of any team: the team was checked by the
// caller that named the server. Each write is stored before it returns,
// so the lifecycle announces only what is recorded; a write of a server
// whose record is gone does nothing and is no error (the end of an
// instance a delete killed is recorded after the delete).
type Records interface {
	// Server reads one server (serverroot.ErrNotFound when it is gone).
	Server(ctx context.Context, id string) (Record, error)
	// NodeServers reads every server of node.
	NodeServers(ctx context.Context, node string) ([]Record, error)
	// SetStatus records a status.
	SetStatus(ctx context.Context, id, status string) error
	// SetDesired records what the user asked for (running or stopped).
	SetDesired(ctx context.Context, id, desired string) error
	// Installed records an install's outcome: what was installed, no
	// install error, status offline.
	Installed(ctx context.Context, id string, res catalog.Result) error
	// InstallFailed records a failed install's reason (a sentence for the
	// team) and status offline.
	InstallFailed(ctx context.Context, id, reason string) error
	// Reinstalling records a reinstall begun: the software, version and
	// env (secrets in the clear, as in Record) to install, no install
	// error, status installing.
	Reinstalling(ctx context.Context, id, software, version string, env map[string]string) error
	// SetRuntimeRef records the reference of the instance that runs the
	// server (a holder's or a container's), for its re-adoption.
	SetRuntimeRef(ctx context.Context, id, ref string) error
	// ClearRuntimeRef forgets the instance's reference; with ref set, only
	// if the record still names that instance (a later start's is kept).
	ClearRuntimeRef(ctx context.Context, id, ref string) error
}
