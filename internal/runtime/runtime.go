package runtime

import (
	"context"
	"errors"
	"slices"
	"strings"
)

// Spec is everything a runtime needs to run one server.
type Spec struct {
	ServerID string
	Root     string   // host directory of the server's files
	Image    string   // container image (docker only)
	Argv     []string // command; relative to Root for the process runtime
	// Env is KEY=value. Without HOME, the runtime sets HOME to the server
	// root as the instance sees it (Root for the process runtime, its
	// mount point in a container): only the runtime knows that path, and
	// a container must never be told a host path.
	Env        []string
	MemoryMB   int
	CPUPercent int // percent of one core; 0 = unlimited
	Port       int // game port on the host
	BindHost   string
	// User is the server's own user: the command runs with that uid and
	// gid, no supplementary groups and no_new_privs (the process runtime,
	// which also gives it a /tmp and /dev/shm of its own where it has a
	// sandbox, ProcessOptions.Sandbox; the docker runtime runs the
	// container as it). nil runs it as kiln's own user (docker: its
	// Options.User).
	User *User
	// StopCommand is the console line that stops the software gracefully
	// ("stop", a proxy's "end"). A holder keeps it, so that a server can
	// be stopped while kiln is not running (StopHeld); empty is "stop".
	StopCommand string
}

// User is a uid and gid a server runs as.
type User struct{ UID, GID uint32 }

// Stats are live figures of a running instance.
type Stats struct {
	CPU         float64 // percent of one core since the previous sample
	MemoryBytes int64
}

// Exit describes how an instance ended.
type Exit struct {
	Code   int // -1 when killed by a signal
	Signal string
	Err    error // a failure to run at all
}

// Instance is one running server process or container.
type Instance interface {
	// Ref identifies the instance durably (holder:pid:starttime,
	// container id), for re-adoption after a restart of kiln serve.
	Ref() string
	// WriteLine sends one console line (a command).
	WriteLine(line string) error
	// Stop asks the instance to end with a signal (SIGTERM); Kill forces it.
	Stop() error
	Kill() error
	// Done is closed when the instance has ended; Exit then tells how.
	Done() <-chan struct{}
	Exit() Exit
	Stats(ctx context.Context) (Stats, error)
}

// Error is a failure of a runtime that a server's team may be told of:
// Reason is a sentence that names nothing of the host (no engine address
// or socket, no host path, no message of the engine), for the server's
// console; Err is the detail, for the log. Error gives both.
type Error struct {
	Reason string
	Err    error
}

func (e *Error) Error() string { return e.Reason + ": " + e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// Public is the sentence a team may read: Reason.
func (e *Error) Public() string { return e.Reason }

// ErrEngineAway means the engine a runtime drives (the Docker Engine)
// did not answer, within the runtime's own wait: not a failure of the
// server, which starts once the engine is back. Errors of Start and an
// Exit's Err wrap it (errors.Is) when that is why they failed.
var ErrEngineAway = errors.New("the container engine is away")

// ErrNotAdoptable means a previous instance cannot be re-attached (and was
// ended if it still ran); the caller should start a new one.
var ErrNotAdoptable = errors.New("instance cannot be re-adopted")

// Runtime starts instances.
type Runtime interface {
	Name() string
	// Start runs spec; console receives every output line until the
	// instance ends.
	Start(ctx context.Context, spec Spec, console func(line string)) (Instance, error)
	// Adopt re-attaches to the instance ref left by a previous kiln serve.
	Adopt(ctx context.Context, spec Spec, ref string, console func(line string)) (Instance, error)
	// Remove deletes what the runtime keeps for a server besides its root
	// (a stopped container); nothing for the process runtime.
	Remove(ctx context.Context, serverID string) error
}

// WithHome is env with HOME=home added when env sets no HOME.
func WithHome(env []string, home string) []string {
	if slices.ContainsFunc(env, func(kv string) bool { return strings.HasPrefix(kv, "HOME=") }) {
		return env
	}
	return append(slices.Clip(env), "HOME="+home)
}
