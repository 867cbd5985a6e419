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
}

// ProcessOptions tunes the process runtime.
type ProcessOptions struct {
	// CgroupRoot is where the cgroup filesystems are mounted;
	// DefaultCgroupRoot when empty.
	CgroupRoot string
}

// NewProcess returns the process runtime with the default options.
func NewProcess(log *slog.Logger) *Process { return NewProcessWith(log, ProcessOptions{}) }

// NewProcessWith returns the process runtime with opts.
func NewProcessWith(log *slog.Logger, opts ProcessOptions) *Process {
	if opts.CgroupRoot == "" {
		opts.CgroupRoot = DefaultCgroupRoot
	}
	return &Process{log: log, opts: opts}
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
	var cg *cgroup
	if h := p.cgroups(ctx); h != nil {
		var err error
		if cg, err = h.create(spec); err != nil {
			p.unlimited(ctx, spec.ServerID, err)
			cg = nil
		}
	}
	c, cg, err := p.spawn(ctx, spec, cg)
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

// child is a started command and its console pipes.
type child struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *os.File // stdout and stderr
}

// spawn starts the command of spec in cg, which it returns, or nil when the
// process could not be placed there (or on a start error, after removing
// it). On v2 the child is created in its cgroup (clone3 with
// CLONE_INTO_CGROUP), so nothing it does escapes the limits; else it is
// moved there right after the start.
func (p *Process) spawn(ctx context.Context, spec Spec, cg *cgroup) (*child, *cgroup, error) {
	if cg == nil {
		c, err := startChild(spec, -1)
		return c, nil, err
	}
	if cg.host.v2 && !cg.host.noCloneInto.Load() {
		if dir, err := os.Open(cg.dirs[0]); err == nil {
			c, err := startChild(spec, int(dir.Fd()))
			dir.Close()
			if err == nil {
				return c, cg, nil
			}
			if _, ok := errors.AsType[syscall.Errno](err); !ok {
				_ = cg.remove()
				return nil, nil, err
			}
			// Either clone3 or CLONE_INTO_CGROUP is refused, or the command
			// cannot run at all: a start without tells which.
			c, err2 := startChild(spec, -1)
			if err2 != nil {
				_ = cg.remove()
				return nil, nil, err2
			}
			cg.host.noCloneInto.Store(true)
			p.log.InfoContext(ctx, "starting in a cgroup is refused; servers are moved into theirs after the start", "err", err)
			return c, p.attach(ctx, spec, cg, c), nil
		}
	}
	c, err := startChild(spec, -1)
	if err != nil {
		_ = cg.remove()
		return nil, nil, err
	}
	return c, p.attach(ctx, spec, cg, c), nil
}

// attach moves the started child into cg and returns cg, or nil when it
// could not (then the child runs without limits).
func (p *Process) attach(ctx context.Context, spec Spec, cg *cgroup, c *child) *cgroup {
	if err := cg.attach(c.cmd.Process.Pid); err != nil {
		p.unlimited(ctx, spec.ServerID, err)
		_ = cg.remove() // kills the child if it made it into one hierarchy
		return nil
	}
	return cg
}

// startChild starts the command of spec in its own process group, in the
// cgroup open as cgroupFD unless that is negative.
func startChild(spec Spec, cgroupFD int) (*child, error) {
	cmd := exec.Command(spec.Argv[0], spec.Argv[1:]...)
	cmd.Dir = spec.Root
	cmd.Env = WithHome(spec.Env, spec.Root)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if cgroupFD >= 0 {
		cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, cgroupFD
	}
	if u := spec.User; u != nil {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: u.UID, Gid: u.GID, Groups: []uint32{}}
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		stdin.Close()
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := startNoNewPrivs(cmd); err != nil {
		pr.Close()
		pw.Close()
		return nil, err
	}
	pw.Close()
	return &child{cmd: cmd, stdin: stdin, out: pr}, nil
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

// Adopt implements Runtime: a process cannot be re-attached, so a survivor
// that matches ref is killed (with its group), so is whatever still runs in
// the server's cgroup, and ErrNotAdoptable returned.
func (p *Process) Adopt(ctx context.Context, spec Spec, ref string, _ func(string)) (Instance, error) {
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
	return nil, ErrNotAdoptable
}

// Remove implements Runtime.
func (p *Process) Remove(context.Context, string) error { return nil }

type procInstance struct {
	cmd        *exec.Cmd
	stdin      io.WriteCloser
	cg         *cgroup // nil: no cgroup
	pid        int
	startTicks uint64
	done       chan struct{}

	mu        sync.Mutex
	exit      Exit
	lastCPU   uint64
	lastStamp time.Time
}

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

// Stats reads CPU since the previous call (percent of one core) from /proc
// and memory from the cgroup (the whole process tree) or the resident
// memory of the main process from /proc, whichever is larger.
func (pi *procInstance) Stats(context.Context) (Stats, error) {
	select {
	case <-pi.done:
		return Stats{}, nil
	default:
	}
	ticks, rss, err := procUsage(pi.pid)
	if err != nil {
		return Stats{}, err
	}
	now := time.Now()
	pi.mu.Lock()
	defer pi.mu.Unlock()
	var cpu float64
	if !pi.lastStamp.IsZero() {
		dt := now.Sub(pi.lastStamp).Seconds()
		if dt > 0 {
			cpu = float64(ticks-pi.lastCPU) / clockTicks / dt * 100
		}
	}
	pi.lastCPU, pi.lastStamp = ticks, now
	// The cgroup counts the whole process tree, but on cgroup v1 the
	// server is moved into it after the start, and what it allocated
	// before stays charged where it was: the larger figure is the truth.
	mem := rss
	if pi.cg != nil {
		if n, err := pi.cg.memory(); err == nil {
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
