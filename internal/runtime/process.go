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
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// maxLine caps one console line.
const maxLine = 8 << 10

// Process is the process runtime.
type Process struct {
	log *slog.Logger
}

// NewProcess returns the process runtime.
func NewProcess(log *slog.Logger) *Process { return &Process{log: log} }

// Name implements Runtime.
func (p *Process) Name() string { return "process" }

// Start implements Runtime.
func (p *Process) Start(ctx context.Context, spec Spec, console func(string)) (Instance, error) {
	if len(spec.Argv) == 0 {
		return nil, errors.New("start: empty command")
	}
	cmd := exec.Command(spec.Argv[0], spec.Argv[1:]...)
	cmd.Dir = spec.Root
	cmd.Env = spec.Env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", spec.ServerID, err)
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", spec.ServerID, err)
	}
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		pr.Close()
		pw.Close()
		return nil, fmt.Errorf("start %s: %w", spec.ServerID, err)
	}
	pw.Close()
	pi := &procInstance{cmd: cmd, stdin: stdin, done: make(chan struct{}), pid: cmd.Process.Pid}
	pi.startTicks, _ = procStartTime(pi.pid)
	outDone := make(chan struct{})
	go func() {
		defer close(outDone)
		readLines(pr, console)
		pr.Close()
	}()
	go func() {
		err := cmd.Wait()
		<-outDone
		pi.mu.Lock()
		pi.exit = exitOf(err)
		pi.mu.Unlock()
		close(pi.done)
	}()
	return pi, nil
}

// readLines calls fn for each line of r, splitting lines over maxLine.
func readLines(r io.Reader, fn func(string)) {
	br := bufio.NewReaderSize(r, maxLine)
	for {
		line, err := br.ReadSlice('\n')
		if len(line) > 0 {
			fn(string(bytes.TrimRight(line, "\r\n")))
		}
		if err != nil && !errors.Is(err, bufio.ErrBufferFull) {
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
// that matches ref is killed (with its group) and ErrNotAdoptable returned.
func (p *Process) Adopt(_ context.Context, spec Spec, ref string, _ func(string)) (Instance, error) {
	if pid, ticks, ok := parseRef(ref); ok {
		if cur, err := procStartTime(pid); err == nil && cur == ticks {
			p.log.Warn("killing a server process left by a previous kiln serve", "server_id", spec.ServerID, "pid", pid)
			_ = syscall.Kill(-pid, syscall.SIGKILL)
			waitGone(pid, ticks, 10*time.Second)
		}
	}
	return nil, ErrNotAdoptable
}

// Remove implements Runtime.
func (p *Process) Remove(context.Context, string) error { return nil }

type procInstance struct {
	cmd        *exec.Cmd
	stdin      io.WriteCloser
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

// Stats reads /proc: CPU since the previous call (percent of one core) and
// resident memory of the main process.
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
	return Stats{CPU: cpu, MemoryBytes: rss}, nil
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

// waitGone waits until pid with that start time no longer exists.
func waitGone(pid int, ticks uint64, limit time.Duration) {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		cur, err := procStartTime(pid)
		if err != nil || cur != ticks {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}
