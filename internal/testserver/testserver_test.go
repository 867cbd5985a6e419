package testserver

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kilnhq/kiln/internal/slp"
)

// waitLimit bounds every wait; reaching it is a failure.
const waitLimit = 10 * time.Second

// lineRE is a vanilla log line, or in proxy mode a Velocity one.
var lineRE = regexp.MustCompile(`^\[\d\d:\d\d:\d\d(?:\] \[Server thread/| )(INFO|WARN|ERROR)\]: (.*)$`)

// output collects stdout lines as Run writes them.
type output struct {
	mu      sync.Mutex
	lines   []string
	closed  bool
	changed chan struct{} // closed and replaced when lines or closed change
	pos     int           // next line for next and waitFor; test goroutine only
}

func collect(r io.Reader) *output {
	o := &output{changed: make(chan struct{})}
	go func() {
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			o.mu.Lock()
			o.lines = append(o.lines, sc.Text())
			close(o.changed)
			o.changed = make(chan struct{})
			o.mu.Unlock()
		}
		o.mu.Lock()
		o.closed = true
		close(o.changed)
		o.changed = make(chan struct{})
		o.mu.Unlock()
	}()
	return o
}

// line returns line i, waiting for it; ok is false when the output ended
// first.
func (o *output) line(t *testing.T, i int) (string, bool) {
	t.Helper()
	limit := time.After(waitLimit)
	for {
		o.mu.Lock()
		if i < len(o.lines) {
			l := o.lines[i]
			o.mu.Unlock()
			return l, true
		}
		if o.closed {
			o.mu.Unlock()
			return "", false
		}
		ch := o.changed
		o.mu.Unlock()
		select {
		case <-ch:
		case <-limit:
			t.Fatalf("no output line %d after %v; output so far:\n%s", i, waitLimit, o.String())
		}
	}
}

func (o *output) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return strings.Join(o.lines, "\n")
}

// message splits a log line into level and message, failing on a line
// that is not in vanilla's format.
func message(t *testing.T, line string) (level, msg string) {
	t.Helper()
	m := lineRE.FindStringSubmatch(line)
	if m == nil {
		t.Fatalf("output line %q is not a vanilla or Velocity log line", line)
	}
	return m[1], m[2]
}

// next returns the next line's message.
func (o *output) next(t *testing.T) string {
	t.Helper()
	l, ok := o.line(t, o.pos)
	if !ok {
		t.Fatalf("output ended; want another line. Output:\n%s", o.String())
	}
	o.pos++
	_, msg := message(t, l)
	return msg
}

// waitFor skips to the next line whose message matches and returns it.
func (o *output) waitFor(t *testing.T, want string) string {
	t.Helper()
	re := regexp.MustCompile(want)
	for {
		l, ok := o.line(t, o.pos)
		if !ok {
			t.Fatalf("output ended without a line matching %q. Output:\n%s", want, o.String())
		}
		o.pos++
		if _, msg := message(t, l); re.MatchString(msg) {
			return msg
		}
	}
}

// instance is one Run in the test.
type instance struct {
	opts   Options
	stdin  *io.PipeWriter
	out    *output
	cancel context.CancelFunc
	done   chan error
	addr   string // set once the Starting line was seen

	once sync.Once
	err  error
}

// launch starts Run on 127.0.0.1 in a temporary root with a short boot,
// unless opts says otherwise. It does not wait for anything.
func launch(t *testing.T, opts Options) *instance {
	t.Helper()
	if opts.Host == "" {
		opts.Host = "127.0.0.1"
	}
	if opts.Dir == "" {
		opts.Dir = t.TempDir()
	}
	if opts.StartupDelay == 0 {
		opts.StartupDelay = time.Millisecond
	}
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	in := &instance{opts: opts, stdin: inW, out: collect(outR), cancel: cancel, done: make(chan error, 1)}
	go func() {
		in.done <- Run(ctx, opts, inR, outW)
		outW.Close()
	}()
	t.Cleanup(func() {
		cancel()
		inW.Close()
		in.wait(t)
	})
	return in
}

// start launches Run and waits for Done.
func start(t *testing.T, opts Options) *instance {
	t.Helper()
	in := launch(t, opts)
	msg := in.out.waitFor(t, `^Starting Minecraft server on `)
	in.addr = strings.TrimPrefix(msg, "Starting Minecraft server on ")
	if _, port, err := net.SplitHostPort(in.addr); err != nil || port == "0" {
		t.Fatalf("Starting line %q does not name a bound host:port", msg)
	}
	in.out.waitFor(t, `^Done \(\d+\.\d{3}s\)! For help, type "help"$`)
	return in
}

// wait returns Run's error, waiting for it.
func (in *instance) wait(t *testing.T) error {
	t.Helper()
	in.once.Do(func() {
		select {
		case in.err = <-in.done:
		case <-time.After(waitLimit):
			in.err = errors.New("Run did not return")
			t.Errorf("Run did not return within %v", waitLimit)
		}
	})
	return in.err
}

func (in *instance) send(t *testing.T, line string) {
	t.Helper()
	if _, err := io.WriteString(in.stdin, line+"\n"); err != nil {
		t.Fatalf("write %q to stdin: %v", line, err)
	}
}

func ping(t *testing.T, addr string) slp.Status {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), waitLimit)
	defer cancel()
	st, err := slp.Ping(ctx, addr)
	if err != nil {
		t.Fatalf("Ping(%s) = %v", addr, err)
	}
	return st
}

// levelName reads LevelName from a level.dat, checking it is gzip NBT.
func levelName(t *testing.T, file string) string {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatalf("%s is not gzip: %v", file, err)
	}
	nbt, err := io.ReadAll(zr)
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	prefix := []byte("\x0a\x00\x00\x0a\x00\x04Data\x08\x00\x09LevelName")
	if !bytes.HasPrefix(nbt, prefix) || len(nbt) < len(prefix)+2 {
		t.Fatalf("%s NBT starts % x, want root{Data{LevelName", file, nbt[:min(len(nbt), 32)])
	}
	rest := nbt[len(prefix):]
	n := int(rest[0])<<8 | int(rest[1])
	return string(rest[2 : 2+n])
}

func TestBootPingStop(t *testing.T) {
	in := launch(t, Options{MOTD: "Kiln demo"})
	for _, want := range []string{
		`^Starting minecraft server version 1\.21\.4$`,
		`^Loading properties$`,
		`^Default game type: SURVIVAL$`,
		`^Starting Minecraft server on 127\.0\.0\.1:\d+$`,
		`^Preparing level "world"$`,
		`^Preparing spawn area: 100%$`,
		`^Done \(\d+\.\d{3}s\)! For help, type "help"$`,
	} {
		msg := in.out.waitFor(t, want)
		if strings.HasPrefix(msg, "Starting Minecraft server on ") {
			in.addr = strings.TrimPrefix(msg, "Starting Minecraft server on ")
		}
	}

	// Done means pings are answered: no retry here.
	st := ping(t, in.addr)
	if want := (slp.Version{Name: "Kiln Test 1.21.4", Protocol: 769}); st.Version != want {
		t.Errorf("Ping(%s).Version = %+v, want %+v", in.addr, st.Version, want)
	}
	if want := (slp.Players{Max: 20, Online: 0}); st.Players != want {
		t.Errorf("Ping(%s).Players = %+v, want %+v", in.addr, st.Players, want)
	}
	if st.Description != "Kiln demo" {
		t.Errorf("Ping(%s).Description = %q, want %q", in.addr, st.Description, "Kiln demo")
	}

	if got := levelName(t, filepath.Join(in.opts.Dir, "world", "level.dat")); got != "world" {
		t.Errorf("world/level.dat LevelName = %q, want %q", got, "world")
	}
	if fi, err := os.Stat(filepath.Join(in.opts.Dir, "world", "region")); err != nil || !fi.IsDir() {
		t.Errorf("world/region: %v, want a directory", err)
	}
	if _, err := os.Stat(filepath.Join(in.opts.Dir, "server.properties")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("server.properties: %v, want it not written", err)
	}

	in.send(t, "stop")
	for _, want := range []string{"Stopping the server", "Stopping server", "Saving players", "Saving worlds"} {
		if got := in.out.next(t); got != want {
			t.Errorf("after stop: line %q, want %q", got, want)
		}
	}
	if err := in.wait(t); err != nil {
		t.Errorf("Run() after stop = %v, want nil", err)
	}
	if c, err := net.Dial("tcp", in.addr); err == nil {
		c.Close()
		t.Errorf("Dial(%s) after Run returned succeeded, want the listener closed", in.addr)
	}
}

func TestCommands(t *testing.T) {
	in := start(t, Options{MaxPlayers: 20})
	tests := []struct {
		name  string
		input []string
		want  []string
	}{
		{"say", []string{"say hello world"}, []string{"[Server] hello world"}},
		{"say without message", []string{"say"}, []string{"Unknown or incomplete command, see below for error", "say<--[HERE]"}},
		{"list", []string{"list"}, []string{"There are 0 of a max of 20 players online: "}},
		{"leading slash", []string{"/list"}, []string{"There are 0 of a max of 20 players online: "}},
		{"blank lines ignored", []string{"", "   ", "list"}, []string{"There are 0 of a max of 20 players online: "}},
		{"carriage return", []string{"list\r"}, []string{"There are 0 of a max of 20 players online: "}},
		{"save-off", []string{"save-off"}, []string{"Automatic saving is now disabled"}},
		{"save-off again", []string{"save-off"}, []string{"Saving is already turned off"}},
		{"save-on", []string{"save-on"}, []string{"Automatic saving is now enabled"}},
		{"save-on again", []string{"save-on"}, []string{"Saving is already turned on"}},
		{"help", []string{"help"}, []string{"/help", "/list", "/save-all", "/save-off", "/save-on", "/say <message>", "/stop"}},
		{"unknown", []string{"op Steve"}, []string{"Unknown or incomplete command, see below for error", "op Steve<--[HERE]"}},
		{"case sensitive", []string{"STOP"}, []string{"Unknown or incomplete command, see below for error", "STOP<--[HERE]"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, l := range tt.input {
				in.send(t, l)
			}
			for _, want := range tt.want {
				if got := in.out.next(t); got != want {
					t.Errorf("after %q: line %q, want %q", tt.input, got, want)
				}
			}
		})
	}
	in.send(t, "/stop")
	if err := in.wait(t); err != nil {
		t.Errorf("Run() after /stop = %v, want nil", err)
	}
}

func TestSaveAll(t *testing.T) {
	in := start(t, Options{})
	dat := filepath.Join(in.opts.Dir, "world", "level.dat")
	if err := os.Remove(dat); err != nil {
		t.Fatal(err)
	}
	in.send(t, "save-all")
	for _, want := range []string{"Saving the game (this may take a moment!)", "Saved the game"} {
		if got := in.out.next(t); got != want {
			t.Errorf("after save-all: line %q, want %q", got, want)
		}
	}
	if got := levelName(t, dat); got != "world" {
		t.Errorf("level.dat after save-all: LevelName %q, want %q", got, "world")
	}
}

// freePort returns a port nothing listens on at the moment.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

func writeProperties(t *testing.T, dir, content string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, "server.properties"), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestServerProperties(t *testing.T) {
	dir := t.TempDir()
	port := freePort(t)
	writeProperties(t, dir, "#Minecraft server properties\n"+
		"server-port="+strconv.Itoa(port)+"\n"+
		"motd=\\u00A7aFrom properties\n"+
		"max-players=7\n"+
		"level-name=custom\n")
	in := start(t, Options{Dir: dir})
	if want := "127.0.0.1:" + strconv.Itoa(port); in.addr != want {
		t.Errorf("listening on %s, want server-port's %s", in.addr, want)
	}
	st := ping(t, in.addr)
	if st.Description != "From properties" || st.Players.Max != 7 {
		t.Errorf("Ping(%s) = description %q, max %d; want %q, 7", in.addr, st.Description, st.Players.Max, "From properties")
	}
	var raw struct{ Description struct{ Text string } }
	if err := json.Unmarshal(st.Raw, &raw); err != nil || raw.Description.Text != "§aFrom properties" {
		t.Errorf("Ping(%s).Raw description text = %q, %v; want %q", in.addr, raw.Description.Text, err, "§aFrom properties")
	}
	if got := levelName(t, filepath.Join(dir, "custom", "level.dat")); got != "custom" {
		t.Errorf("custom/level.dat LevelName = %q, want %q", got, "custom")
	}
}

func TestOptionsOverrideProperties(t *testing.T) {
	dir := t.TempDir()
	writeProperties(t, dir, "server-port=1\nmotd=From properties\nmax-players=7\n")
	port := freePort(t)
	in := start(t, Options{Dir: dir, Port: port, MOTD: "From options", MaxPlayers: 9, Version: "1.20.1"})
	if want := "127.0.0.1:" + strconv.Itoa(port); in.addr != want {
		t.Errorf("listening on %s, want Options.Port's %s", in.addr, want)
	}
	st := ping(t, in.addr)
	if st.Description != "From options" || st.Players.Max != 9 || st.Version.Name != "Kiln Test 1.20.1" {
		t.Errorf("Ping(%s) = %q, max %d, version %q; want %q, 9, %q", in.addr, st.Description, st.Players.Max, st.Version.Name, "From options", "Kiln Test 1.20.1")
	}
}

func TestCancelStops(t *testing.T) {
	in := start(t, Options{})
	in.cancel()
	if err := in.wait(t); err != nil {
		t.Errorf("Run() after cancel = %v, want nil", err)
	}
	for _, want := range []string{"Stopping server", "Saving players", "Saving worlds"} {
		if got := in.out.next(t); got != want {
			t.Errorf("after cancel: line %q, want %q", got, want)
		}
	}
}

func TestCancelDuringBoot(t *testing.T) {
	in := launch(t, Options{StartupDelay: time.Hour})
	in.out.waitFor(t, `^Preparing spawn area: 0%$`)
	in.cancel()
	if err := in.wait(t); err != nil {
		t.Errorf("Run() cancelled during boot = %v, want nil", err)
	}
	if strings.Contains(in.out.String(), "Done (") {
		t.Errorf("output has a Done line after a cancelled boot:\n%s", in.out.String())
	}
}

// eofReader is an empty stdin that reports when it has returned EOF.
type eofReader struct {
	once sync.Once
	eof  chan struct{}
}

func (r *eofReader) Read([]byte) (int, error) {
	r.once.Do(func() { close(r.eof) })
	return 0, io.EOF
}

func TestStdinEOFKeepsRunning(t *testing.T) {
	stdin := &eofReader{eof: make(chan struct{})}
	outR, outW := io.Pipe()
	out := collect(outR)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Options{Host: "127.0.0.1", Dir: t.TempDir(), StartupDelay: time.Millisecond}, stdin, outW)
		outW.Close()
	}()
	addr := strings.TrimPrefix(out.waitFor(t, `^Starting Minecraft server on `), "Starting Minecraft server on ")
	out.waitFor(t, `^Done `)
	<-stdin.eof
	ping(t, addr)
	select {
	case err := <-done:
		t.Fatalf("Run() = %v after stdin EOF, want it running", err)
	default:
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run() after cancel = %v, want nil", err)
		}
	case <-time.After(waitLimit):
		t.Fatalf("Run did not return within %v of cancel", waitLimit)
	}
}

func TestBindFailure(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	in := launch(t, Options{Port: ln.Addr().(*net.TCPAddr).Port})
	if err := in.wait(t); err == nil {
		t.Errorf("Run() on a taken port = nil, want an error")
	}
	in.out.waitFor(t, `^\*\*\*\* FAILED TO BIND TO PORT!$`)
	if strings.Contains(in.out.String(), "Done (") {
		t.Errorf("output has a Done line after a failed bind:\n%s", in.out.String())
	}
}

func TestRunRefuses(t *testing.T) {
	tests := []struct {
		name       string
		opts       Options
		properties string
	}{
		{"negative port", Options{Port: -1}, ""},
		{"port too large", Options{Port: 65536}, ""},
		{"negative max players", Options{MaxPlayers: -1}, ""},
		{"missing dir", Options{Dir: "does-not-exist"}, ""},
		{"server-port not a number", Options{}, "server-port=abc\n"},
		{"server-port out of range", Options{}, "server-port=70000\n"},
		{"max-players negative", Options{}, "max-players=-5\n"},
		{"bad unicode escape", Options{}, "motd=\\u00zz\n"},
		{"level-name outside the root", Options{}, "level-name=../escape\n"},
		{"level-name absolute", Options{}, "level-name=/tmp/escape\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			parent := t.TempDir()
			dir := filepath.Join(parent, "root")
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			if tt.properties != "" {
				writeProperties(t, dir, tt.properties)
			}
			opts := tt.opts
			if opts.Dir != "" {
				opts.Dir = filepath.Join(parent, opts.Dir)
			} else {
				opts.Dir = dir
			}
			opts.Host = "127.0.0.1"
			opts.StartupDelay = -1
			err := Run(t.Context(), opts, strings.NewReader(""), io.Discard)
			if err == nil {
				t.Errorf("Run(%+v) with %q = nil, want an error", opts, tt.properties)
			}
			if _, err := os.Stat(filepath.Join(parent, "escape")); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("Run(%+v) created %s outside the root", opts, filepath.Join(parent, "escape"))
			}
		})
	}
}
