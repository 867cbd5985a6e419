package runtime

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// maxLine caps one console line.
const maxLine = 8 << 10

// Process is the process runtime.
type Process struct {
	log  *slog.Logger
	opts ProcessOptions

	probe sync.Once
	cg    *cgroupHost // nil: servers run without cgroup limits

	sandboxProbe sync.Once
	sandboxCmd   []string // nil: no sandbox (none configured, or the host refuses it)

	mu      sync.Mutex
	closed  bool
	held    map[*heldInstance]struct{} // attached to their holders (held.go)
	readers sync.WaitGroup             // their console readers
}

// ProcessOptions tunes the process runtime.
type ProcessOptions struct {
	// CgroupRoot is where the cgroup filesystems are mounted;
	// DefaultCgroupRoot when empty.
	CgroupRoot string
	// Holder is the command that runs a server's holder (RunHolder; kiln
	// serve passes /proc/self/exe shim): each server then runs under a
	// holder of its own, outlives kiln and is re-adopted by the next one
	// (doc.go, "Holders"). Empty: servers are kiln's own children and end
	// with it.
	Holder []string
	// StateDir is where holders keep their sockets and logs, one
	// directory per server (<data-dir>/run for kiln serve). It must be a
	// directory only kiln's user can enter: whoever reaches a holder's
	// socket commands its server. Required with Holder.
	StateDir string
	// Sandbox is the command of the trampoline (RunSandbox; kiln serve
	// passes /proc/self/exe sandbox-exec) that a server with a user of
	// its own (Spec.User) starts through, to get a private /tmp and
	// /dev/shm (doc.go, "Private /tmp"). It is run by the process that
	// starts the game, kiln or its holder: both are the same binary.
	// Empty: no sandbox, servers share the host's /tmp.
	Sandbox []string
}

// NewProcess returns the process runtime with the default options.
func NewProcess(log *slog.Logger) *Process { return NewProcessWith(log, ProcessOptions{}) }

// NewProcessWith returns the process runtime with opts.
func NewProcessWith(log *slog.Logger, opts ProcessOptions) *Process {
	if opts.CgroupRoot == "" {
		opts.CgroupRoot = DefaultCgroupRoot
	}
	if opts.StateDir != "" {
		if abs, err := filepath.Abs(opts.StateDir); err == nil {
			opts.StateDir = abs
		}
	}
	return &Process{log: log, opts: opts, held: map[*heldInstance]struct{}{}}
}

// Name implements Runtime.
func (p *Process) Name() string { return "process" }

// cgroups returns where servers get their cgroups, probing the host at the
// first call; nil when the host does not allow them, which is logged once:
// a warning at every start would say nothing new.
func (p *Process) cgroups(ctx context.Context) *cgroupHost {
	p.probe.Do(func() {
		h, err := probeCgroups(p.opts.CgroupRoot)
		if err != nil {
			p.log.WarnContext(ctx, "server memory and cpu limits are not enforced: no cgroups for kiln on this host (JVM flags still cap the heap)",
				"cgroup_root", p.opts.CgroupRoot, "err", err)
			return
		}
		version := "v1"
		if h.v2 {
			version = "v2"
		}
		p.log.InfoContext(ctx, "server memory and cpu limits enforced with cgroups", "cgroup_version", version, "cgroup", h.kiln[0])
		p.cg = h
	})
	return p.cg
}

// sandbox returns the trampoline servers with a user of their own start
// through, probing the host at the first call; nil when there is none:
// none configured, or the host refuses mount namespaces or the mounts
// (logged once, loudly: those servers share the host's /tmp).
func (p *Process) sandbox(ctx context.Context) []string {
	if len(p.opts.Sandbox) == 0 {
		return nil
	}
	p.sandboxProbe.Do(func() {
		if err := probeSandbox(p.opts.Sandbox); err != nil {
			p.log.ErrorContext(ctx, "game servers share the host's /tmp and /dev/shm: this host refuses kiln a mount namespace with tmpfs of their own (a container without CAP_SYS_ADMIN, an AppArmor or seccomp profile that forbids mounts); one team's code can read what another's leaves there and fill them for all",
				"err", err)
			return
		}
		p.log.InfoContext(ctx, "game servers with users of their own get a private /tmp and /dev/shm")
		p.sandboxCmd = p.opts.Sandbox
	})
	return p.sandboxCmd
}

// sandboxFor is the trampoline spec's server starts through: none
// without a user of its own (it shares kiln's user, and so its /tmp).
func (p *Process) sandboxFor(ctx context.Context, spec Spec) []string {
	if spec.User == nil {
		return nil
	}
	return p.sandbox(ctx)
}

// unlimited warns that one server runs without limits although the host
// has cgroups: something about that server (its id, a limit the kernel
// refused) went wrong.
func (p *Process) unlimited(ctx context.Context, serverID string, err error) {
	p.log.WarnContext(ctx, "server runs without memory and cpu limits: its cgroup could not be set up", "server_id", serverID, "err", err)
}

// Start implements Runtime. The server gets its own cgroup with the limits
// of spec when the host allows it; when not, it runs all the same.
func (p *Process) Start(ctx context.Context, spec Spec, console func(string)) (Instance, error) {
	if len(spec.Argv) == 0 {
		return nil, errors.New("start: empty command")
	}
	if len(p.opts.Holder) > 0 {
		return p.startHeld(ctx, spec, console)
	}
	sandbox := p.sandboxFor(ctx, spec)
	cg := p.newCgroup(ctx, spec)
	c, cg, notes, err := spawn(spec, cg, sandbox)
	p.logNotes(ctx, spec.ServerID, notes)
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", spec.ServerID, err)
	}
	cmd := c.cmd
	pi := &procInstance{cmd: cmd, stdin: c.stdin, cg: cg, done: make(chan struct{}), pid: cmd.Process.Pid}
	pi.startTicks, _ = procStartTime(pi.pid)
	outDone := make(chan struct{})
	go func() {
		defer close(outDone)
		readLines(c.out, console)
		c.out.Close()
	}()
	go func() {
		exit := exitOf(cmd.Wait())
		if cg != nil {
			if exit.Signal == syscall.SIGKILL.String() && cg.oomKilled() {
				exit.Signal += " (out of memory)"
			}
			// The server is over: what it left running is killed with its
			// cgroup (it would hold the console pipe open).
			if err := cg.remove(); err != nil {
				p.log.Warn("remove the cgroup of a server", "server_id", spec.ServerID, "err", err)
			}
		}
		<-outDone
		pi.mu.Lock()
		pi.exit = exit
		pi.mu.Unlock()
		close(pi.done)
	}()
	return pi, nil
}

// newCgroup makes the cgroup of spec's server with its limits, or returns
// nil when the host or that server cannot have one (warned).
func (p *Process) newCgroup(ctx context.Context, spec Spec) *cgroup {
	h := p.cgroups(ctx)
	if h == nil {
		return nil
	}
	cg, err := h.create(spec)
	if err != nil {
		p.unlimited(ctx, spec.ServerID, err)
		return nil
	}
	return cg
}

// logNotes logs what a start had to give up of its cgroup.
func (p *Process) logNotes(ctx context.Context, serverID string, n spawnNotes) {
	if n.cloneIntoRefused != "" {
		p.log.InfoContext(ctx, "starting in a cgroup is refused; servers are moved into theirs after the start", "err", n.cloneIntoRefused)
	}
	if n.unlimited != "" {
		p.unlimited(ctx, serverID, errors.New(n.unlimited))
	}
}

// child is a started command and its console pipes.
type child struct {
	cmd   *exec.Cmd
	stdin *os.File // the write end of its stdin
	out   *os.File // stdout and stderr
}

// spawnNotes says what a start gave up of its cgroup (empty: nothing).
type spawnNotes struct {
	// cloneIntoRefused: clone3 with CLONE_INTO_CGROUP was refused (why);
	// the process was moved into its cgroup after the start, and so will
	// later ones be (cgroupHost.noCloneInto).
	cloneIntoRefused string
	// unlimited: the process could not be moved into its cgroup (why);
	// it runs without limits.
	unlimited string
}

// spawn starts the command of spec in cg, which it returns, or nil when the
// process could not be placed there (or on a start error, after removing
// it). On v2 the child is created in its cgroup (clone3 with
// CLONE_INTO_CGROUP), so nothing it does escapes the limits; else it is
// moved there right after the start. Both the process runtime and a
// holder (holder.go) start games with it; a server with a user of its
// own goes through sandbox when there is one (startChild).
func spawn(spec Spec, cg *cgroup, sandbox []string) (*child, *cgroup, spawnNotes, error) {
	var n spawnNotes
	if cg == nil {
		c, err := startChild(spec, -1, sandbox)
		return c, nil, n, err
	}
	if cg.host.v2 && !cg.host.noCloneInto.Load() {
		if dir, err := os.Open(cg.dirs[0]); err == nil {
			c, err := startChild(spec, int(dir.Fd()), sandbox)
			dir.Close()
			if err == nil {
				return c, cg, n, nil
			}
			if _, ok := errors.AsType[syscall.Errno](err); !ok {
				_ = cg.remove()
				return nil, nil, n, err
			}
			// Either clone3 or CLONE_INTO_CGROUP is refused, or the command
			// cannot run at all: a start without tells which.
			c, err2 := startChild(spec, -1, sandbox)
			if err2 != nil {
				_ = cg.remove()
				return nil, nil, n, err2
			}
			cg.host.noCloneInto.Store(true)
			n.cloneIntoRefused = err.Error()
			return c, attachChild(cg, c, &n), n, nil
		}
	}
	c, err := startChild(spec, -1, sandbox)
	if err != nil {
		_ = cg.remove()
		return nil, nil, n, err
	}
	return c, attachChild(cg, c, &n), n, nil
}

// attachChild moves the started child into cg and returns cg, or nil when
// it could not (then the child runs without limits, said in n).
func attachChild(cg *cgroup, c *child, n *spawnNotes) *cgroup {
	if err := cg.attach(c.cmd.Process.Pid); err != nil {
		n.unlimited = err.Error()
		_ = cg.remove() // kills the child if it made it into one hierarchy
		return nil
	}
	return cg
}

// startChild starts the command of spec in its own process group, in the
// cgroup open as cgroupFD unless that is negative. A server with a user
// of its own starts through sandbox when there is one: the trampoline
// is the process started (in a mount namespace of its own, as root),
// and has executed the game, the same process, when startChild returns.
func startChild(spec Spec, cgroupFD int, sandbox []string) (*child, error) {
	cmd := exec.Command(spec.Argv[0], spec.Argv[1:]...)
	var launch *sandboxLaunch
	if u := spec.User; u != nil && len(sandbox) > 0 {
		// The command is looked up here, as without a sandbox.
		if cmd.Err != nil {
			return nil, cmd.Err
		}
		launch = &sandboxLaunch{Path: cmd.Path, Argv: cmd.Args, Env: WithHome(spec.Env, spec.Root), Dir: spec.Root, UID: u.UID, GID: u.GID}
		cmd = exec.Command(sandbox[0], sandbox[1:]...)
		// The trampoline runs as root: nothing of the game's
		// environment (LD_PRELOAD, GODEBUG) is its business.
		cmd.Env = []string{}
	} else {
		cmd.Env = WithHome(spec.Env, spec.Root)
	}
	cmd.Dir = spec.Root
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if cgroupFD >= 0 {
		cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, cgroupFD
	}
	if u := spec.User; u != nil && launch == nil {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: u.UID, Gid: u.GID, Groups: []uint32{}}
	}
	// Pipes of our own rather than cmd.StdinPipe: the write end is an
	// *os.File, so a write to a game that reads no more can time out.
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return nil, err
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, pw, pw
	if launch != nil {
		err = startSandboxed(cmd, launch)
	} else {
		err = startNoNewPrivs(cmd)
	}
	inR.Close()
	pw.Close()
	if err != nil {
		inW.Close()
		pr.Close()
		return nil, err
	}
	return &child{cmd: cmd, stdin: inW, out: pr}, nil
}

// startNoNewPrivs starts cmd with no_new_privs set (PR_SET_NO_NEW_PRIVS:
// no setuid binary, file capability or LSM transition can give the game
// more than it starts with). os/exec has no such option; the bit belongs
// to a thread and a child inherits its creating thread's, so the start
// runs on a thread locked for it and marked first. The thread is unlocked
// afterwards, not ended: the child's parent-death signal (Pdeathsig)
// fires when its creating thread ends. It goes back to the pool marked,
// which costs kiln nothing: it executes nothing that gains privileges.
func startNoNewPrivs(cmd *exec.Cmd) error {
	errc := make(chan error, 1)
	go func() {
		goruntime.LockOSThread()
		defer goruntime.UnlockOSThread()
		if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
			errc <- fmt.Errorf("set no_new_privs: %w", err)
			return
		}
		errc <- cmd.Start()
	}()
	return <-errc
}

// readLines calls fn for each line of r, splitting lines over maxLine.
func readLines(r io.Reader, fn func(string)) {
	br := bufio.NewReaderSize(r, maxLine)
	split := false // the previous piece was cut at maxLine
	for {
		line, err := br.ReadSlice('\n')
		text := bytes.TrimRight(line, "\r\n")
		// The end of a line that filled the buffer exactly is no line.
		if len(line) > 0 && !(split && len(text) == 0) {
			fn(string(text))
		}
		split = errors.Is(err, bufio.ErrBufferFull)
		if err != nil && !split {
			return
		}
	}
}

func exitOf(err error) Exit {
	if err == nil {
		return Exit{Code: 0}
	}
	if ee, ok := errors.AsType[*exec.ExitError](err); ok {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return Exit{Code: -1, Signal: ws.Signal().String()}
		}
		return Exit{Code: ee.ExitCode()}
	}
	return Exit{Code: -1, Err: err}
}

// Adopt implements Runtime. A server under a holder (a ref "holder:…")
// is re-attached through it (held.go). A process of another ref (a kiln
// without holders left it, or one ran without) cannot be re-attached, so
// a survivor that matches ref is killed (with its group), so is whatever
// still runs in the server's cgroup, and ErrNotAdoptable returned.
func (p *Process) Adopt(ctx context.Context, spec Spec, ref string, console func(string)) (Instance, error) {
	if rest, ok := strings.CutPrefix(ref, heldRefPrefix); ok {
		return p.adoptHeld(ctx, spec, rest, console)
	}
	p.killSurvivor(ctx, spec, ref)
	return nil, ErrNotAdoptable
}

// killSurvivor kills the process ref names if it still runs (with its
// group) and whatever still runs in the server's cgroup.
func (p *Process) killSurvivor(ctx context.Context, spec Spec, ref string) {
	if pid, ticks, ok := parseRef(ref); ok && procAlive(pid, ticks) {
		p.log.WarnContext(ctx, "killing a server process left by a previous kiln serve", "server_id", spec.ServerID, "pid", pid)
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		waitGone(pid, ticks, 10*time.Second)
	}
	if h := p.cgroups(ctx); h != nil && validCgroupName(spec.ServerID) {
		if err := h.cgroup(spec.ServerID).remove(); err != nil {
			p.log.WarnContext(ctx, "remove the cgroup left by a previous kiln serve", "server_id", spec.ServerID, "err", err)
		}
	}
}

// procInstance is a server that is kiln's own child (no holder).
type procInstance struct {
	cmd        *exec.Cmd
	stdin      io.WriteCloser
	cg         *cgroup // nil: no cgroup
	pid        int
	startTicks uint64
	done       chan struct{}
	meter      meter

	mu   sync.Mutex
	exit Exit
}

// Outlives reports whether the instance runs on once kiln has exited:
// never, a child of kiln dies with it (parent-death signal).
func (pi *procInstance) Outlives() bool { return false }

func (pi *procInstance) Ref() string {
	return strconv.Itoa(pi.pid) + ":" + strconv.FormatUint(pi.startTicks, 10)
}

func parseRef(ref string) (int, uint64, bool) {
	a, b, ok := strings.Cut(ref, ":")
	if !ok {
		return 0, 0, false
	}
	pid, err1 := strconv.Atoi(a)
	ticks, err2 := strconv.ParseUint(b, 10, 64)
	return pid, ticks, err1 == nil && err2 == nil && pid > 1
}

func (pi *procInstance) WriteLine(line string) error {
	select {
	case <-pi.done:
		return errors.New("the server process has ended")
	default:
	}
	if strings.ContainsAny(line, "\r\n") {
		return errors.New("a console command must be a single line")
	}
	if _, err := io.WriteString(pi.stdin, line+"\n"); err != nil {
		return fmt.Errorf("write to console: %w", err)
	}
	return nil
}

func (pi *procInstance) Stop() error { return pi.signal(syscall.SIGTERM) }
func (pi *procInstance) Kill() error { return pi.signal(syscall.SIGKILL) }

func (pi *procInstance) signal(sig syscall.Signal) error {
	select {
	case <-pi.done:
		return nil
	default:
	}
	if err := syscall.Kill(-pi.pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("signal %v: %w", sig, err)
	}
	return nil
}

func (pi *procInstance) Done() <-chan struct{} { return pi.done }

func (pi *procInstance) Exit() Exit {
	pi.mu.Lock()
	defer pi.mu.Unlock()
	return pi.exit
}

// Stats implements Instance (meter.stats).
func (pi *procInstance) Stats(context.Context) (Stats, error) {
	select {
	case <-pi.done:
		return Stats{}, nil
	default:
	}
	return pi.meter.stats(pi.pid, pi.cg)
}

// meter samples the CPU and memory of a server's main process pid (and
// its cgroup).
type meter struct {
	mu        sync.Mutex
	lastCPU   uint64
	lastStamp time.Time
}

// stats reads CPU since the previous call (percent of one core) from /proc
// and memory from cg (the whole process tree; nil: none) or the resident
// memory of pid from /proc, whichever is larger.
func (m *meter) stats(pid int, cg *cgroup) (Stats, error) {
	ticks, rss, err := procUsage(pid)
	if err != nil {
		return Stats{}, err
	}
	now := time.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	var cpu float64
	if !m.lastStamp.IsZero() {
		dt := now.Sub(m.lastStamp).Seconds()
		if dt > 0 {
			cpu = float64(ticks-m.lastCPU) / clockTicks / dt * 100
		}
	}
	m.lastCPU, m.lastStamp = ticks, now
	// The cgroup counts the whole process tree, but on cgroup v1 the
	// server is moved into it after the start, and what it allocated
	// before stays charged where it was: the larger figure is the truth.
	mem := rss
	if cg != nil {
		if n, err := cg.memory(); err == nil {
			mem = max(mem, n)
		}
	}
	return Stats{CPU: cpu, MemoryBytes: mem}, nil
}

// clockTicks is USER_HZ, 100 on every Linux platform Go supports.
const clockTicks = 100

// procStat returns the fields of /proc/pid/stat after the command name.
func procStat(pid int) ([]string, error) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return nil, err
	}
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return nil, errors.New("malformed /proc stat")
	}
	return strings.Fields(string(data[i+1:])), nil
}

// procStartTime is field 22 (starttime): with the pid it identifies a
// process uniquely across pid reuse.
func procStartTime(pid int) (uint64, error) {
	f, err := procStat(pid)
	if err != nil {
		return 0, err
	}
	if len(f) < 20 {
		return 0, errors.New("short /proc stat")
	}
	return strconv.ParseUint(f[19], 10, 64)
}

// procUsage returns utime+stime in ticks and RSS in bytes.
func procUsage(pid int) (uint64, int64, error) {
	f, err := procStat(pid)
	if err != nil {
		return 0, 0, err
	}
	if len(f) < 22 {
		return 0, 0, errors.New("short /proc stat")
	}
	ut, _ := strconv.ParseUint(f[11], 10, 64)
	st, _ := strconv.ParseUint(f[12], 10, 64)
	rssPages, _ := strconv.ParseInt(f[21], 10, 64)
	return ut + st, rssPages * int64(os.Getpagesize()), nil
}

// procAlive reports whether the process pid with that start time still
// runs (a zombie has ended).
func procAlive(pid int, ticks uint64) bool {
	f, err := procStat(pid)
	if err != nil || len(f) < 20 {
		return false
	}
	cur, err := strconv.ParseUint(f[19], 10, 64)
	return err == nil && cur == ticks && f[0] != "Z"
}

// waitGone waits until pid with that start time no longer runs.
func waitGone(pid int, ticks uint64, limit time.Duration) {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) && procAlive(pid, ticks) {
		time.Sleep(20 * time.Millisecond)
	}
}
