package runtime

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// heldProcess is a process runtime whose servers run under holders (the
// test holder, testdata/shim) in stateDir; it is closed at the end of
// the test.
func heldProcess(t *testing.T, stateDir string) *Process {
	t.Helper()
	p := NewProcessWith(quietLog(), ProcessOptions{Holder: []string{shim, "shim"}, StateDir: stateDir})
	t.Cleanup(func() { p.Close() })
	return p
}

// heldServer is an instance under a holder and its console.
type heldServer struct {
	inst *heldInstance
	con  *console
	dir  string // the holder's state directory
}

// startHeld starts spec on p (which has holders). At the end of the test
// the holder is ended with its game, and its log must show no data race.
func startHeld(t *testing.T, p *Process, spec Spec) *heldServer {
	t.Helper()
	con := &console{}
	inst, err := p.Start(t.Context(), spec, con.add)
	if err != nil {
		t.Fatalf("Start(%q) = %v", spec.Argv, err)
	}
	hi := inst.(*heldInstance)
	dir := filepath.Join(p.opts.StateDir, spec.ServerID)
	t.Cleanup(func() { endHeld(t, p.opts.StateDir, spec.ServerID) })
	return &heldServer{inst: hi, con: con, dir: dir}
}

// endHeld kills the game of a holder still there and checks its log.
func endHeld(t *testing.T, stateDir, id string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	if _, err := StopHeld(ctx, stateDir, id, true, waitLimit); err != nil && !errors.Is(err, ErrNoHolder) {
		t.Errorf("StopHeld(%s) = %v", id, err)
	}
	if b, _ := os.ReadFile(filepath.Join(stateDir, id, holderLog)); strings.Contains(string(b), "DATA RACE") {
		t.Errorf("the holder's log shows a data race:\n%s", b)
	}
}

func (s *heldServer) exit(t *testing.T) Exit {
	t.Helper()
	select {
	case <-s.inst.Done():
		return s.inst.Exit()
	case <-time.After(waitLimit):
		t.Fatalf("instance did not end within %s; console:\n%s", waitLimit, s.con.dump())
		return Exit{}
	}
}

// holderPID is the pid of the holder of dir, from its greeting.
func holderPID(t *testing.T, dir string) int {
	t.Helper()
	hc, err := dialHolder(t.Context(), dir)
	if err != nil {
		t.Fatalf("dial the holder: %v", err)
	}
	hc.Close()
	return hc.hello.PID
}

// statField is field n (1-based, as in proc(5)) of /proc/<pid>/stat.
func statField(t *testing.T, pid, n int) int {
	t.Helper()
	f, err := procStat(pid)
	if err != nil {
		t.Fatal(err)
	}
	v, err := strconv.Atoi(f[n-3])
	if err != nil {
		t.Fatalf("field %d of /proc/%d/stat: %v", n, pid, err)
	}
	return v
}

// call makes one request of the holder of dir, failing the test on an
// error.
func call(t *testing.T, dir string, req holderRequest) holderReply {
	t.Helper()
	r, err := holderCall(t.Context(), dir, req)
	if err != nil {
		t.Fatalf("holder %s: %v", req.Op, err)
	}
	return r
}

// holderGone waits until the holder of dir no longer answers and has
// removed its socket.
func holderGone(t *testing.T, dir string) {
	t.Helper()
	eventually(t, "the holder ends", func() bool {
		_, err := os.Lstat(filepath.Join(dir, holderSocket))
		_, derr := holderCall(t.Context(), dir, holderRequest{Op: opStatus})
		return errors.Is(err, os.ErrNotExist) && errors.Is(derr, ErrNoHolder)
	})
}

func TestHeldConsole(t *testing.T) {
	t.Parallel()
	x := strings.Repeat("x", maxLine)
	p := heldProcess(t, t.TempDir())
	s := startHeld(t, p, testSpec(t, "out:one", "err:two", "out:dos\r", "long:10000", "out:", "exit:0"))
	if got := s.exit(t); got != (Exit{}) {
		t.Fatalf("Exit() = %+v, want code 0", got)
	}
	want := []string{"one", "two", "dos", x, x[:10000-maxLine], ""}
	if got := s.con.all(); !slices.Equal(got, want) {
		t.Errorf("console lines = %q, want %q", shorten(got), shorten(want))
	}
	// The exit is collected: the holder ends.
	holderGone(t, s.dir)
	if err := s.inst.WriteLine("too late"); err == nil {
		t.Error("WriteLine after the end = nil, want an error")
	}
}

// TestHeldReattach: a server under a holder outlives the runtime that
// started it (Close, as kiln serve exits) and another one re-attaches:
// the same process, the console replayed with the line it printed while
// nobody was attached, commands, stats and a stop.
func TestHeldReattach(t *testing.T) {
	t.Parallel()
	state := t.TempDir()
	p1 := heldProcess(t, state)
	spec := testSpec(t, "out:before")
	started := time.Now()
	s := startHeld(t, p1, spec)
	s.con.wait(t, "ready")
	ref := s.inst.Ref()
	if !regexp.MustCompile(`^holder:[1-9][0-9]*:[0-9]+$`).MatchString(ref) {
		t.Fatalf("Ref() = %q, want holder:pid:starttime", ref)
	}
	pid := s.inst.pid
	if want := fmt.Sprintf("holder:%d:%d", pid, startTime(t, pid)); ref != want {
		t.Errorf("Ref() = %q, want %q", ref, want)
	}
	// The holder is no child of ours, nor in our session; the game is
	// the holder's child.
	hp := holderPID(t, s.dir)
	if ppid := statField(t, hp, 4); ppid == os.Getpid() {
		t.Errorf("the holder's parent is this process; want it detached")
	}
	if sid := statField(t, hp, 6); sid == statField(t, os.Getpid(), 6) {
		t.Errorf("the holder is in this process's session %d", sid)
	}
	if ppid := statField(t, pid, 4); ppid != hp {
		t.Errorf("the game's parent is %d, want the holder %d", ppid, hp)
	}
	if err := p1.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.inst.Done():
		t.Fatal("Done closed by Close: the instance must be let go, not ended")
	default:
	}

	// A line printed while no kiln is attached.
	next := call(t, s.dir, holderRequest{Op: opStatus}).Status.Next
	call(t, s.dir, holderRequest{Op: opWrite, Line: "out:while detached"})
	eventually(t, "the game prints the line", func() bool {
		return call(t, s.dir, holderRequest{Op: opStatus}).Status.Next > next
	})

	p2 := heldProcess(t, state)
	con := &console{}
	adopted := time.Now()
	inst, err := p2.Adopt(t.Context(), spec, ref, con.add)
	if err != nil {
		t.Fatalf("Adopt(%q) = %v", ref, err)
	}
	// Replayed before Adopt returned.
	if got, want := con.all(), []string{"before", "ready", "while detached"}; !slices.Equal(got, want) {
		t.Errorf("console after Adopt = %q, want %q", got, want)
	}
	hi := inst.(*heldInstance)
	if inst.Ref() != ref || hi.pid != pid || !procAlive(pid, startTime(t, pid)) {
		t.Errorf("adopted %s (pid %d), want %s still running", inst.Ref(), hi.pid, ref)
	}
	if err := inst.WriteLine("say hello"); err != nil {
		t.Fatalf("WriteLine = %v", err)
	}
	con.wait(t, "echo: say hello")
	if st, err := inst.Stats(t.Context()); err != nil || st.MemoryBytes <= 0 {
		t.Errorf("Stats = %+v, %v; want memory > 0", st, err)
	}
	// Between the Start and the Adopt (/proc counts a process's start in
	// clock ticks: a second's slack before the Start).
	if at := hi.StartedAt(); at.After(adopted) || at.Before(started.Add(-time.Second)) {
		t.Errorf("StartedAt() = %v, want the game's start, after the Start at %v and before the Adopt at %v", at, started, adopted)
	}
	if err := inst.Stop(); err != nil {
		t.Fatalf("Stop = %v", err)
	}
	select {
	case <-inst.Done():
	case <-time.After(waitLimit):
		t.Fatal("the adopted instance did not end after Stop")
	}
	if got, want := inst.Exit(), (Exit{Code: -1, Signal: "terminated"}); got != want {
		t.Errorf("Exit() = %+v, want %+v", got, want)
	}
	holderGone(t, s.dir)
	if _, err := NewProcessWith(quietLog(), ProcessOptions{StateDir: state}).Adopt(t.Context(), spec, ref, func(string) {}); !errors.Is(err, ErrNotAdoptable) {
		t.Errorf("Adopt after the end = %v, want ErrNotAdoptable", err)
	}
}

// TestHeldExitWhileDetached: a game that ends while no kiln is attached
// is reported, with its code, at the next Adopt; then its holder ends.
func TestHeldExitWhileDetached(t *testing.T) {
	t.Parallel()
	state := t.TempDir()
	p1 := heldProcess(t, state)
	spec := testSpec(t)
	s := startHeld(t, p1, spec)
	s.con.wait(t, "ready")
	p1.Close()
	call(t, s.dir, holderRequest{Op: opWrite, Line: "exit:3"})
	eventually(t, "the holder records the exit", func() bool {
		return call(t, s.dir, holderRequest{Op: opStatus}).Status.Exited
	})
	// It waits for the exit to be collected.
	if r, err := holderCall(t.Context(), s.dir, holderRequest{Op: opWrite, Line: "x"}); err == nil {
		t.Errorf("write to an ended game = %+v, want an error", r)
	}

	con := &console{}
	inst, err := heldProcess(t, state).Adopt(t.Context(), spec, s.inst.Ref(), con.add)
	if err != nil {
		t.Fatalf("Adopt = %v", err)
	}
	select {
	case <-inst.Done():
	case <-time.After(waitLimit):
		t.Fatal("the adopted instance of an ended game is not done")
	}
	if got := inst.Exit(); got != (Exit{Code: 3}) {
		t.Errorf("Exit() = %+v, want code 3", got)
	}
	if got := con.all(); !slices.Equal(got, []string{"ready"}) {
		t.Errorf("console = %q, want the game's line", got)
	}
	holderGone(t, s.dir)
}

// TestHeldHolderKilled: a holder killed outright takes its game with it
// (parent-death signal); the attached instance ends, and its ref cannot
// be adopted.
func TestHeldHolderKilled(t *testing.T) {
	t.Parallel()
	state := t.TempDir()
	p := heldProcess(t, state)
	spec := testSpec(t)
	s := startHeld(t, p, spec)
	s.con.wait(t, "ready")
	pid, ticks := s.inst.pid, startTime(t, s.inst.pid)
	if err := syscall.Kill(holderPID(t, s.dir), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if got := s.exit(t); got.Err == nil {
		t.Errorf("Exit() = %+v, want an error saying the holder ended", got)
	}
	eventually(t, "the game ends with its holder", func() bool { return !procAlive(pid, ticks) })
	if _, err := heldProcess(t, state).Adopt(t.Context(), spec, s.inst.Ref(), func(string) {}); !errors.Is(err, ErrNotAdoptable) {
		t.Errorf("Adopt = %v, want ErrNotAdoptable", err)
	}
}

// TestHeldHolderTerminated: SIGTERM to a holder (a host shutting down)
// ends its game with SIGTERM, reported to the attached kiln, and then
// the holder.
func TestHeldHolderTerminated(t *testing.T) {
	t.Parallel()
	p := heldProcess(t, t.TempDir())
	s := startHeld(t, p, testSpec(t))
	s.con.wait(t, "ready")
	if err := syscall.Kill(holderPID(t, s.dir), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if got, want := s.exit(t), (Exit{Code: -1, Signal: "terminated"}); got != want {
		t.Errorf("Exit() = %+v, want %+v", got, want)
	}
	holderGone(t, s.dir)
}

// TestHeldLeftover: a start finds a holder of the same server still there
// (its record lost with a killed kiln): that game ends before the new one
// starts, never two at once.
func TestHeldLeftover(t *testing.T) {
	t.Parallel()
	state := t.TempDir()
	spec := testSpec(t)
	p1 := heldProcess(t, state)
	old := startHeld(t, p1, spec)
	old.con.wait(t, "ready")
	oldPID, oldTicks := old.inst.pid, startTime(t, old.inst.pid)
	p1.Close()
	s := startHeld(t, heldProcess(t, state), spec)
	s.con.wait(t, "ready")
	if procAlive(oldPID, oldTicks) {
		t.Error("the leftover game still runs beside the new one")
	}
	if s.inst.pid == oldPID {
		t.Errorf("new game pid %d = the old one", s.inst.pid)
	}
}

func TestHeldStartErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		edit func(*Spec)
		want string
	}{
		{"missing binary", func(s *Spec) { s.Argv = []string{"/nonexistent/kiln-test-server"} }, "no such file"},
		{"binary not in PATH", func(s *Spec) { s.Argv = []string{"kiln-test-no-such-command"} }, "not found"},
		{"missing root", func(s *Spec) { s.Root = "/nonexistent/kiln-test-root" }, "no such file"},
		{"bad server id", func(s *Spec) { s.ServerID = "../x" }, "cannot name"},
	}
	state := t.TempDir()
	p := heldProcess(t, state)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			spec := testSpec(t)
			tt.edit(&spec)
			inst, err := p.Start(t.Context(), spec, func(string) {})
			if err == nil {
				_ = inst.Kill()
				t.Fatalf("Start(%q in %s) = nil error, want one", spec.Argv, spec.Root)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Start error = %q, want it to say %q", err, tt.want)
			}
		})
	}
	t.Cleanup(func() {
		if ids, err := HeldServers(state); err != nil || len(ids) != 0 {
			t.Errorf("HeldServers after failed starts = %q, %v; want none", ids, err)
		}
	})
}

// TestHeldStop: StopHeld stops a game without kiln serve, with the stop
// command it was started with, or kills it after the timeout.
func TestHeldStop(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		stop string
		kill bool
		want Exit
	}{
		{"stop command", "exit:0", false, Exit{Code: 0}},
		{"ignored stop command", "nothing", false, Exit{Code: -1, Signal: "killed"}},
		{"kill", "exit:0", true, Exit{Code: -1, Signal: "killed"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			state := t.TempDir()
			p := heldProcess(t, state)
			spec := testSpec(t)
			spec.StopCommand = tt.stop
			s := startHeld(t, p, spec)
			s.con.wait(t, "ready")
			p.Close()
			if ids, err := HeldServers(state); err != nil || !slices.Equal(ids, []string{spec.ServerID}) {
				t.Fatalf("HeldServers = %q, %v; want [%s]", ids, err, spec.ServerID)
			}
			got, err := StopHeld(t.Context(), state, spec.ServerID, tt.kill, 500*time.Millisecond)
			if err != nil || got != tt.want {
				t.Errorf("StopHeld = %+v, %v; want %+v", got, err, tt.want)
			}
			holderGone(t, s.dir)
			if _, err := StopHeld(t.Context(), state, spec.ServerID, tt.kill, time.Second); !errors.Is(err, ErrNoHolder) {
				t.Errorf("StopHeld again = %v, want ErrNoHolder", err)
			}
		})
	}
}

// rawHolder is a connection to a holder that speaks the protocol by
// hand, as a kiln of another version would.
type rawHolder struct {
	c  net.Conn
	br *bufio.Reader
}

func dialRaw(t *testing.T, dir string) (*rawHolder, map[string]any) {
	t.Helper()
	c, err := net.Dial("unix", filepath.Join(dir, holderSocket))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(waitLimit))
	r := &rawHolder{c: c, br: bufio.NewReader(c)}
	return r, r.read(t)
}

func (r *rawHolder) send(t *testing.T, line string) {
	t.Helper()
	if _, err := r.c.Write([]byte(line + "\n")); err != nil {
		t.Fatal(err)
	}
}

func (r *rawHolder) read(t *testing.T) map[string]any {
	t.Helper()
	line, err := r.br.ReadBytes('\n')
	if err != nil {
		t.Fatalf("read from the holder: %v", err)
	}
	var m map[string]any
	if err := json.Unmarshal(line, &m); err != nil {
		t.Fatalf("holder sent %q: %v", line, err)
	}
	return m
}

// TestHolderProtocol pins version 1 of the protocol as bytes on the
// socket: what a kiln of another version sends and reads.
func TestHolderProtocol(t *testing.T) {
	t.Parallel()
	p := heldProcess(t, t.TempDir())
	spec := testSpec(t, "lines:1500")
	spec.StopCommand = "stop"
	s := startHeld(t, p, spec)
	s.con.wait(t, "ready")
	p.Close() // the connections below are the holder's only ones

	r, hello := dialRaw(t, s.dir)
	if hello["shim"] != "kiln" || hello["protocol"] != 1.0 || hello["version"] != "test" || hello["pid"] == nil {
		t.Errorf("greeting = %v, want shim kiln, protocol 1, version, pid", hello)
	}
	r.send(t, `{"op":"status"}`)
	st := r.read(t)["status"].(map[string]any)
	if st["server_id"] != spec.ServerID || st["pid"] != float64(s.inst.pid) || st["stop_command"] != "stop" ||
		st["exited"] != false || st["next"] != 1502.0 || st["start"] != float64(s.inst.ticks) {
		t.Errorf("status = %v", st)
	}

	// The ring keeps the last 1,000 lines: from 0 (the oldest kept) the
	// attach starts at line 502 of 1501 ("line 502" … "line 1500", "ready").
	r, _ = dialRaw(t, s.dir)
	r.send(t, `{"op":"attach","from":0}`)
	if got := r.read(t); got["next"] != 1502.0 {
		t.Errorf("attach reply = %v, want next 1502", got)
	}
	first := r.read(t)
	if first["seq"] != 502.0 || first["line"] != "line 502" {
		t.Errorf("first event = %v, want seq 502, line 502", first)
	}
	for range 998 {
		r.read(t)
	}
	if last := r.read(t); last["seq"] != 1501.0 || last["line"] != "ready" {
		t.Errorf("last event = %v, want seq 1501, ready", last)
	}

	for _, tt := range []struct{ req, wantErr string }{
		{`{"op":"frobnicate"}`, `unknown op "frobnicate"`},
		{`{"op":"write","line":"a\nb"}`, "single line"},
		{`{"op":"signal","signal":"HUP"}`, "want TERM or KILL"},
		{`{"op":"release"}`, "still runs"},
	} {
		r, _ := dialRaw(t, s.dir)
		r.send(t, tt.req)
		if got := r.read(t); !strings.Contains(fmt.Sprint(got["error"]), tt.wantErr) {
			t.Errorf("%s: reply %v, want an error saying %q", tt.req, got, tt.wantErr)
		}
	}

	// A line written, then the exit after the lines.
	r, _ = dialRaw(t, s.dir)
	r.send(t, `{"op":"attach","from":1502}`)
	r.read(t)
	w, _ := dialRaw(t, s.dir)
	w.send(t, `{"op":"write","line":"exit:7"}`)
	if got := r.read(t); got["exit"] == nil || got["exit"].(map[string]any)["code"] != 7.0 {
		t.Errorf("event after exit:7 = %v, want the exit with code 7", got)
	}
	if got := w.read(t); len(got) != 0 {
		t.Errorf("write reply = %v, want {}", got)
	}
	rel, _ := dialRaw(t, s.dir)
	rel.send(t, `{"op":"release"}`)
	if got := rel.read(t); len(got) != 0 {
		t.Errorf("release reply = %v, want {}", got)
	}
	holderGone(t, s.dir)
}

// TestHeldLongStateDir: a state directory whose socket path is longer
// than a socket address allows (108 bytes) works all the same.
func TestHeldLongStateDir(t *testing.T) {
	t.Parallel()
	state := filepath.Join(t.TempDir(), strings.Repeat("d", 60), strings.Repeat("e", 60))
	p := heldProcess(t, state)
	s := startHeld(t, p, testSpec(t))
	s.con.wait(t, "ready")
	if err := s.inst.WriteLine("out:long"); err != nil {
		t.Fatalf("WriteLine = %v", err)
	}
	s.con.wait(t, "long")
	if err := s.inst.Kill(); err != nil {
		t.Fatal(err)
	}
	s.exit(t)
}

// TestHeldCgroup: under a holder, the game (not the holder) is in the
// server's cgroup, and the holder removes the cgroup once it has ended.
func TestHeldCgroup(t *testing.T) {
	h, err := probeCgroups(DefaultCgroupRoot)
	if err != nil {
		t.Skipf("no cgroup limits on this host: %v", err)
	}
	rec := &records{}
	p := NewProcessWith(slog.New(rec), ProcessOptions{Holder: []string{shim, "shim"}, StateDir: t.TempDir()})
	t.Cleanup(func() { p.Close() })
	spec := testSpec(t)
	spec.MemoryMB, spec.CPUPercent = 64, 50
	s := startHeld(t, p, spec)
	s.con.wait(t, "ready")
	if s.inst.cg == nil {
		t.Fatal("the instance has no cgroup")
	}
	game, holder := procCgroups(t, s.inst.pid), procCgroups(t, holderPID(t, s.dir))
	for _, c := range h.controllers() {
		if !strings.HasSuffix(game[c], "/kiln/"+spec.ServerID) {
			t.Errorf("the game's %q cgroup is %q, want .../kiln/%s", c, game[c], spec.ServerID)
		}
		if strings.Contains(holder[c], "/kiln/") {
			t.Errorf("the holder's %q cgroup is %q, want none of the servers'", c, holder[c])
		}
	}
	if st, err := s.inst.Stats(t.Context()); err != nil || st.MemoryBytes <= 0 {
		t.Errorf("Stats = %+v, %v; want memory > 0", st, err)
	}
	if err := s.inst.Kill(); err != nil {
		t.Fatal(err)
	}
	s.exit(t)
	wantGone(t, h.cgroup(spec.ServerID))
	if msgs := rec.at(slog.LevelWarn); len(msgs) != 0 {
		t.Errorf("warnings with cgroups available: %q", msgs)
	}
}
