package gameserver

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/kilnhq/kiln/internal/catalog"
	"github.com/kilnhq/kiln/internal/quota"
	"github.com/kilnhq/kiln/internal/runtime"
	"github.com/kilnhq/kiln/internal/serverroot"
	"github.com/kilnhq/kiln/internal/slp"
	"github.com/kilnhq/kiln/internal/validate"
)

// ErrOffline: a console command was sent to a server that is not running.
var ErrOffline = errors.New("the server is not running")

// Resources are live usage figures.
type Resources struct {
	CPU         float64 // percent of one core
	MemoryBytes int64
	DiskBytes   int64
	UptimeMS    int64
}

// live is what the host keeps in memory for one server: its console, its
// running instance and the latest resource sample. The records remain the
// truth for status and desired state; this is only what cannot be stored.
type live struct {
	console *console

	op sync.Mutex // serialises power operations on the server

	mu            sync.Mutex
	status        string
	inst          runtime.Instance
	startedAt     time.Time
	stopRequested bool
	stopAsked     runtime.Instance // the last instance a stop asked to end (a restart's start resets stopRequested before its end may be seen)
	restarts      []time.Time
	res           Resources          // DiskBytes unused: disk has the figure
	disk          *quota.Account     // the root's disk ledger
	cancelInstall context.CancelFunc // of the install in flight, if any
	readers       int                // snapshots reading the root whole (Reading)
	changes       uint64             // how many times status changed in this process (Reader.Changed)
	reinstalling  bool               // a reinstall from its check to its install's end (Reinstall)
	engineAway    bool               // waiting for the runtime's engine since the last start (awaitEngine): the console said so
}

// endReinstall ends what Reinstall marked: Reading may begin again.
func (l *live) endReinstall() {
	l.mu.Lock()
	l.reinstalling = false
	l.mu.Unlock()
}

// isHeld tells whether a Hold is in force: the root's disk ledger is
// held (quota.Hold), the one record of it.
func (l *live) isHeld() bool { return l.disk.Held() }

func (l *live) setStatus(st string) {
	l.mu.Lock()
	changed := l.status != st
	l.status = st
	if changed {
		l.changes++
	}
	l.mu.Unlock()
	if changed {
		l.console.status(st)
	}
}

// changeCount is how many times the status changed (Reader.Changed).
func (l *live) changeCount() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.changes
}

func (l *live) instance() runtime.Instance {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.inst
}

func (h *Host) liveOf(id string) *live {
	h.mu.Lock()
	defer h.mu.Unlock()
	l, ok := h.live[id]
	if !ok {
		l = &live{console: newConsole(), disk: quota.NewAccount(0, h.opts.TempNames)}
		h.live[id] = l
	}
	return l
}

// Resources is the latest sample of server id's usage, with the uptime of
// now; zero for a server this host has not seen.
func (h *Host) Resources(id string) Resources {
	h.mu.Lock()
	l, ok := h.live[id]
	h.mu.Unlock()
	if !ok {
		return Resources{}
	}
	return l.resources()
}

// resources is the latest sample, with the uptime of now.
func (l *live) resources() Resources {
	l.mu.Lock()
	defer l.mu.Unlock()
	r := l.res
	r.DiskBytes = l.disk.Figures().Used
	if l.inst != nil && !l.startedAt.IsZero() {
		r.UptimeMS = time.Since(l.startedAt).Milliseconds()
	} else {
		r.CPU, r.MemoryBytes, r.UptimeMS = 0, 0, 0
	}
	return r
}

// Power performs start, stop, restart or kill. It returns once the action is
// recorded; the action itself proceeds in the background. Errors:
// serverroot's ErrNotFound, ErrInstalling and ErrRestoring (start and
// restart during a restore), ErrInstallFailed, *EULAError (start and
// restart of software whose EULA its user has not accepted),
// *validate.Error.
func (h *Host) Power(ctx context.Context, id, action string) error {
	sv, err := h.records.Server(ctx, id)
	if err != nil {
		return err
	}
	if sv.Status == StatusInstalling {
		return serverroot.ErrInstalling
	}
	if (action == "start" || action == "restart") && h.liveOf(id).isHeld() {
		return serverroot.ErrRestoring // a stop or a kill goes on: the restore stops it itself
	}
	switch action {
	case "start":
		// The EULA first: whatever else is wrong, a server whose user has
		// not accepted it never starts, and saying so first saves a
		// reinstall that would not help.
		if err := h.checkEULA(sv); err != nil {
			return err
		}
		if sv.InstallError != nil {
			return fmt.Errorf("%w: %s", ErrInstallFailed, *sv.InstallError)
		}
		if err := h.setDesired(ctx, id, "running"); err != nil {
			return err
		}
		// A start by hand is a new intent: the crash budget starts afresh.
		l := h.liveOf(id)
		l.mu.Lock()
		l.restarts = nil
		l.mu.Unlock()
		h.goBackground(func(ctx context.Context) { h.start(ctx, id) })
	case "stop":
		if err := h.setDesired(ctx, id, "stopped"); err != nil {
			return err
		}
		h.goBackground(func(ctx context.Context) { h.stop(ctx, id, false) })
	case "kill":
		if err := h.setDesired(ctx, id, "stopped"); err != nil {
			return err
		}
		h.goBackground(func(ctx context.Context) { h.stop(ctx, id, true) })
	case "restart":
		if err := h.checkEULA(sv); err != nil {
			return err
		}
		if sv.InstallError != nil {
			return fmt.Errorf("%w: %s", ErrInstallFailed, *sv.InstallError)
		}
		if err := h.setDesired(ctx, id, "running"); err != nil {
			return err
		}
		// Stopping from now on, not from whenever the background stop
		// begins: whoever waits for the restarted server to run (a run's
		// update step, a client polling) must not take the old instance's
		// "running" for the new one's.
		if sv.Status == StatusRunning || sv.Status == StatusStarting {
			h.setStatus(ctx, id, StatusStopping)
		}
		h.goBackground(func(ctx context.Context) {
			h.stop(ctx, id, false)
			h.start(ctx, id)
		})
	default:
		return validate.Errorf("action", "must be one of start, stop, restart, kill; got %q", action)
	}
	return nil
}

// ErrInstallFailed: the server cannot start because its last install failed.
var ErrInstallFailed = errors.New("the last install failed; reinstall the server first")

// ErrEULANotAccepted: the server's software needs the Minecraft EULA, and
// its user has not accepted it (env EULA=true). EULAError carries it.
var ErrEULANotAccepted = errors.New("the Minecraft EULA is not accepted")

// EULAError refuses to start a server whose software needs the Minecraft
// EULA while its environment does not say EULA=true. Kiln never accepts
// the EULA for a user.
type EULAError struct{ Software string }

func (e *EULAError) Error() string {
	return fmt.Sprintf("the Minecraft EULA is not accepted for this %s server, so it does not start: read the EULA at %s, "+
		"then set EULA=true in the server's env to accept it (Kiln never accepts it for you)", e.Software, catalog.EULAURL)
}

// Is makes errors.Is(err, ErrEULANotAccepted) hold.
func (e *EULAError) Is(target error) bool { return target == ErrEULANotAccepted }

// checkEULA returns an *EULAError when sv may not start for want of the
// EULA.
func (h *Host) checkEULA(sv Record) error {
	if p, ok := h.catalog.Get(sv.Software); ok && !p.EULAAccepted(sv.Env) {
		return &EULAError{Software: sv.Software}
	}
	return nil
}

// Command sends one console line to a running server. Errors: ErrOffline,
// *validate.Error.
func (h *Host) Command(ctx context.Context, id, line string) error {
	if err := CheckCommand(line); err != nil {
		return err
	}
	inst := h.liveOf(id).instance()
	if inst == nil {
		return ErrOffline
	}
	select {
	case <-inst.Done():
		return ErrOffline
	default:
	}
	if err := inst.WriteLine(line); err != nil {
		return fmt.Errorf("%w: %v", ErrOffline, err)
	}
	return nil
}

// maxCommandLen bounds a console line sent to a server.
const maxCommandLen = 1000

// CheckCommand refuses what is not one console line (Command): empty,
// longer than 1,000 bytes, or holding a control character (a line break
// would send a second command). Errors: *validate.Error.
func CheckCommand(line string) error {
	if line == "" || len(line) > maxCommandLen {
		return validate.Errorf("command", "must be 1-%d characters", maxCommandLen)
	}
	for _, r := range line {
		if unicode.IsControl(r) {
			return validate.Errorf("command", "must be a single line without control characters")
		}
	}
	return nil
}

// Console returns the last n console lines (oldest first). It has no
// error of its own; ctx and the error are for a node another process
// drives.
func (h *Host) Console(ctx context.Context, id string, n int) ([]string, error) {
	return h.liveOf(id).console.tail(n), nil
}

// Note writes a line of Kiln's own into a server's console ("[kiln] "
// and line): what other packages did to it (a snapshot restored), where
// its users look.
func (h *Host) Note(id, line string) {
	h.liveOf(id).console.add("[kiln] " + line)
}

// Stream follows a server's console and status; call stop when done. The
// channel closes when the subscriber falls behind or the server is
// deleted (Forget). Errors: ErrTooManyStreams.
func (h *Host) Stream(ctx context.Context, id string) (<-chan Event, func(), error) {
	return h.liveOf(id).console.subscribe()
}

// start launches the server unless it already runs, then supervises it.
func (h *Host) start(ctx context.Context, id string) {
	l := h.liveOf(id)
	l.op.Lock()
	defer l.op.Unlock()
	if h.ctx.Err() != nil {
		return // shutting down: nothing new starts
	}
	if inst := l.instance(); inst != nil {
		select {
		case <-inst.Done():
		default:
			return // already running
		}
	}
	sv, err := h.getRetried(ctx, id)
	if err != nil {
		if !errors.Is(err, serverroot.ErrNotFound) {
			h.log.Error("start: read server", "server_id", id, "err", err)
		}
		return
	}
	if sv.DesiredState != "running" {
		return
	}
	if l.isHeld() {
		// A start asked for just before a restore held the root (Power
		// refuses one after): no process runs while the restore swaps
		// the tree. The restore starts the server once it is done, as
		// its desired state is running and it is offline.
		l.console.add("[kiln] not started: the server is being restored")
		return
	}
	if err := h.checkEULA(sv); err != nil {
		// Refused, not crashed: nothing ran. A start by hand says so
		// before it gets here; this is a restart or a recovery of a
		// server whose EULA is not (or no longer) accepted.
		l.console.add("[kiln] not started: " + err.Error())
		if err := h.setStatus(ctx, id, StatusOffline); err != nil {
			h.log.Error("record refused start", "server_id", id, "err", err)
		}
		return
	}
	spec, err := h.spec(sv)
	if err == nil {
		spec.Env, err = h.inject(ctx, sv, spec.Env)
	}
	if err == nil {
		spec.User, err = h.runAs(id)
	}
	if err == nil {
		err = h.configure(ctx, sv)
	}
	if err != nil {
		h.failStart(ctx, l, id, err)
		return
	}
	l.mu.Lock()
	l.stopRequested = false
	l.mu.Unlock()
	if err := h.setStatus(ctx, id, StatusStarting); err != nil {
		h.log.Error("start", "server_id", id, "err", err)
		return
	}
	l.console.add("[kiln] starting " + sv.Software + " " + sv.Version)
	inst, err := h.node.Runtime().Start(ctx, spec, l.console.add)
	if err != nil {
		h.failStart(ctx, l, id, err)
		return
	}
	h.attach(ctx, l, sv, inst)
}

// attach records a running instance and supervises it.
func (h *Host) attach(ctx context.Context, l *live, sv Record, inst runtime.Instance) {
	l.mu.Lock()
	if old := l.inst; old != nil {
		select {
		case <-old.Done():
		default:
			// Should not happen (start holds op and checks); shutdown
			// still stops it (supervised), but say so.
			h.log.Warn("a new instance replaces one still running", "server_id", sv.ID, "old_ref", old.Ref())
		}
	}
	l.inst = inst
	l.engineAway = false
	l.startedAt = time.Now()
	if st, ok := inst.(interface{ StartedAt() time.Time }); ok {
		// A re-adopted instance's uptime counts from its start, not ours.
		if at := st.StartedAt(); !at.IsZero() && at.Before(l.startedAt) {
			l.startedAt = at
		}
	}
	l.res = Resources{}
	l.mu.Unlock()
	if err := h.records.SetRuntimeRef(ctx, sv.ID, inst.Ref()); err != nil {
		h.log.Error("record runtime ref", "server_id", sv.ID, "err", err)
	}
	// Every supervised instance is known until it has ended, so that
	// shutdown stops each one, also one that is no longer the server's
	// current instance (it would otherwise be waited for forever).
	if !h.track() {
		// Started as the host stops (its supervisors are waited for
		// already): stopped now if it would not outlive kiln, else left to
		// the next start, which re-adopts it (its runtime_ref is stored).
		if h.stopsAtExit(inst) {
			l.mu.Lock()
			l.stopRequested, l.stopAsked = true, inst
			l.mu.Unlock()
			sctx, cancel := context.WithTimeout(context.Background(), h.opts.StopTimeout+5*time.Second)
			defer cancel()
			h.stopInstance(sctx, sv.ID, l, inst, false)
		}
		return
	}
	h.mu.Lock()
	h.supervised[inst] = sv.ID
	h.mu.Unlock()
	go func() {
		defer h.wg.Done()
		defer func() {
			h.mu.Lock()
			delete(h.supervised, inst)
			h.mu.Unlock()
		}()
		h.supervise(sv, l, inst)
	}()
}

func (h *Host) failStart(ctx context.Context, l *live, id string, err error) {
	if rt, ok := h.node.Runtime().(engineAwaiter); ok && errors.Is(err, runtime.ErrEngineAway) && h.ctx.Err() == nil {
		h.awaitEngine(ctx, l, id, rt, err)
		return
	}
	h.log.Warn("server failed to start", "server_id", id, "err", err)
	l.console.add("[kiln] failed to start: " + h.tell(id, err))
	if err := h.setStatus(ctx, id, StatusCrashed); err != nil {
		h.log.Error("record crash", "server_id", id, "err", err)
	}
}

// awaitEngine handles a server that cannot start, or lost its instance,
// because the runtime's engine is away (runtime.ErrEngineAway) longer than
// the runtime waits for it: not a crash of the server. It stays offline,
// its desired state running, and the crash budget untouched; once the
// engine answers again (rt.AwaitEngine, as long as kiln runs)
// it is started once, if its desired state is still running. A kiln
// restarted meanwhile starts it as any offline server whose desired
// state is running. The console tells it once per absence.
func (h *Host) awaitEngine(ctx context.Context, l *live, id string, rt engineAwaiter, cause error) {
	l.mu.Lock()
	said := l.engineAway
	l.engineAway = true
	l.mu.Unlock()
	h.log.Warn("the runtime's engine is away; starting the server once it is back", "server_id", id, "err", cause)
	// The status first: whoever reads the console line then reads offline.
	if err := h.setStatus(ctx, id, StatusOffline); err != nil {
		h.log.Error("record waiting for the engine", "server_id", id, "err", err)
	}
	if !said {
		l.console.add("[kiln] the container engine is away; the server starts once it is back")
	}
	h.goBackground(func(ctx context.Context) {
		if rt.AwaitEngine(ctx) != nil {
			return // shutting down
		}
		h.start(ctx, id)
	})
}

// engineAwaiter is a runtime whose engine may go away (docker): it can
// say when the engine answers again.
type engineAwaiter interface {
	AwaitEngine(ctx context.Context) error
}

// supervise waits for the instance to answer a status ping (→ running) and
// then for it to end, and applies the restart policy to unasked exits.
func (h *Host) supervise(sv Record, l *live, inst runtime.Instance) {
	ctx := h.ctx
	addr := net.JoinHostPort(h.opts.PublicHost, strconv.Itoa(sv.Port))
	tick := time.NewTicker(h.opts.PingInterval)
	defer tick.Stop()
	for running := false; !running; {
		select {
		case <-inst.Done():
			h.exited(sv, l, inst)
			return
		case <-ctx.Done():
			if h.ended(sv.ID, l, inst) {
				h.exited(sv, l, inst)
			}
			return
		case <-tick.C:
			pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			_, err := slp.Ping(pctx, addr)
			cancel()
			if err == nil {
				running = true
				l.mu.Lock()
				stopping := l.stopRequested
				l.mu.Unlock()
				if !stopping {
					if err := h.setStatus(ctx, sv.ID, StatusRunning); err != nil {
						h.log.Error("record running", "server_id", sv.ID, "err", err)
					}
				}
			}
		}
	}
	if h.ended(sv.ID, l, inst) {
		h.exited(sv, l, inst)
	}
}

// exited records the end of an instance and restarts it when it crashed.
func (h *Host) exited(sv Record, l *live, inst runtime.Instance) {
	exit := inst.Exit()
	l.mu.Lock()
	current := l.inst == inst
	if current {
		l.inst = nil
		l.startedAt = time.Time{}
	}
	// An instance that is no longer the server's (a restart stopped it and
	// started the next before this ran) ended because it was asked to, and
	// its end says nothing of the server's status: stopRequested may
	// already be the next start's false, and the next instance runs.
	stale := !current && l.inst != nil
	asked := l.stopRequested || l.stopAsked == inst
	l.mu.Unlock()
	// Use a fresh context: the host's may be cancelled (shutdown), and the
	// exit must still be recorded.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h.records.ClearRuntimeRef(ctx, sv.ID, inst.Ref()); err != nil {
		h.log.Error("clear runtime ref", "server_id", sv.ID, "err", err)
	}
	desc := describeExit(exit)
	if exit.Err != nil { // the console has its sentence, the log its detail
		h.log.Warn("server instance ended in error", "server_id", sv.ID, "err", exit.Err)
	}
	if stale {
		l.console.add("[kiln] previous instance stopped (" + desc + ")")
		return
	}
	if asked || h.ctx.Err() != nil {
		l.console.add("[kiln] server stopped (" + desc + ")")
		if err := h.setStatus(ctx, sv.ID, StatusOffline); err != nil {
			h.log.Error("record stop", "server_id", sv.ID, "err", err)
		}
		return
	}
	// A record that cannot be read now is read again until it can (or
	// kiln stops: the next start's recovery sees no instance and starts
	// the server if its desired state is running); only a server deleted
	// meanwhile is let go.
	cur, err := h.getRetried(h.ctx, sv.ID)
	if err != nil {
		return
	}
	ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if cur.DesiredState != "running" {
		h.setStatus(ctx, sv.ID, StatusOffline)
		return
	}
	if rt, ok := h.node.Runtime().(engineAwaiter); ok && errors.Is(exit.Err, runtime.ErrEngineAway) {
		h.awaitEngine(ctx, l, sv.ID, rt, exit.Err)
		return
	}
	l.console.add("[kiln] server exited unexpectedly (" + desc + ")")
	h.setStatus(ctx, sv.ID, StatusCrashed)
	h.log.Warn("server crashed", "server_id", sv.ID, "exit", desc)

	now := time.Now()
	l.mu.Lock()
	kept := l.restarts[:0]
	for _, t := range l.restarts {
		if now.Sub(t) < restartWindow {
			kept = append(kept, t)
		}
	}
	l.restarts = kept
	n := len(l.restarts)
	if n < restartLimit {
		l.restarts = append(l.restarts, now)
	}
	l.mu.Unlock()
	if n >= restartLimit {
		l.console.add(fmt.Sprintf("[kiln] crashed %d times in %s; not restarting until started by hand", restartLimit+1, restartWindow))
		return
	}
	wait := h.opts.RestartBackoff << n
	l.console.add(fmt.Sprintf("[kiln] restarting in %s (automatic restart %d of %d)", wait, n+1, restartLimit))
	after := h.opts.After(wait)
	h.goBackground(func(ctx context.Context) {
		select {
		case <-ctx.Done():
			return
		case <-after:
		}
		h.start(ctx, sv.ID)
	})
}

func describeExit(e runtime.Exit) string {
	switch {
	case e.Err != nil:
		return "error: " + told(e.Err)
	case e.Signal != "":
		return "killed by " + e.Signal
	default:
		return "exit code " + strconv.Itoa(e.Code)
	}
}

// stop ends the server: its stop command (or kill), then waits.
func (h *Host) stop(ctx context.Context, id string, kill bool) {
	l := h.liveOf(id)
	l.op.Lock()
	defer l.op.Unlock()
	inst := l.instance()
	l.mu.Lock()
	l.stopRequested = true
	l.stopAsked = inst
	l.restarts = nil
	l.mu.Unlock()
	if inst == nil {
		sv, err := h.records.Server(ctx, id)
		if err == nil && sv.Status != StatusInstalling && sv.Status != StatusOffline {
			h.setStatus(ctx, id, StatusOffline)
		}
		return
	}
	h.stopInstance(ctx, id, l, inst, kill)
}

func (h *Host) stopInstance(ctx context.Context, id string, l *live, inst runtime.Instance, kill bool) {
	if kill {
		_ = inst.Kill()
		<-inst.Done()
		return
	}
	h.setStatus(ctx, id, StatusStopping)
	stopCmd := "stop"
	if sv, err := h.records.Server(ctx, id); err == nil {
		if p, ok := h.catalog.Get(sv.Software); ok && p.StopCommand != "" {
			stopCmd = p.StopCommand
		}
	}
	if err := inst.WriteLine(stopCmd); err != nil {
		_ = inst.Stop()
	}
	select {
	case <-inst.Done():
		return
	case <-time.After(h.opts.StopTimeout):
	}
	l.console.add(fmt.Sprintf("[kiln] the server did not stop within %s; killing it", h.opts.StopTimeout))
	_ = inst.Kill()
	<-inst.Done()
}

// spec builds what the runtime needs from the record and its profile: the
// profile's variables (defaults filled in) plus the platform variables, the
// start command expanded from them, and the image for the installed Java.
func (h *Host) spec(sv Record) (runtime.Spec, error) {
	p, ok := h.catalog.Get(sv.Software)
	if !ok {
		return runtime.Spec{}, fmt.Errorf("software %q is not in the catalog", sv.Software)
	}
	vars, err := p.Env(sv.Env)
	if err != nil {
		return runtime.Spec{}, fmt.Errorf("environment of %s: %w", sv.ID, err)
	}
	kilnBin := h.opts.KilnBinary
	if kilnBin == "" {
		if kilnBin, err = os.Executable(); err != nil {
			return runtime.Spec{}, fmt.Errorf("find the kiln binary: %w", err)
		}
	}
	res := catalog.Result{Jar: sv.Jar, ArgsFile: sv.ArgsFile}
	for k, v := range res.Vars() {
		vars[k] = v
	}
	vars[catalog.VarServerMemory] = strconv.Itoa(sv.MemoryMB)
	vars[catalog.VarServerPort] = strconv.Itoa(sv.Port)
	vars[catalog.VarKilnBin] = kilnBin
	// In a container, java is the image's (chosen for the Java major); on
	// this host, the installation of that major.
	vars[catalog.VarJava] = "java"
	process := h.node.Runtime().Name() == "process"
	javaHome := ""
	if process && h.opts.Javas != nil && p.Java.Source != catalog.JavaNone {
		major := sv.JavaMajor
		if major == 0 {
			major = p.JavaFor(sv.Version)
		}
		if javaHome, err = h.opts.Javas.Home(major); err != nil {
			return runtime.Spec{}, fmt.Errorf("%s %s: %w", sv.Software, sv.Version, err)
		}
		vars[catalog.VarJava] = filepath.Join(javaHome, "bin", "java")
	}
	argv, err := p.Command(vars)
	if err != nil {
		return runtime.Spec{}, err
	}
	// No HOME: the runtime sets it to the root as the server sees it (a
	// container's mount point, never the host path).
	env := []string{"LANG=C.UTF-8"}
	if path := os.Getenv("PATH"); path != "" && process {
		env = append(env, "PATH="+path)
	}
	if javaHome != "" {
		env = append(env, "JAVA_HOME="+javaHome)
	}
	for _, k := range slices.Sorted(maps.Keys(vars)) {
		// A secret (RCON_PASSWORD) reaches the software through its
		// config file only, never its process environment.
		if k != catalog.VarKilnBin && k != catalog.VarJava && !p.SecretVar(k) {
			env = append(env, k+"="+vars[k])
		}
	}
	return runtime.Spec{
		ServerID: sv.ID, Root: h.node.Root(sv.ID), Argv: argv, Env: env,
		MemoryMB: containerMemoryMB(sv.MemoryMB), CPUPercent: sv.CPUPercent, Port: sv.Port, BindHost: h.opts.PublicHost,
		Image: imageOf(p, sv), StopCommand: cmp.Or(p.StopCommand, "stop"),
	}, nil
}

// inject appends the variables Options.Injected gives an owned server to
// env, leaving out any the environment already sets (a profile's own
// variable of the same name wins).
func (h *Host) inject(ctx context.Context, sv Record, env []string) ([]string, error) {
	if h.opts.Injected == nil || sv.ConfigurationID == "" {
		return env, nil
	}
	extra, err := h.opts.Injected.InjectedEnv(ctx, sv.ConfigurationID, sv.ResourceKey)
	if err != nil {
		return nil, fmt.Errorf("environment of %s: %w", sv.ID, err)
	}
	set := map[string]bool{}
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		set[k] = true
	}
	for _, k := range slices.Sorted(maps.Keys(extra)) {
		if !set[k] {
			env = append(env, k+"="+extra[k])
		}
	}
	return env, nil
}

// imageOf is the docker image sv runs in: the one chosen for it, else
// its profile's for the Java the game needs.
func imageOf(p catalog.Profile, sv Record) string {
	if sv.Image != "" {
		return sv.Image
	}
	return p.Image(sv.JavaMajor).Value
}

// configure writes the server's listen address and environment settings
// into its software's config file (see Installer.Configure).
func (h *Host) configure(ctx context.Context, sv Record) error {
	p, ok := h.catalog.Get(sv.Software)
	if !ok {
		return fmt.Errorf("software %q is not in the catalog", sv.Software)
	}
	env, err := p.Env(sv.Env)
	if err != nil {
		return fmt.Errorf("environment of %s: %w", sv.ID, err)
	}
	host := h.opts.BindHost
	if h.node.Runtime().Name() != "process" {
		host = "" // inside the container; the runtime publishes the port
	}
	return h.installer.Configure(ctx, p, h.node.Root(sv.ID), env, host, sv.Port)
}

// containerMemoryMB is the hard memory limit of a server whose Java heap is
// heapMB: the JVM needs room beyond its heap (metaspace, thread stacks,
// direct buffers, the code cache), so the limit is the heap plus a quarter,
// at least 128 MiB more (itzg's advice, research/network.md §1).
func containerMemoryMB(heapMB int) int {
	return heapMB + max(heapMB/4, 128)
}

// publicError is an error carrying a sentence a team may read, its detail
// being for the log only (*runtime.Error, *blob.Error).
type publicError interface {
	error
	Public() string
}

// told is what a server's team reads of err (in its console or its
// install_error): the sentence of the first error in err's chain that has
// one, else err's text. The detail is logged where err is handled.
func told(err error) string {
	if pe, ok := errors.AsType[publicError](err); ok {
		return pe.Public()
	}
	return err.Error()
}

// tell is told for server id's console and install_error, with the host's
// paths taken out of an error that has no sentence of its own (an exec or
// file error names them): the server's root becomes "/" as the team sees
// its files, the rest of Kiln's data dir "<data dir>".
func (h *Host) tell(id string, err error) string {
	msg := told(err)
	root := h.node.Root(id)
	msg = strings.ReplaceAll(msg, root+"/", "/")
	msg = strings.ReplaceAll(msg, root, "/")
	if dir := filepath.Dir(filepath.Dir(root)); len(dir) > 1 {
		msg = strings.ReplaceAll(msg, dir, "<data dir>")
	}
	return msg
}
