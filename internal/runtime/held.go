package runtime

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// holderStartTimeout bounds the wait for a holder's report: it comes as
// soon as the game's process exists, long before the game is ready.
const holderStartTimeout = 30 * time.Second

// holderDir is the state directory of serverID's holder.
func (p *Process) holderDir(serverID string) (string, error) {
	if p.opts.StateDir == "" {
		return "", errors.New("the process runtime has no state directory for holders")
	}
	if !validCgroupName(serverID) {
		return "", fmt.Errorf("server id %q cannot name a directory", serverID)
	}
	return filepath.Join(p.opts.StateDir, serverID), nil
}

// startHeld starts spec under a holder of its own (ProcessOptions.Holder).
func (p *Process) startHeld(ctx context.Context, spec Spec, console func(string)) (Instance, error) {
	dir, err := p.holderDir(spec.ServerID)
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", spec.ServerID, err)
	}
	if err := os.MkdirAll(p.opts.StateDir, 0o700); err != nil {
		return nil, fmt.Errorf("start %s: %w", spec.ServerID, err)
	}
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("start %s: %w", spec.ServerID, err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return nil, fmt.Errorf("start %s: %w", spec.ServerID, err)
	}
	// A holder still there is a leftover (a start whose record a killed
	// kiln never made): its game ends first, so that the server never
	// runs twice.
	p.endHolder(ctx, dir, spec.ServerID)
	sandbox := p.sandboxFor(ctx, spec)
	cg := p.newCgroup(ctx, spec)
	rep, err := p.launchHolder(ctx, dir, spec, cg, sandbox)
	if err != nil {
		if cg != nil {
			_ = cg.remove()
		}
		return nil, fmt.Errorf("start %s: %w", spec.ServerID, err)
	}
	if rep.CloneIntoRefused != "" && cg != nil {
		cg.host.noCloneInto.Store(true)
	}
	p.logNotes(ctx, spec.ServerID, spawnNotes{cloneIntoRefused: rep.CloneIntoRefused, unlimited: rep.Unlimited})
	if !rep.Cgroup {
		cg = nil
	}
	inst, err := p.attachHeld(ctx, spec.ServerID, dir, rep.PID, rep.Start, cg, 1, console)
	if err != nil {
		p.endHolder(context.WithoutCancel(ctx), dir, spec.ServerID)
		return nil, fmt.Errorf("start %s: %w", spec.ServerID, err)
	}
	return inst, nil
}

// launchHolder runs the holder command for dir, gives it the launch and
// reads its report. The command starts the holder and exits (RunHolder),
// so the holder is no child of kiln's and nothing is left to reap.
func (p *Process) launchHolder(ctx context.Context, dir string, spec Spec, cg *cgroup, sandbox []string) (holderStarted, error) {
	l := holderLaunch{ServerID: spec.ServerID, Root: spec.Root, Argv: spec.Argv, Env: spec.Env, User: spec.User,
		StopCommand: cmp.Or(spec.StopCommand, "stop"), Sandbox: sandbox}
	if cg != nil {
		l.Cgroup = &launchCgroup{V2: cg.host.v2, Kiln: cg.host.kiln, CloneInto: !cg.host.noCloneInto.Load()}
	}
	logPath := filepath.Join(dir, holderLog)
	logf, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return holderStarted{}, fmt.Errorf("holder log: %w", err)
	}
	defer logf.Close()
	inR, inW, err := os.Pipe()
	if err != nil {
		return holderStarted{}, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return holderStarted{}, err
	}
	defer outR.Close()
	cmd := exec.Command(p.opts.Holder[0], append(p.opts.Holder[1:], dir)...)
	cmd.Dir = "/"
	// The holder looks the game's command up on kiln's PATH, as kiln did;
	// nothing else of kiln's environment (its settings, secrets among
	// them) is its business.
	cmd.Env = []string{}
	if path, ok := os.LookupEnv("PATH"); ok {
		cmd.Env = append(cmd.Env, "PATH="+path)
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	err = cmd.Start()
	inR.Close()
	outW.Close()
	if err != nil {
		inW.Close()
		return holderStarted{}, fmt.Errorf("run the holder: %w", err)
	}
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	err = json.NewEncoder(inW).Encode(l)
	inW.Close()
	var rep holderStarted
	if err == nil {
		deadline := time.Now().Add(holderStartTimeout)
		if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
			deadline = d
		}
		_ = outR.SetReadDeadline(deadline)
		err = json.NewDecoder(outR).Decode(&rep)
	}
	werr := <-waited // it exits once the holder runs (or failed to)
	switch {
	case err != nil && werr != nil:
		return rep, fmt.Errorf("the holder failed (%v; see %s): %w", werr, logPath, err)
	case err != nil:
		// A holder that could not report ends its game (its report
		// fails on the closed pipe).
		return rep, fmt.Errorf("read the holder's report (see %s): %w", logPath, err)
	case rep.Error != "":
		return rep, errors.New(rep.Error)
	}
	return rep, nil
}

// attachHeld attaches to the console of the holder of dir from line from
// on (0: the oldest it keeps) and returns the instance. The lines printed
// before the attach have reached console when it returns.
func (p *Process) attachHeld(ctx context.Context, serverID, dir string, pid int, ticks uint64, cg *cgroup, from uint64, console func(string)) (*heldInstance, error) {
	hc, err := dialHolder(ctx, dir)
	if err != nil {
		return nil, err
	}
	r, err := hc.send(holderRequest{Op: opAttach, From: from})
	if err != nil {
		hc.Close()
		return nil, err
	}
	hi := &heldInstance{p: p, dir: dir, serverID: serverID, pid: pid, ticks: ticks, cg: cg, hc: hc,
		console: console, done: make(chan struct{}), holderVersion: hc.hello.Version}
	// Replay what is there (bounded by the greeting's deadline).
	last := uint64(0)
	if from > 0 {
		last = from - 1
	}
	for last+1 < r.Next {
		var ev holderEvent
		if err := hc.dec.Decode(&ev); err != nil {
			hc.Close()
			return nil, fmt.Errorf("read the console from the holder: %w", err)
		}
		if ev.Exit != nil {
			hi.finish(ev.Exit.exit())
			return hi, nil
		}
		console(ev.Line)
		last = ev.Seq
	}
	_ = hc.c.SetDeadline(time.Time{})
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		hc.Close()
		return nil, errors.New("the process runtime is closed")
	}
	p.held[hi] = struct{}{}
	p.readers.Add(1)
	p.mu.Unlock()
	go hi.read()
	return hi, nil
}

// adoptHeld re-attaches to the server under the holder that ref
// ("<pid>:<start time>" of the game) names. A holder that is gone took
// its game with it: ErrNotAdoptable. One that holds another game than ref
// says, or speaks a protocol this kiln does not, is ended with its game
// (the caller starts the server again, never twice): ErrNotAdoptable.
func (p *Process) adoptHeld(ctx context.Context, spec Spec, ref string, console func(string)) (Instance, error) {
	pid, ticks, ok := parseRef(ref)
	dir, err := p.holderDir(spec.ServerID)
	if !ok || err != nil {
		p.killSurvivor(ctx, spec, ref)
		return nil, ErrNotAdoptable
	}
	hc, err := dialHolder(ctx, dir)
	if errors.Is(err, ErrNoHolder) {
		// Its game ended with it (parent-death signal); should one run
		// all the same, it goes now.
		p.killSurvivor(ctx, spec, ref)
		return nil, ErrNotAdoptable
	}
	var st *holderStatus
	if err == nil {
		var r holderReply
		r, err = hc.send(holderRequest{Op: opStatus})
		hc.Close()
		st = r.Status
		if err == nil && (st == nil || st.PID != pid || st.Start != ticks || st.ServerID != spec.ServerID) {
			err = fmt.Errorf("it holds another process than the recorded %s", ref)
		}
	}
	if err != nil {
		p.log.WarnContext(ctx, "a server's holder cannot be re-attached; ending it", "server_id", spec.ServerID, "err", err)
		p.endHolder(ctx, dir, spec.ServerID)
		p.killSurvivor(ctx, spec, ref)
		return nil, ErrNotAdoptable
	}
	var cg *cgroup
	if h := p.cgroups(ctx); h != nil && st.Cgroup {
		cg = h.cgroup(spec.ServerID)
	}
	hi, err := p.attachHeld(ctx, spec.ServerID, dir, pid, ticks, cg, 0, console)
	if err != nil {
		return nil, fmt.Errorf("re-attach %s: %w", spec.ServerID, err)
	}
	p.log.InfoContext(ctx, "re-attached to a server's holder", "server_id", spec.ServerID, "pid", pid,
		"holder_version", hi.holderVersion, "exited", st.Exited)
	return hi, nil
}

// endHolder ends the game of the holder of dir, if one answers, and the
// holder with it.
func (p *Process) endHolder(ctx context.Context, dir, serverID string) {
	hc, err := dialHolder(ctx, dir)
	if errors.Is(err, ErrNoHolder) {
		return
	}
	holderPID := 0
	if pe, ok := errors.AsType[*ProtocolError](err); ok {
		holderPID = pe.PID
	} else if err == nil {
		holderPID = hc.hello.PID
		hc.Close()
	}
	p.log.WarnContext(ctx, "ending a server's holder and its game", "server_id", serverID, "holder_pid", holderPID)
	if err == nil {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*holderIOTimeout)
		_, err = stopHeld(ctx, dir, true, holderIOTimeout)
		cancel()
	}
	if err != nil && holderPID > 0 {
		// A holder that does not answer goes with SIGKILL, its game with
		// it (parent-death signal).
		ticks, terr := procStartTime(holderPID)
		if terr == nil && syscall.Kill(holderPID, syscall.SIGKILL) == nil {
			waitGone(holderPID, ticks, holderIOTimeout)
		}
	}
}

// ErrNoHolder: no holder answers for the server (it was never started
// under one, or its holder has ended).
var ErrNoHolder = errors.New("no holder answers for the server")

// HeldServers lists the ids of the servers with a holder's socket in
// stateDir (a holder that has ended meanwhile answers ErrNoHolder to
// StopHeld).
func HeldServers(stateDir string) ([]string, error) {
	entries, err := os.ReadDir(stateDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list holders: %w", err)
	}
	var ids []string
	for _, e := range entries {
		if !e.IsDir() || !validCgroupName(e.Name()) {
			continue
		}
		if _, err := os.Lstat(filepath.Join(stateDir, e.Name(), holderSocket)); err == nil {
			ids = append(ids, e.Name())
		}
	}
	return ids, nil
}

// StopHeld stops the game that serverID's holder in stateDir keeps,
// without kiln serve: its stop command (the one it was started with) or,
// with kill, SIGKILL; then SIGKILL after timeout. It collects the exit,
// so the holder ends too, and returns it. Errors: ErrNoHolder,
// *ProtocolError.
func StopHeld(ctx context.Context, stateDir, serverID string, kill bool, timeout time.Duration) (Exit, error) {
	if !validCgroupName(serverID) {
		return Exit{}, fmt.Errorf("server id %q cannot name a directory", serverID)
	}
	return stopHeld(ctx, filepath.Join(stateDir, serverID), kill, timeout)
}

func stopHeld(ctx context.Context, dir string, kill bool, timeout time.Duration) (Exit, error) {
	r, err := holderCall(ctx, dir, holderRequest{Op: opStatus})
	if err != nil {
		return Exit{}, err
	}
	st := r.Status
	if st == nil {
		return Exit{}, errors.New("the holder sent no status")
	}
	if !st.Exited {
		hc, err := dialHolder(ctx, dir)
		if err != nil {
			return Exit{}, err
		}
		defer hc.Close()
		if _, err := hc.send(holderRequest{Op: opAttach, From: st.Next}); err != nil {
			return Exit{}, err
		}
		if kill {
			_, err = holderCall(ctx, dir, holderRequest{Op: opSignal, Signal: "KILL"})
		} else if _, err = holderCall(ctx, dir, holderRequest{Op: opWrite, Line: cmp.Or(st.StopCommand, "stop")}); err != nil {
			_, err = holderCall(ctx, dir, holderRequest{Op: opSignal, Signal: "TERM"})
		}
		if err != nil {
			return Exit{}, err
		}
		exit, err := awaitExit(ctx, hc, dir, timeout)
		if err != nil {
			return Exit{}, fmt.Errorf("wait for the game to end: %w", err)
		}
		st.Exit = exit
	}
	if _, err := holderCall(ctx, dir, holderRequest{Op: opRelease}); err != nil {
		return Exit{}, err
	}
	return st.Exit.exit(), nil
}

// awaitExit reads an attached console, lines skipped, until the exit;
// past timeout the game is killed.
func awaitExit(ctx context.Context, hc *holderConn, dir string, timeout time.Duration) (*wireExit, error) {
	type result struct {
		exit *wireExit
		err  error
	}
	// Bounds the reader (a read that timed out would leave the decoder
	// broken, so the kill below does not wait on a deadline of its own).
	_ = hc.c.SetReadDeadline(time.Now().Add(timeout + 2*holderIOTimeout))
	res := make(chan result, 1)
	go func() {
		for {
			var ev holderEvent
			if err := hc.dec.Decode(&ev); err != nil {
				res <- result{nil, err}
				return
			}
			if ev.Exit != nil {
				res <- result{ev.Exit, nil}
				return
			}
		}
	}()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case r := <-res:
		return r.exit, r.err
	case <-t.C:
	}
	if _, err := holderCall(ctx, dir, holderRequest{Op: opSignal, Signal: "KILL"}); err != nil {
		hc.Close()
		<-res
		return nil, err
	}
	r := <-res
	return r.exit, r.err
}

// heldInstance is a server under a holder: its console comes over the
// holder's socket, and it runs on without kiln.
type heldInstance struct {
	p             *Process
	dir, serverID string
	pid           int
	ticks         uint64
	cg            *cgroup // nil: none
	hc            *holderConn
	console       func(string)
	holderVersion string
	done          chan struct{}
	meter         meter

	mu   sync.Mutex
	exit Exit
}

func (hi *heldInstance) Ref() string {
	return heldRefPrefix + strconv.Itoa(hi.pid) + ":" + strconv.FormatUint(hi.ticks, 10)
}

// Outlives reports whether the instance runs on once kiln has exited:
// always, its holder keeps it.
func (hi *heldInstance) Outlives() bool { return true }

// StartedAt is when the game started (its start time after the host's
// boot, to 10 ms; zero when unknown), so that an uptime counts from there
// and not from a re-attach.
func (hi *heldInstance) StartedAt() time.Time {
	boot, err := bootTime()
	if err != nil {
		return time.Time{}
	}
	return boot.Add(time.Duration(hi.ticks) * time.Second / clockTicks)
}

// bootTime is when the host booted (btime of /proc/stat, in seconds).
func bootTime() (time.Time, error) {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return time.Time{}, err
	}
	for line := range strings.Lines(string(data)) {
		if v, ok := strings.CutPrefix(line, "btime "); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				return time.Time{}, fmt.Errorf("btime of /proc/stat: %w", err)
			}
			return time.Unix(n, 0), nil
		}
	}
	return time.Time{}, errors.New("no btime in /proc/stat")
}

// read delivers the console until the exit, the holder's end, or Close.
func (hi *heldInstance) read() {
	defer hi.p.readers.Done()
	for {
		var ev holderEvent
		err := hi.hc.dec.Decode(&ev)
		if err == nil && ev.Exit == nil {
			hi.console(ev.Line)
			continue
		}
		hi.p.mu.Lock()
		closed := hi.p.closed
		delete(hi.p.held, hi)
		hi.p.mu.Unlock()
		switch {
		case err == nil:
			hi.finish(ev.Exit.exit())
		case closed:
			// Let go: the holder keeps the game, the next kiln re-attaches.
		default:
			hi.lost()
		}
		return
	}
}

// finish records the exit the holder reported, lets the holder go and
// closes Done.
func (hi *heldInstance) finish(exit Exit) {
	hi.hc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), holderIOTimeout)
	if _, err := holderCall(ctx, hi.dir, holderRequest{Op: opRelease}); err != nil && !errors.Is(err, ErrNoHolder) {
		hi.p.log.Warn("let a server's holder go", "server_id", hi.serverID, "err", err)
	}
	cancel()
	hi.mu.Lock()
	hi.exit = exit
	hi.mu.Unlock()
	close(hi.done)
}

// lost ends an instance whose holder went away without reporting an exit
// (killed): its game went with it (parent-death signal), and whatever it
// left in its cgroup goes now.
func (hi *heldInstance) lost() {
	hi.hc.Close()
	hi.p.log.Warn("a server's holder ended unexpectedly", "server_id", hi.serverID, "pid", hi.pid)
	if procAlive(hi.pid, hi.ticks) {
		_ = syscall.Kill(-hi.pid, syscall.SIGKILL)
		waitGone(hi.pid, hi.ticks, holderIOTimeout)
	}
	if hi.cg != nil {
		if err := hi.cg.remove(); err != nil {
			hi.p.log.Warn("remove the cgroup of a server", "server_id", hi.serverID, "err", err)
		}
	}
	hi.mu.Lock()
	hi.exit = Exit{Code: -1, Err: errors.New("its holder ended unexpectedly")}
	hi.mu.Unlock()
	close(hi.done)
}

func (hi *heldInstance) WriteLine(line string) error {
	select {
	case <-hi.done:
		return errors.New("the server process has ended")
	default:
	}
	if strings.ContainsAny(line, "\r\n") {
		return errors.New("a console command must be a single line")
	}
	ctx, cancel := context.WithTimeout(context.Background(), holderIOTimeout)
	defer cancel()
	if _, err := holderCall(ctx, hi.dir, holderRequest{Op: opWrite, Line: line}); err != nil {
		return fmt.Errorf("write to console: %w", err)
	}
	return nil
}

func (hi *heldInstance) Stop() error { return hi.signal("TERM") }
func (hi *heldInstance) Kill() error { return hi.signal("KILL") }

func (hi *heldInstance) signal(name string) error {
	select {
	case <-hi.done:
		return nil
	default:
	}
	ctx, cancel := context.WithTimeout(context.Background(), holderIOTimeout)
	defer cancel()
	if _, err := holderCall(ctx, hi.dir, holderRequest{Op: opSignal, Signal: name}); err != nil && !errors.Is(err, ErrNoHolder) {
		return fmt.Errorf("signal %s: %w", name, err)
	}
	return nil
}

func (hi *heldInstance) Done() <-chan struct{} { return hi.done }

func (hi *heldInstance) Exit() Exit {
	hi.mu.Lock()
	defer hi.mu.Unlock()
	return hi.exit
}

// Stats implements Instance: the game's figures, read by kiln from /proc
// and its cgroup as for a child (meter.stats).
func (hi *heldInstance) Stats(context.Context) (Stats, error) {
	select {
	case <-hi.done:
		return Stats{}, nil
	default:
	}
	return hi.meter.stats(hi.pid, hi.cg)
}

// Close lets go of the servers under holders (they run on, for the next
// kiln to re-attach) and waits for their console readers. Their Done is
// never closed. Instances of kiln's own children are not affected.
func (p *Process) Close() error {
	p.mu.Lock()
	p.closed = true
	for hi := range p.held {
		hi.hc.Close()
	}
	p.mu.Unlock()
	p.readers.Wait()
	return nil
}

// HeldServers lists the ids of the servers with a holder in the state
// directory (HeldServers of it), so that the caller can end those it no
// longer knows (Remove).
func (p *Process) HeldServers() ([]string, error) {
	if p.opts.StateDir == "" {
		return nil, nil
	}
	return HeldServers(p.opts.StateDir)
}

// Remove implements Runtime: the state directory of the server's holder
// goes (a holder still there is ended first, with its game).
func (p *Process) Remove(ctx context.Context, serverID string) error {
	if p.opts.StateDir == "" {
		return nil
	}
	dir, err := p.holderDir(serverID)
	if err != nil {
		return nil
	}
	p.endHolder(ctx, dir, serverID)
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("remove the holder's state of %s: %w", serverID, err)
	}
	return nil
}
