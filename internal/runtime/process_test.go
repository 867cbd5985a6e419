package runtime

import (
	"bufio"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// waitLimit bounds every wait on a test process.
const waitLimit = 20 * time.Second

// helper and shim are the paths of testdata/helper (the game) and
// testdata/shim (a holder), built by TestMain.
var helper, shim string

func TestMain(m *testing.M) {
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	dir, err := os.MkdirTemp("", "kiln-runtime-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	helper, shim = filepath.Join(dir, "helper"), filepath.Join(dir, "shim")
	for bin, pkg := range map[string]string{helper: "./testdata/helper", shim: "./testdata/shim"} {
		args := []string{"build", "-buildvcs=false", "-o", bin}
		if bin == shim {
			args = append(args, raceFlags...)
		}
		if out, err := exec.Command("go", append(args, pkg)...).CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "go build %s: %v\n%s", pkg, err, out)
			return 1
		}
	}
	return m.Run()
}

func quietLog() *slog.Logger { return slog.New(slog.DiscardHandler) }

// testSpec runs the helper with args under a server id of its own.
func testSpec(t *testing.T, args ...string) Spec {
	t.Helper()
	return Spec{
		ServerID: "kiln-test-" + strings.ToLower(rand.Text()[:12]),
		Root:     t.TempDir(),
		Argv:     append([]string{helper}, args...),
		Env:      []string{"LANG=C.UTF-8"},
	}
}

// server is a started instance and its console.
type server struct {
	inst *procInstance
	con  *console
}

// start starts spec on p; the instance is killed (and waited for) at the
// end of the test.
func start(t *testing.T, p *Process, spec Spec) *server {
	t.Helper()
	con := &console{}
	inst, err := p.Start(t.Context(), spec, con.add)
	if err != nil {
		t.Fatalf("Start(%q) = %v", spec.Argv, err)
	}
	pi := inst.(*procInstance)
	t.Cleanup(func() {
		_ = pi.Kill()
		select {
		case <-pi.Done():
		case <-time.After(waitLimit):
			t.Errorf("instance %s did not end within %s of Kill", pi.Ref(), waitLimit)
		}
	})
	return &server{inst: pi, con: con}
}

// exit waits for the instance to end and returns how.
func (s *server) exit(t *testing.T) Exit {
	t.Helper()
	select {
	case <-s.inst.Done():
		return s.inst.Exit()
	case <-time.After(waitLimit):
		t.Fatalf("instance did not end within %s; console:\n%s", waitLimit, s.con.dump())
		return Exit{}
	}
}

// console collects the lines of an instance.
type console struct {
	mu      sync.Mutex
	lines   []string
	changed chan struct{} // closed at the next line
}

func (c *console) add(line string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lines = append(c.lines, line)
	if c.changed != nil {
		close(c.changed)
		c.changed = nil
	}
}

func (c *console) all() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.lines)
}

// wait returns the first line with prefix, failing after waitLimit.
func (c *console) wait(t *testing.T, prefix string) string {
	t.Helper()
	deadline := time.After(waitLimit)
	for {
		c.mu.Lock()
		if i := slices.IndexFunc(c.lines, func(l string) bool { return strings.HasPrefix(l, prefix) }); i >= 0 {
			line := c.lines[i] // read under the lock: add appends to lines
			c.mu.Unlock()
			return line
		}
		if c.changed == nil {
			c.changed = make(chan struct{})
		}
		ch := c.changed
		c.mu.Unlock()
		select {
		case <-ch:
		case <-deadline:
			t.Fatalf("no console line %q within %s; got:\n%s", prefix, waitLimit, c.dump())
		}
	}
}

func (c *console) dump() string {
	var b strings.Builder
	for _, l := range c.all() {
		if len(l) > 200 {
			l = l[:200] + "…"
		}
		b.WriteString("  " + l + "\n")
	}
	return b.String()
}

// pidOf reads the pid from a console line "<word> <pid>".
func pidOf(t *testing.T, line string) int {
	t.Helper()
	_, s, _ := strings.Cut(line, " ")
	pid, err := strconv.Atoi(s)
	if err != nil {
		t.Fatalf("no pid in %q", line)
	}
	return pid
}

// eventually fails unless cond holds within waitLimit.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, waitLimit)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// startTime is field 22 of /proc/<pid>/stat.
func startTime(t *testing.T, pid int) uint64 {
	t.Helper()
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+1:]))
	n, err := strconv.ParseUint(f[19], 10, 64)
	if err != nil {
		t.Fatalf("start time of %d: %v", pid, err)
	}
	return n
}

func TestProcessConsole(t *testing.T) {
	t.Parallel()
	x := strings.Repeat("x", maxLine)
	tests := []struct {
		name string
		args []string
		want []string
	}{
		{"stdout and stderr", []string{"out:one", "err:two", "out:three"}, []string{"one", "two", "three"}},
		{"carriage return trimmed", []string{"out:dos\r"}, []string{"dos"}},
		{"line over 8 KiB split", []string{"long:10000"}, []string{x, x[:10000-maxLine]}},
		{"line of exactly 8 KiB", []string{"long:8192"}, []string{x}},
		{"empty line", []string{"out:"}, []string{""}},
	}
	p := NewProcess(quietLog())
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := start(t, p, testSpec(t, append(tt.args, "exit:0")...))
			if got := s.exit(t); got != (Exit{}) {
				t.Fatalf("Exit() = %+v, want code 0", got)
			}
			if got := s.con.all(); !slices.Equal(got, tt.want) {
				t.Errorf("console lines = %q, want %q", shorten(got), shorten(tt.want))
			}
		})
	}
}

// TestProcessHome: without HOME in Spec.Env the server's HOME is its root
// (the process runs on the host, where the root is); a HOME given is kept.
func TestProcessHome(t *testing.T) {
	t.Parallel()
	p := NewProcess(quietLog())
	for _, tt := range []struct {
		name string
		env  []string
		want func(root string) string
	}{
		{"default", []string{"LANG=C.UTF-8"}, func(root string) string { return "HOME=" + root }},
		{"given", []string{"HOME=/tmp", "LANG=C.UTF-8"}, func(string) string { return "HOME=/tmp" }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			spec := testSpec(t, "env:HOME", "exit:0")
			spec.Env = tt.env
			s := start(t, p, spec)
			if got := s.exit(t); got != (Exit{}) {
				t.Fatalf("Exit() = %+v, want code 0", got)
			}
			if got, want := s.con.all(), []string{tt.want(spec.Root)}; !slices.Equal(got, want) {
				t.Errorf("console = %q, want %q", got, want)
			}
		})
	}
}

// shorten abbreviates long lines for a failure message.
func shorten(lines []string) []string {
	out := make([]string, len(lines))
	for i, l := range lines {
		out[i] = l
		if len(l) > 20 {
			out[i] = fmt.Sprintf("%s…(%d bytes)", l[:10], len(l))
		}
	}
	return out
}

func TestReadLines(t *testing.T) {
	x := strings.Repeat("x", maxLine)
	tests := []struct {
		name string
		in   string
		want []string
	}{
		{"lines", "a\nb\r\n\nc", []string{"a", "b", "", "c"}},
		{"split", x + "yz\n", []string{x, "yz"}},
		{"exactly the cap", x + "\n" + "a\n", []string{x, "a"}},
		{"twice the cap", x + x + "\n", []string{x, x}},
		{"empty", "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			readLines(strings.NewReader(tt.in), func(l string) { got = append(got, l) })
			if !slices.Equal(got, tt.want) {
				t.Errorf("readLines(%q) = %q, want %q", shorten([]string{tt.in}), shorten(got), shorten(tt.want))
			}
		})
	}
}

func TestProcessWriteLine(t *testing.T) {
	t.Parallel()
	s := start(t, NewProcess(quietLog()), testSpec(t))
	s.con.wait(t, "ready")
	if err := s.inst.WriteLine("say hello"); err != nil {
		t.Fatalf("WriteLine = %v", err)
	}
	s.con.wait(t, "echo: say hello")
	for _, bad := range []string{"a\nb", "a\rb"} {
		if err := s.inst.WriteLine(bad); err == nil {
			t.Errorf("WriteLine(%q) = nil, want an error", bad)
		}
	}
	if err := s.inst.Kill(); err != nil {
		t.Fatalf("Kill = %v", err)
	}
	s.exit(t)
	if err := s.inst.WriteLine("too late"); err == nil {
		t.Error("WriteLine after the end = nil, want an error")
	}
}

func TestProcessExit(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		args []string
		act  func(*procInstance) error // after "ready"; nil: none
		want Exit
	}{
		{"exit code", []string{"exit:3"}, nil, Exit{Code: 3}},
		{"clean exit", []string{"exit:0"}, nil, Exit{Code: 0}},
		{"stop", nil, (*procInstance).Stop, Exit{Code: -1, Signal: "terminated"}},
		{"kill", nil, (*procInstance).Kill, Exit{Code: -1, Signal: "killed"}},
	}
	p := NewProcess(quietLog())
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := start(t, p, testSpec(t, tt.args...))
			if tt.act != nil {
				s.con.wait(t, "ready")
				if err := tt.act(s.inst); err != nil {
					t.Fatalf("%s = %v", tt.name, err)
				}
			}
			if got := s.exit(t); got != tt.want {
				t.Errorf("Exit() = %+v, want %+v", got, tt.want)
			}
			if err := s.inst.Stop(); err != nil {
				t.Errorf("Stop after the end = %v, want nil", err)
			}
			if st, err := s.inst.Stats(t.Context()); err != nil || st != (Stats{}) {
				t.Errorf("Stats after the end = %+v, %v; want zero, nil", st, err)
			}
		})
	}
}

func TestProcessStartErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		edit func(*Spec)
	}{
		{"missing binary", func(s *Spec) { s.Argv = []string{"/nonexistent/kiln-test-server"} }},
		{"binary not in PATH", func(s *Spec) { s.Argv = []string{"kiln-test-no-such-command"} }},
		{"empty command", func(s *Spec) { s.Argv = nil }},
		{"missing root", func(s *Spec) { s.Root = "/nonexistent/kiln-test-root" }},
	}
	p := NewProcess(quietLog())
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
		})
	}
}

func TestProcessRef(t *testing.T) {
	t.Parallel()
	s := start(t, NewProcess(quietLog()), testSpec(t))
	s.con.wait(t, "ready")
	ref := s.inst.Ref()
	if !regexp.MustCompile(`^[1-9][0-9]*:[0-9]+$`).MatchString(ref) {
		t.Fatalf("Ref() = %q, want pid:starttime", ref)
	}
	pid := s.inst.cmd.Process.Pid
	if want := fmt.Sprintf("%d:%d", pid, startTime(t, pid)); ref != want {
		t.Errorf("Ref() = %q, want %q", ref, want)
	}
}

// outside is a helper process started as a previous kiln serve would have
// left it: in a process group of its own, with a child in that group.
type outside struct {
	pid, child int
	exited     chan struct{}
}

func startOutside(t *testing.T) *outside {
	t.Helper()
	cmd := exec.Command(helper, "child", "hold")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	o := &outside{pid: cmd.Process.Pid, exited: make(chan struct{})}
	t.Cleanup(func() {
		_ = syscall.Kill(-o.pid, syscall.SIGKILL)
		<-o.exited
	})
	sc := bufio.NewScanner(out)
	if !sc.Scan() {
		_ = syscall.Kill(-o.pid, syscall.SIGKILL)
		t.Fatalf("helper printed nothing: %v", sc.Err())
	}
	o.child = pidOf(t, sc.Text())
	go func() {
		_ = cmd.Wait() // reaps it, so that it does not linger as a zombie
		close(o.exited)
	}()
	return o
}

func (o *outside) ref(t *testing.T) string {
	t.Helper()
	return fmt.Sprintf("%d:%d", o.pid, startTime(t, o.pid))
}

func TestProcessAdopt(t *testing.T) {
	t.Parallel()
	p := NewProcess(quietLog())

	t.Run("survivor killed with its group", func(t *testing.T) {
		t.Parallel()
		o := startOutside(t)
		childTicks := startTime(t, o.child)
		_, err := p.Adopt(t.Context(), testSpec(t), o.ref(t), func(string) {})
		if !errors.Is(err, ErrNotAdoptable) {
			t.Fatalf("Adopt = %v, want ErrNotAdoptable", err)
		}
		select {
		case <-o.exited:
		case <-time.After(waitLimit):
			t.Fatal("the survivor still runs after Adopt")
		}
		eventually(t, "the survivor's child ends", func() bool { return !procAlive(o.child, childTicks) })
	})

	t.Run("stale ref kills nothing", func(t *testing.T) {
		t.Parallel()
		o := startOutside(t)
		pid, ticks := o.pid, startTime(t, o.pid)
		for _, ref := range []string{
			fmt.Sprintf("%d:%d", pid, ticks+1), // same pid, another process
			"nonsense",
			strconv.Itoa(pid),
		} {
			_, err := p.Adopt(t.Context(), testSpec(t), ref, func(string) {})
			if !errors.Is(err, ErrNotAdoptable) {
				t.Errorf("Adopt(%q) = %v, want ErrNotAdoptable", ref, err)
			}
		}
		select {
		case <-o.exited:
			t.Fatal("Adopt with a stale ref killed the process")
		default:
		}
		if !procAlive(pid, ticks) || !procAlive(o.child, startTime(t, o.child)) {
			t.Error("Adopt with a stale ref killed the process or its child")
		}
	})
}

func TestProcessStats(t *testing.T) {
	t.Parallel()
	s := start(t, NewProcess(quietLog()), testSpec(t, "alloc:16"))
	s.con.wait(t, "ready")
	st, err := s.inst.Stats(t.Context())
	if err != nil {
		t.Fatalf("Stats = %v", err)
	}
	if st.MemoryBytes <= 0 || st.CPU != 0 {
		t.Errorf("first Stats = %+v, want memory > 0 and CPU 0", st)
	}
	st, err = s.inst.Stats(t.Context())
	if err != nil || st.MemoryBytes <= 0 || st.CPU < 0 {
		t.Errorf("second Stats = %+v, %v; want memory > 0, CPU >= 0", st, err)
	}
}

// records is a slog handler that keeps what is logged.
type records struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (r *records) Enabled(context.Context, slog.Level) bool { return true }
func (r *records) WithAttrs([]slog.Attr) slog.Handler       { return r }
func (r *records) WithGroup(string) slog.Handler            { return r }

func (r *records) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.recs = append(r.recs, rec.Clone())
	return nil
}

// at returns the messages logged at level.
func (r *records) at(level slog.Level) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var msgs []string
	for _, rec := range r.recs {
		if rec.Level == level {
			msgs = append(msgs, rec.Message)
		}
	}
	return msgs
}
