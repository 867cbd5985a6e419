package servers

import (
	"context"
	"database/sql"

	"github.com/kilnhq/kiln/internal/gameserver"
)

// Driver runs the game servers of a node, keyed by server id: the Service
// checks the team (it reads the record) and then asks the driver of the
// server's node. The local node's is a *gameserver.Host. It is the node
// seam, added ahead of its second implementation: calls to an agent over
// the node channel (issue 31), which can then come without a change to
// the Service's callers. Access, Reading and Hold give what only code on
// the node itself can use (a root's path, its disk ledger, marks in the
// host's memory).
type Driver interface {
	// Run recovers the node's servers, then runs its background work
	// until ctx ends and stops what does not outlive kiln.
	Run(ctx context.Context) error
	// Recovered is closed once Run's recovery is done;
	// RecoveryFailed then tells whether it failed.
	Recovered() <-chan struct{}
	RecoveryFailed() bool

	Power(ctx context.Context, id, action string) error
	Command(ctx context.Context, id, line string) error
	Console(ctx context.Context, id string, n int) ([]string, error)
	Stream(ctx context.Context, id string) (<-chan Event, func(), error)
	Note(id, line string)
	Resources(id string) Resources

	// Install installs a server just recorded (status installing) in the
	// background; Reinstall records a reinstall and runs it.
	Install(id string, startAfter bool)
	Reinstall(ctx context.Context, id, software, version string, env map[string]string, startAfter bool) error
	// Remove stops a server being deleted and removes its runtime state,
	// before its record goes; Forget removes what is left (its streams,
	// root and user) once it is gone.
	Remove(ctx context.Context, id string) error
	Forget(id string)

	Access(ctx context.Context, id string, write bool) (Access, error)
	Reading(ctx context.Context, id string) (*Reader, error)
	Hold(ctx context.Context, id string) (*Held, error)
	DiskUsage(ctx context.Context, id string) (Disk, error)
	DiskChanged(id string)
}

// The lifecycle's errors and types, gameserver's very values and types
// (errors.Is and errors.As match either name), so that internal/api's
// error table and every caller keep these names.
var (
	// ErrOffline: a console command was sent to a server that is not running.
	ErrOffline = gameserver.ErrOffline
	// ErrInstallFailed: the server cannot start because its last install failed.
	ErrInstallFailed = gameserver.ErrInstallFailed
	// ErrEULANotAccepted: the server's software needs the Minecraft EULA,
	// and its user has not accepted it (env EULA=true). EULAError carries it.
	ErrEULANotAccepted = gameserver.ErrEULANotAccepted
	// ErrTooManyStreams: the server's console already has MaxStreams
	// subscribers.
	ErrTooManyStreams = gameserver.ErrTooManyStreams
)

// EULAError refuses to start a server whose software needs the Minecraft
// EULA while its environment does not say EULA=true.
type EULAError = gameserver.EULAError

// MaxStreams is how many subscribers one server's console has at most.
const MaxStreams = gameserver.MaxStreams

// Event is one item of a console stream: a console line or a status change.
type Event = gameserver.Event

// Run runs the node's driver (recovery, then sampling, until ctx ends;
// then its shutdown, waiting for every background goroutine) and closes
// the service's prepared statements.
//
// Recovery sets every status to the truth before Recovered is closed, so
// kiln serve answers no request before that: a status stored by a kiln
// that was killed may be stale.
func (s *Service) Run(ctx context.Context) error {
	err := s.driver.Run(ctx)
	s.stmtMu.Lock()
	defer s.stmtMu.Unlock()
	for _, st := range []**sql.Stmt{&s.listSt, &s.versionSt, &s.getSt, &s.anySt} {
		if *st != nil {
			(*st).Close()
			*st = nil
		}
	}
	return err
}

// Recovered is closed once Run has brought every server's stored state in
// line with what runs (re-adopted, restarted or marked offline).
func (s *Service) Recovered() <-chan struct{} { return s.driver.Recovered() }

// RecoveryFailed reports, once Recovered is closed, whether recovery
// failed (Run then returns why): kiln serve must not start serving.
func (s *Service) RecoveryFailed() bool { return s.driver.RecoveryFailed() }

// Power performs start, stop, restart or kill. It returns once the action is
// recorded; the action itself proceeds in the background. Errors:
// ErrNotFound, ErrInstalling, ErrRestoring (start and restart during a
// restore), ErrInstallFailed, *EULAError (start and restart of software
// whose EULA its user has not accepted), *validate.Error.
func (s *Service) Power(ctx context.Context, teamID, id, action string) error {
	_, d, err := s.target(ctx, teamID, id)
	if err != nil {
		return err
	}
	return d.Power(ctx, id, action)
}

// Command sends one console line to a running server. Errors: ErrNotFound,
// ErrOffline, *validate.Error.
func (s *Service) Command(ctx context.Context, teamID, id, line string) error {
	if err := gameserver.CheckCommand(line); err != nil {
		return err
	}
	_, d, err := s.target(ctx, teamID, id)
	if err != nil {
		return err
	}
	return d.Command(ctx, id, line)
}

// Console returns the last n console lines (oldest first).
func (s *Service) Console(ctx context.Context, teamID, id string, n int) ([]string, error) {
	_, d, err := s.target(ctx, teamID, id)
	if err != nil {
		return nil, err
	}
	return d.Console(ctx, id, n)
}

// Note writes a line of Kiln's own into a server's console ("[kiln] "
// and line): what other packages did to it (a snapshot restored), where
// its users look.
func (s *Service) Note(id, line string) { s.driver.Note(id, line) }

// Stream follows a server's console and status; call stop when done. The
// channel closes when the subscriber falls behind or the server is
// deleted. Errors: ErrNotFound, ErrTooManyStreams.
func (s *Service) Stream(ctx context.Context, teamID, id string) (<-chan Event, func(), error) {
	_, d, err := s.target(ctx, teamID, id)
	if err != nil {
		return nil, nil, err
	}
	return d.Stream(ctx, id)
}
