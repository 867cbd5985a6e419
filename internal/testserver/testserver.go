package testserver

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/kilnhq/kiln/internal/slp"
)

// Defaults for zero Options fields and missing server.properties keys.
const (
	DefaultVersion      = "1.21.4"
	DefaultMOTD         = "A Minecraft Server" // vanilla's
	DefaultMaxPlayers   = 20                   // vanilla's
	DefaultStartupDelay = 300 * time.Millisecond
)

const (
	// protocol is the protocol number the status ping reports: 1.21.4's.
	protocol = 769
	// defaultLevel is the world directory when level-name is not set.
	defaultLevel = "world"
	// propertiesFile is read, never written.
	propertiesFile = "server.properties"
)

// Options configures Run. Zero fields take server.properties values when
// the file sets them, else the defaults.
type Options struct {
	// Port is the status ping port. Non-zero wins over server-port; zero
	// means server-port, and when that is unset or 0, any free port (the
	// "Starting Minecraft server on" line tells which).
	Port int
	// Host is the address to listen on; empty means server-ip, and when
	// that is unset, every interface (logged as "*", like vanilla).
	Host string
	// Dir is the server root, which must exist; empty means the working
	// directory.
	Dir string
	// MOTD overrides motd.
	MOTD string
	// MaxPlayers overrides max-players.
	MaxPlayers int
	// Version is the game version to claim; empty means DefaultVersion.
	Version string
	// StartupDelay is the simulated boot time before "Done"; zero means
	// DefaultStartupDelay, negative none.
	StartupDelay time.Duration
	// Proxy plays a Velocity proxy instead (profile kiln-test-proxy):
	// velocity.toml instead of server.properties, a ping answered with
	// the status of the first backend of its try list that answers, `end`
	// to stop. MOTD, MaxPlayers and Version do not apply.
	Proxy bool
}

// config is Options resolved against server.properties.
type config struct {
	root       *os.Root
	host       string
	port       int
	motd       string
	maxPlayers int
	version    string
	level      string
	delay      time.Duration
}

// Run plays a vanilla dedicated server without the game: it logs the boot
// lines to stdout, creates the world directory, answers Server List Ping
// (and logins, with a disconnect) and obeys console commands read line by
// line from stdin, until `stop` or ctx is cancelled. Both end the same
// way: the stop lines are logged, the world saved, the listener closed,
// and Run returns nil.
//
// The "Done" line is written only once pings are answered. EOF on stdin
// does not stop the server: a detached console must not. Run returns an
// error for invalid options, an unreadable or invalid server.properties, a
// world it cannot create or save, or a port it cannot bind (after logging
// vanilla's FAILED TO BIND lines).
//
// With opts.Proxy it plays a Velocity proxy instead (see Options.Proxy
// and the package documentation); it also returns an error for an
// unreadable or invalid velocity.toml.
//
// Run writes stdout from its own goroutine only. It reads stdin on a
// goroutine that it cannot interrupt: if stdin has no line or EOF
// pending when Run returns, that goroutine stays blocked in Read until
// stdin yields one, then ends without reading further.
func Run(ctx context.Context, opts Options, stdin io.Reader, stdout io.Writer) error {
	start := time.Now()
	if stdout == nil {
		stdout = io.Discard
	}
	if opts.Proxy {
		if opts.Port < 0 || opts.Port > 65535 {
			return fmt.Errorf("port %d: not between 0 and 65535", opts.Port)
		}
		lines, done := readConsole(stdin)
		defer close(done)
		return runProxy(ctx, start, opts, lines, stdout)
	}
	cfg, err := configure(opts)
	if err != nil {
		return err
	}
	defer cfg.root.Close()

	lines, done := readConsole(stdin)
	defer close(done)

	s := &server{cfg: cfg, log: &console{w: stdout}, saving: true}
	return s.run(ctx, start, lines)
}

// readConsole starts reading stdin's lines, when there is a stdin; closing
// done lets the reader end.
func readConsole(stdin io.Reader) (<-chan string, chan struct{}) {
	lines := make(chan string)
	done := make(chan struct{})
	if stdin != nil {
		go readLines(stdin, lines, done)
	}
	return lines, done
}

// readLines sends each line of stdin to lines until EOF, a read error or
// done. The console then is simply gone; the server keeps running.
func readLines(stdin io.Reader, lines chan<- string, done <-chan struct{}) {
	sc := bufio.NewScanner(stdin)
	for sc.Scan() {
		select {
		case lines <- sc.Text():
		case <-done:
			return
		}
	}
}

func configure(opts Options) (config, error) {
	if opts.Port < 0 || opts.Port > 65535 {
		return config{}, fmt.Errorf("port %d: not between 0 and 65535", opts.Port)
	}
	if opts.MaxPlayers < 0 {
		return config{}, fmt.Errorf("max players %d: negative", opts.MaxPlayers)
	}
	dir := opts.Dir
	if dir == "" {
		dir = "."
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return config{}, fmt.Errorf("open server root: %w", err)
	}
	cfg, err := resolve(opts, root)
	if err != nil {
		root.Close()
		return config{}, err
	}
	return cfg, nil
}

// resolve merges opts, server.properties and the defaults.
func resolve(opts Options, root *os.Root) (config, error) {
	props := map[string]string{}
	data, err := root.ReadFile(propertiesFile)
	switch {
	case err == nil:
		if props, err = parseProperties(data); err != nil {
			return config{}, fmt.Errorf("%s: %w", propertiesFile, err)
		}
	case !errors.Is(err, fs.ErrNotExist):
		return config{}, fmt.Errorf("read %s: %w", propertiesFile, err)
	}
	intProp := func(key string, lo, hi int) (int, bool, error) {
		v, ok := props[key]
		if !ok {
			return 0, false, nil
		}
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil || n < lo || n > hi {
			return 0, false, fmt.Errorf("%s: %s=%q: want an integer from %d to %d", propertiesFile, key, v, lo, hi)
		}
		return n, true, nil
	}

	cfg := config{
		root:       root,
		host:       opts.Host,
		port:       opts.Port,
		motd:       opts.MOTD,
		maxPlayers: opts.MaxPlayers,
		version:    cmp.Or(opts.Version, DefaultVersion),
		level:      cmp.Or(props["level-name"], defaultLevel),
		delay:      opts.StartupDelay,
	}
	if cfg.host == "" {
		cfg.host = strings.TrimSpace(props["server-ip"])
	}
	if cfg.port == 0 {
		if cfg.port, _, err = intProp("server-port", 0, 65535); err != nil {
			return config{}, err
		}
	}
	if cfg.motd == "" {
		motd, ok := props["motd"]
		cfg.motd = motd
		if !ok {
			cfg.motd = DefaultMOTD
		}
	}
	if cfg.maxPlayers == 0 {
		n, ok, err := intProp("max-players", 0, 1<<31-1)
		if err != nil {
			return config{}, err
		}
		cfg.maxPlayers = DefaultMaxPlayers
		if ok {
			cfg.maxPlayers = n
		}
	}
	switch {
	case cfg.delay == 0:
		cfg.delay = DefaultStartupDelay
	case cfg.delay < 0:
		cfg.delay = 0
	}
	return cfg, nil
}

// server is one run's state, touched only by Run's goroutine.
type server struct {
	cfg    config
	log    *console
	saving bool // autosave flag of save-on/save-off

	stopServe context.CancelFunc // nil until the status listener runs
	serveErr  chan error
}

func (s *server) run(ctx context.Context, start time.Time, lines <-chan string) error {
	c := s.cfg
	s.log.info("Starting minecraft server version %s", c.version)
	s.log.info("Loading properties")
	s.log.info("Default game type: SURVIVAL")
	s.log.info("Generating keypair")

	// Bound now, as vanilla binds before preparing the level, so a port
	// conflict fails the boot early; served only once the level is
	// ready, so "Done" is the first moment pings are answered.
	ln, err := net.Listen("tcp", net.JoinHostPort(c.host, strconv.Itoa(c.port)))
	if err != nil {
		s.log.info("Starting Minecraft server on %s", display(c.host, c.port))
		s.log.warn("**** FAILED TO BIND TO PORT!")
		s.log.warn("The exception was: %v", err)
		s.log.warn("Perhaps a server is already running on that port?")
		return fmt.Errorf("listen: %w", err)
	}
	defer ln.Close()
	s.log.info("Starting Minecraft server on %s", display(c.host, ln.Addr().(*net.TCPAddr).Port))

	s.log.info("Preparing level \"%s\"", c.level)
	if err := prepareWorld(c.root, c.level, time.Now()); err != nil {
		return err
	}
	s.log.info("Preparing start region for dimension minecraft:overworld")
	s.log.info("Preparing spawn area: 0%%")
	spawn := time.Now()
	t := time.NewTimer(c.delay)
	select {
	case <-ctx.Done():
		t.Stop()
		return s.shutdown(false)
	case <-t.C:
	}
	s.log.info("Preparing spawn area: 100%%")
	s.log.info("Time elapsed: %d ms", time.Since(spawn).Milliseconds())

	serveCtx, stopServe := context.WithCancel(context.Background())
	s.stopServe, s.serveErr = stopServe, make(chan error, 1)
	go func() { s.serveErr <- slp.Serve(serveCtx, ln, s.status) }()
	s.log.info("Done (%.3fs)! For help, type \"help\"", time.Since(start).Seconds())

	for {
		select {
		case <-ctx.Done():
			return s.shutdown(false)
		case err := <-s.serveErr:
			s.stopServe = nil
			s.log.error("Status listener failed: %v", err)
			return errors.Join(fmt.Errorf("status listener: %w", err), s.shutdown(false))
		case line := <-lines:
			if s.command(line) {
				return s.shutdown(true)
			}
		}
	}
}

// status is the answer to a status ping.
func (s *server) status() slp.StatusResponse {
	return slp.StatusResponse{
		Version:     slp.Version{Name: "Kiln Test " + s.cfg.version, Protocol: protocol},
		Players:     slp.Players{Max: s.cfg.maxPlayers, Online: 0},
		Description: s.cfg.motd,
	}
}

// shutdown stops the status listener, waits for it and saves the world.
func (s *server) shutdown(command bool) error {
	if command {
		s.log.info("Stopping the server")
	}
	s.log.info("Stopping server")
	if s.stopServe != nil {
		s.stopServe()
		<-s.serveErr // nil after a cancel
	}
	s.log.info("Saving players")
	s.log.info("Saving worlds")
	if err := saveWorld(s.cfg.root, s.cfg.level, time.Now()); err != nil {
		s.log.error("Failed to save level %q: %v", s.cfg.level, err)
		return err
	}
	s.log.info("Saving chunks for level 'ServerLevel[%s]'/minecraft:overworld", s.cfg.level)
	s.log.info("ThreadedAnvilChunkStorage (%s): All chunks are saved", s.cfg.level)
	s.log.info("ThreadedAnvilChunkStorage: All dimensions are saved")
	return nil
}

// commands lists what help prints.
var commands = []string{"/help", "/list", "/save-all", "/save-off", "/save-on", "/say <message>", "/stop"}

// command runs one console line and reports whether it was stop. Like
// vanilla's console it takes a leading slash or none; names are case
// sensitive; arguments the command does not take are ignored.
func (s *server) command(line string) (stop bool) {
	line = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(line), "/"))
	if line == "" {
		return false
	}
	name, arg, _ := strings.Cut(line, " ")
	arg = strings.TrimSpace(arg)
	switch name {
	case "stop":
		return true
	case "say":
		if arg == "" {
			s.unknown(line)
			return false
		}
		s.log.info("[Server] %s", arg)
	case "list":
		s.log.info("There are 0 of a max of %d players online: ", s.cfg.maxPlayers)
	case "save-all":
		s.log.info("Saving the game (this may take a moment!)")
		if err := saveWorld(s.cfg.root, s.cfg.level, time.Now()); err != nil {
			s.log.error("Failed to save the game: %v", err)
			return false
		}
		s.log.info("Saved the game")
	case "save-off":
		if !s.saving {
			s.log.info("Saving is already turned off")
			return false
		}
		s.saving = false
		s.log.info("Automatic saving is now disabled")
	case "save-on":
		if s.saving {
			s.log.info("Saving is already turned on")
			return false
		}
		s.saving = true
		s.log.info("Automatic saving is now enabled")
	case "help":
		for _, c := range commands {
			s.log.info("%s", c)
		}
	default:
		s.unknown(line)
	}
	return false
}

func (s *server) unknown(line string) {
	s.log.info("Unknown or incomplete command, see below for error")
	s.log.info("%s<--[HERE]", line)
}

// display is host:port as vanilla logs it, "*" for every interface.
func display(host string, port int) string {
	if host == "" {
		return "*:" + strconv.Itoa(port)
	}
	return net.JoinHostPort(host, strconv.Itoa(port))
}

// console writes log lines in vanilla's format (vanillaLine, the default)
// or Velocity's (velocityLine).
type console struct {
	w    io.Writer
	line string // fmt format of a line: time, level, message
}

const (
	vanillaLine  = "[%s] [Server thread/%s]: %s\n" // [15:04:05] [Server thread/INFO]: message
	velocityLine = "[%s %s]: %s\n"                 // [15:04:05 INFO]: message
)

func (c *console) info(format string, args ...any)  { c.write("INFO", format, args...) }
func (c *console) warn(format string, args ...any)  { c.write("WARN", format, args...) }
func (c *console) error(format string, args ...any) { c.write("ERROR", format, args...) }

// write ignores errors: a console nobody reads must not stop the server.
func (c *console) write(level, format string, args ...any) {
	line := c.line
	if line == "" {
		line = vanillaLine
	}
	_, _ = fmt.Fprintf(c.w, line, time.Now().Format("15:04:05"), level, fmt.Sprintf(format, args...))
}
