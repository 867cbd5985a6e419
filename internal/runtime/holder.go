package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// RunHolder runs a server's holder: what `kiln shim DIR` does (doc.go,
// "Holders"). kiln starts it with the server's state directory DIR, the
// launch (holderLaunch) on stdin, stdout a pipe for the report and stderr
// the holder's log. It starts itself again (/proc/self/exe shim --hold
// DIR) in a session of its own and returns, so that the holder is no
// child of kiln's; the binary must run RunHolder as its `shim` command.
// The holder starts the game, reports, serves the protocol on DIR's
// socket until the game has ended and kiln has collected its exit, then
// returns. ctx ending (SIGTERM or SIGINT of the holder) ends the game
// with SIGTERM, and the holder returns once it has ended. version is the
// kiln version, told to whoever connects.
func RunHolder(ctx context.Context, args []string, version string, stdin, stdout, stderr *os.File) error {
	hold := len(args) == 2 && args[0] == "--hold"
	if !hold && len(args) != 1 {
		return errors.New("usage: kiln shim DIR (started by kiln serve, not by hand)")
	}
	dir := args[len(args)-1]
	if !filepath.IsAbs(dir) {
		return fmt.Errorf("state directory %q: not absolute", dir)
	}
	if !hold {
		cmd := exec.Command("/proc/self/exe", "shim", "--hold", dir)
		cmd.Args[0] = "kiln"
		cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, stdout, stderr
		cmd.Dir = "/"
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		if err := cmd.Start(); err != nil {
			_ = json.NewEncoder(stdout).Encode(holderStarted{Error: "start the holder: " + err.Error()})
			return fmt.Errorf("start the holder: %w", err)
		}
		return cmd.Process.Release()
	}
	// A hangup is no reason to end a game (the holder has no terminal).
	signal.Ignore(syscall.SIGHUP)
	log := slog.New(slog.NewTextHandler(stderr, nil))
	h, err := startHolder(dir, version, stdin, log)
	if err != nil {
		log.Error("holder not started", "err", err)
		_ = json.NewEncoder(stdout).Encode(holderStarted{Error: err.Error()})
		return err
	}
	if err := json.NewEncoder(stdout).Encode(h.report); err != nil {
		// kiln gave up on this start: the game must not run unknown.
		log.Error("report the start", "err", err)
		_ = h.signal("KILL")
		<-h.ended
		h.ln.Close()
		_ = os.Remove(filepath.Join(dir, holderSocket))
		return fmt.Errorf("report the start: %w", err)
	}
	// kiln's pipes are let go: nothing more is read or written there,
	// and a kiln that went away must not matter.
	if null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0); err == nil {
		_ = unix.Dup2(int(null.Fd()), int(stdin.Fd()))
		_ = unix.Dup2(int(null.Fd()), int(stdout.Fd()))
		null.Close()
	}
	return h.serve(ctx)
}

// holder is the state of a holder process: its game, the last lines of
// its console and its exit.
type holder struct {
	log     *slog.Logger
	dir     string
	launch  holderLaunch
	version string
	ln      *net.UnixListener
	report  holderStarted
	cmd     *exec.Cmd
	stdinMu sync.Mutex // one console write at a time
	stdin   *os.File
	ended   chan struct{} // closed once the exit is recorded

	mu       sync.Mutex
	ring     [holderRing]string
	next     uint64 // the number of the next line (lines count from 1)
	exited   bool
	exit     Exit
	wake     chan struct{} // closed at the next line or the exit
	released bool
	release  chan struct{} // closed at the release
	conns    map[net.Conn]struct{}
	handlers sync.WaitGroup
}

// startHolder reads the launch, listens on the socket of dir and starts
// the game.
func startHolder(dir, version string, stdin io.Reader, log *slog.Logger) (*holder, error) {
	h := &holder{log: log, dir: dir, version: version, next: 1, ended: make(chan struct{}),
		wake: make(chan struct{}), release: make(chan struct{}), conns: map[net.Conn]struct{}{}}
	if err := json.NewDecoder(io.LimitReader(stdin, 16<<20)).Decode(&h.launch); err != nil {
		return nil, fmt.Errorf("read the launch: %w", err)
	}
	l := h.launch
	h.log = log.With("server_id", l.ServerID)
	if len(l.Argv) == 0 {
		return nil, errors.New("empty command")
	}
	ln, err := listenHolder(dir)
	if err != nil {
		return nil, err
	}
	h.ln = ln
	spec := Spec{ServerID: l.ServerID, Root: l.Root, Argv: l.Argv, Env: l.Env, User: l.User}
	var cg *cgroup
	if l.Cgroup != nil {
		host := &cgroupHost{v2: l.Cgroup.V2, kiln: l.Cgroup.Kiln}
		host.noCloneInto.Store(!l.Cgroup.CloneInto)
		cg = host.cgroup(l.ServerID)
	}
	c, cg, notes, err := spawn(spec, cg, l.Sandbox)
	if err != nil {
		ln.Close()
		_ = os.Remove(filepath.Join(dir, holderSocket))
		return nil, err
	}
	h.cmd, h.stdin = c.cmd, c.stdin
	pid := c.cmd.Process.Pid
	ticks, _ := procStartTime(pid)
	h.report = holderStarted{PID: pid, Start: ticks, Cgroup: cg != nil,
		CloneIntoRefused: notes.cloneIntoRefused, Unlimited: notes.unlimited}
	h.log.Info("game started", "pid", pid, "cgroup", cg != nil, "kiln_version", version)
	outDone := make(chan struct{})
	go func() {
		defer close(outDone)
		readLines(c.out, h.add)
		c.out.Close()
	}()
	go func() {
		exit := exitOf(c.cmd.Wait())
		if cg != nil {
			if exit.Signal == syscall.SIGKILL.String() && cg.oomKilled() {
				exit.Signal += " (out of memory)"
			}
			// The server is over: what it left running is killed with its
			// cgroup (it would hold the console pipe open).
			if err := cg.remove(); err != nil {
				h.log.Warn("remove the cgroup of a server", "err", err)
			}
		}
		<-outDone
		h.stdin.Close()
		h.mu.Lock()
		h.exited, h.exit = true, exit
		h.wakeAll()
		h.mu.Unlock()
		h.log.Info("game ended", "code", exit.Code, "signal", exit.Signal)
		close(h.ended)
	}()
	return h, nil
}

// listenHolder listens on the socket of dir, in place of a stale one.
func listenHolder(dir string) (*net.UnixListener, error) {
	path := filepath.Join(dir, holderSocket)
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("remove a stale socket: %w", err)
	}
	addr, release, err := socketAddr(dir)
	if err != nil {
		return nil, fmt.Errorf("listen: %w", err)
	}
	defer release()
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: addr, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("listen: %w", err)
	}
	// The name listened on may be one through a descriptor, gone by then:
	// serve removes the socket by its path.
	ln.SetUnlinkOnClose(false)
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("listen: %w", err)
	}
	return ln, nil
}

// add keeps one console line; the oldest goes beyond holderRing.
func (h *holder) add(line string) {
	h.mu.Lock()
	h.ring[h.next%holderRing] = line
	h.next++
	h.wakeAll()
	h.mu.Unlock()
}

// wakeAll wakes whoever waits for a change; h.mu is held.
func (h *holder) wakeAll() {
	close(h.wake)
	h.wake = make(chan struct{})
}

// since returns the lines from number from on that are still kept, the
// number of the first of them, and a channel closed at the next change;
// exit is set once the game has ended and every line it printed is kept.
func (h *holder) since(from uint64) (lines []string, first uint64, exit *Exit, wake <-chan struct{}) {
	h.mu.Lock()
	defer h.mu.Unlock()
	oldest := uint64(1)
	if h.next > holderRing {
		oldest = h.next - holderRing
	}
	first = max(from, oldest)
	for n := first; n < h.next; n++ {
		lines = append(lines, h.ring[n%holderRing])
	}
	if h.exited {
		e := h.exit
		exit = &e
	}
	return lines, first, exit, h.wake
}

func (h *holder) status() *holderStatus {
	h.mu.Lock()
	defer h.mu.Unlock()
	st := &holderStatus{ServerID: h.launch.ServerID, PID: h.report.PID, Start: h.report.Start, Cgroup: h.report.Cgroup,
		StopCommand: h.launch.StopCommand, Exited: h.exited, Next: h.next}
	if h.exited {
		st.Exit = toWire(h.exit)
	}
	return st
}

// serve answers connections until the exit is collected, or until ctx
// ends and the game (told to end) has ended.
func (h *holder) serve(ctx context.Context) error {
	go func() {
		for {
			c, err := h.ln.Accept()
			if err != nil {
				return
			}
			h.mu.Lock()
			if h.released {
				h.mu.Unlock()
				c.Close()
				continue
			}
			h.conns[c] = struct{}{}
			h.handlers.Add(1)
			h.mu.Unlock()
			go h.handle(c)
		}
	}()
	select {
	case <-h.release:
		h.log.Info("exit collected")
	case <-ctx.Done():
		h.log.Info("told to end; ending the game")
		_ = h.signal("TERM")
		<-h.ended
	}
	h.ln.Close()
	_ = os.Remove(filepath.Join(h.dir, holderSocket))
	// Attached consoles get the exit (it is recorded); then every
	// connection goes.
	done := make(chan struct{})
	go func() { h.handlers.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(2 * time.Second):
	}
	h.mu.Lock()
	h.released = true
	for c := range h.conns {
		c.Close()
	}
	h.mu.Unlock()
	<-done
	return nil
}

// handle answers the one request of a connection.
func (h *holder) handle(c net.Conn) {
	defer func() {
		c.Close()
		h.mu.Lock()
		delete(h.conns, c)
		h.mu.Unlock()
		h.handlers.Done()
	}()
	_ = c.SetDeadline(time.Now().Add(holderIOTimeout))
	enc := json.NewEncoder(c)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(holderHello{Shim: "kiln", Protocol: holderProtocol, Version: h.version, PID: os.Getpid()}); err != nil {
		return
	}
	var req holderRequest
	if err := json.NewDecoder(c).Decode(&req); err != nil {
		return
	}
	reply := func(err error) {
		r := holderReply{}
		if err != nil {
			r.Error = err.Error()
		}
		_ = enc.Encode(r)
	}
	switch req.Op {
	case opStatus:
		_ = enc.Encode(holderReply{Status: h.status()})
	case opWrite:
		reply(h.write(req.Line))
	case opSignal:
		if req.Signal != "TERM" && req.Signal != "KILL" {
			reply(fmt.Errorf("signal %q: want TERM or KILL", req.Signal))
			return
		}
		reply(h.signal(req.Signal))
	case opAttach:
		h.attach(c, enc, req.From)
	case opRelease:
		h.mu.Lock()
		exited, released := h.exited, h.released
		if exited && !released {
			h.released = true
			close(h.release)
		}
		h.mu.Unlock()
		if !exited {
			reply(errors.New("the game still runs"))
			return
		}
		reply(nil)
	default:
		reply(fmt.Errorf("unknown op %q", req.Op))
	}
}

// write sends one console line to the game.
func (h *holder) write(line string) error {
	if strings.ContainsAny(line, "\r\n") {
		return errors.New("a console command must be a single line")
	}
	h.mu.Lock()
	exited := h.exited
	h.mu.Unlock()
	if exited {
		return errors.New("the server process has ended")
	}
	h.stdinMu.Lock()
	defer h.stdinMu.Unlock()
	_ = h.stdin.SetWriteDeadline(time.Now().Add(holderIOTimeout))
	if _, err := io.WriteString(h.stdin, line+"\n"); err != nil {
		return fmt.Errorf("write to console: %w", err)
	}
	return nil
}

// signal sends SIGTERM or SIGKILL to the game's process group, unless it
// has ended.
func (h *holder) signal(name string) error {
	sig := syscall.SIGTERM
	if name == "KILL" {
		sig = syscall.SIGKILL
	}
	h.mu.Lock()
	exited := h.exited
	h.mu.Unlock()
	if exited {
		return nil
	}
	if err := syscall.Kill(-h.report.PID, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("signal %v: %w", sig, err)
	}
	return nil
}

// attach streams the console from line from on, then the exit. A reader
// that falls holderRing lines behind misses those lines (never blocks
// the game); one that reads nothing for holderIOTimeout is let go.
func (h *holder) attach(c net.Conn, enc *json.Encoder, from uint64) {
	h.mu.Lock()
	next := h.next
	h.mu.Unlock()
	if err := enc.Encode(holderReply{Next: next}); err != nil {
		return
	}
	_ = c.SetDeadline(time.Time{}) // writes get one each below
	// kiln sends nothing more; a read ends when it hangs up.
	gone := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, c)
		close(gone)
	}()
	for {
		lines, first, exit, wake := h.since(from)
		for i, l := range lines {
			_ = c.SetWriteDeadline(time.Now().Add(holderIOTimeout))
			if err := enc.Encode(holderEvent{Seq: first + uint64(i), Line: l}); err != nil {
				return
			}
		}
		from = first + uint64(len(lines))
		if exit != nil {
			_ = c.SetWriteDeadline(time.Now().Add(holderIOTimeout))
			_ = enc.Encode(holderEvent{Exit: toWire(*exit)})
			return
		}
		select {
		case <-wake:
		case <-gone:
			return
		}
	}
}
