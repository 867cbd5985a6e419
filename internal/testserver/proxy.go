package testserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/kilnhq/kiln/internal/slp"
)

// Proxy mode (Options.Proxy, profile kiln-test-proxy) reads velocity.toml
// as Velocity does and answers pings with its backend's status.
const (
	// velocityFile is read at start and written only when missing.
	velocityFile = "velocity.toml"
	// defaultBind is Velocity's default listen address.
	defaultBind = "0.0.0.0:25577"
	// defaultShowMaxPlayers is Velocity's show-max-players default.
	defaultShowMaxPlayers = 500
	// NoBackendMOTD is the description a proxy answers with when no
	// backend of its try list answers a ping.
	NoBackendMOTD = "kiln-test-proxy: no backend reachable"
	// backendPingTimeout bounds the pings to the backends behind one
	// status request, all of them together: well under slp's connection
	// deadline, so the client gets the "no backend" answer instead.
	backendPingTimeout = 3 * time.Second
)

// defaultVelocityTOML is what a proxy writes when the root has no
// velocity.toml, as Velocity writes its own on the first start: Kiln's
// wiring then has a file to edit.
const defaultVelocityTOML = `# Written by kiln testserver --proxy (kiln-test-proxy) on its first start,
# as Velocity writes its default velocity.toml.
config-version = "2.7"

# What port should the proxy be bound to? By default, we'll bind to all addresses on port 25577.
bind = "` + defaultBind + `"

motd = "<#09add3>A Velocity Server"
show-max-players = 500
online-mode = true
player-info-forwarding-mode = "none"
forwarding-secret-file = "forwarding.secret"

[servers]
# Configure your servers here. Each key represents the server's name, and the value
# represents the IP address of the server to connect to.

# In what order we should try servers when a player logs in or is kicked from a server.
try = []

[forced-hosts]
`

// proxyConfig is Options resolved against velocity.toml.
type proxyConfig struct {
	host       string
	port       int
	servers    map[string]string // name → host:port
	try        []string          // names of servers, in order
	maxPlayers int
	forwarding string
	delay      time.Duration
}

// velocityTOML is the part of velocity.toml a proxy reads.
type velocityTOML struct {
	Bind                 *string        `toml:"bind"`
	ShowMaxPlayers       *int           `toml:"show-max-players"`
	ForwardingMode       *string        `toml:"player-info-forwarding-mode"`
	ForwardingSecretFile *string        `toml:"forwarding-secret-file"`
	Servers              map[string]any `toml:"servers"`
}

// configureProxy reads velocity.toml from root, writing the default one
// first when there is none.
func configureProxy(opts Options, root *os.Root) (proxyConfig, error) {
	data, err := root.ReadFile(velocityFile)
	if errors.Is(err, fs.ErrNotExist) {
		if err := writeFile(root, velocityFile, []byte(defaultVelocityTOML)); err != nil {
			return proxyConfig{}, fmt.Errorf("write default %s: %w", velocityFile, err)
		}
		data, err = []byte(defaultVelocityTOML), nil
	}
	if err != nil {
		return proxyConfig{}, fmt.Errorf("read %s: %w", velocityFile, err)
	}
	var v velocityTOML
	if _, err := toml.Decode(string(data), &v); err != nil {
		return proxyConfig{}, fmt.Errorf("%s: %w", velocityFile, err)
	}

	cfg := proxyConfig{
		servers:    map[string]string{},
		maxPlayers: defaultShowMaxPlayers,
		forwarding: "none",
		delay:      opts.StartupDelay,
	}
	bind := defaultBind
	if v.Bind != nil {
		bind = *v.Bind
	}
	host, portStr, err := net.SplitHostPort(bind)
	if err != nil {
		return proxyConfig{}, fmt.Errorf("%s: bind %q: %w", velocityFile, bind, err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil || port < 0 || port > 65535 {
		return proxyConfig{}, fmt.Errorf("%s: bind %q: port not between 0 and 65535", velocityFile, bind)
	}
	// As with Velocity's --port, the options win over the file.
	cfg.host, cfg.port = host, port
	if opts.Host != "" {
		cfg.host = opts.Host
	}
	if opts.Port != 0 {
		cfg.port = opts.Port
	}
	if v.ShowMaxPlayers != nil {
		cfg.maxPlayers = *v.ShowMaxPlayers
	}

	for name, val := range v.Servers {
		if name == "try" {
			list, ok := val.([]any)
			if !ok {
				return proxyConfig{}, fmt.Errorf("%s: [servers] try is not a list", velocityFile)
			}
			for _, e := range list {
				s, ok := e.(string)
				if !ok {
					return proxyConfig{}, fmt.Errorf("%s: [servers] try has %v, not a server name", velocityFile, e)
				}
				cfg.try = append(cfg.try, s)
			}
			continue
		}
		addr, ok := val.(string)
		if !ok {
			return proxyConfig{}, fmt.Errorf("%s: [servers] %s is not an address", velocityFile, name)
		}
		if _, _, err := net.SplitHostPort(addr); err != nil {
			return proxyConfig{}, fmt.Errorf("%s: [servers] %s = %q: %w", velocityFile, name, addr, err)
		}
		cfg.servers[name] = addr
	}
	// Velocity refuses to start on a try entry that is not a server.
	for _, name := range cfg.try {
		if _, ok := cfg.servers[name]; !ok {
			return proxyConfig{}, fmt.Errorf("%s: fallback/try server %q is not registered in your configuration", velocityFile, name)
		}
	}

	if v.ForwardingMode != nil {
		cfg.forwarding = strings.ToLower(*v.ForwardingMode)
	}
	switch cfg.forwarding {
	case "none", "legacy":
	case "modern", "bungeeguard":
		// Velocity generates a missing secret; Kiln always writes one
		// with this mode, so a missing or empty file is a wiring bug the
		// test must see.
		name := "forwarding.secret"
		if v.ForwardingSecretFile != nil {
			name = *v.ForwardingSecretFile
		}
		secret, err := root.ReadFile(name)
		if err != nil {
			return proxyConfig{}, fmt.Errorf("%s: forwarding secret: %w", velocityFile, err)
		}
		if strings.TrimSpace(string(secret)) == "" {
			return proxyConfig{}, fmt.Errorf("%s: forwarding secret file %s is empty", velocityFile, name)
		}
	default:
		return proxyConfig{}, fmt.Errorf("%s: player-info-forwarding-mode %q: want none, legacy, bungeeguard or modern", velocityFile, cfg.forwarding)
	}

	switch {
	case cfg.delay == 0:
		cfg.delay = DefaultStartupDelay
	case cfg.delay < 0:
		cfg.delay = 0
	}
	return cfg, nil
}

// writeFile writes name in root through a temporary file and a rename.
func writeFile(root *os.Root, name string, data []byte) error {
	tmp := name + ".kiln-tmp"
	if err := root.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	if err := root.Rename(tmp, name); err != nil {
		_ = root.Remove(tmp)
		return err
	}
	return nil
}

// proxy is one proxy run's state, touched only by Run's goroutine (the
// status callback reads cfg, which does not change once serving).
type proxy struct {
	cfg proxyConfig
	log *console
}

func runProxy(ctx context.Context, start time.Time, opts Options, lines <-chan string, stdout io.Writer) error {
	log := &console{w: stdout, line: velocityLine}
	log.info("Booting up kiln-test-proxy (a Velocity stand-in)...")
	log.info("Loading localizations...")
	dir := opts.Dir
	if dir == "" {
		dir = "."
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return fmt.Errorf("open server root: %w", err)
	}
	defer root.Close()
	cfg, err := configureProxy(opts, root)
	if err != nil {
		log.error("Unable to load your velocity.toml: %v", err)
		log.error("Your configuration is invalid. Velocity will not start up until the errors are resolved.")
		return err
	}
	p := &proxy{cfg: cfg, log: log}
	return p.run(ctx, start, lines)
}

func (p *proxy) run(ctx context.Context, start time.Time, lines <-chan string) error {
	c := p.cfg
	if len(c.servers) == 0 {
		p.log.warn("You don't have any servers configured.")
	}
	for _, name := range c.try {
		p.log.info("Fallback server %s at %s", name, c.servers[name])
	}
	p.log.info("Player info forwarding: %s", c.forwarding)
	ln, err := net.Listen("tcp", net.JoinHostPort(c.host, strconv.Itoa(c.port)))
	if err != nil {
		p.log.error("Couldn't bind to %s: %v", net.JoinHostPort(c.host, strconv.Itoa(c.port)), err)
		return fmt.Errorf("listen: %w", err)
	}
	defer ln.Close()
	bound := net.JoinHostPort(c.host, strconv.Itoa(ln.Addr().(*net.TCPAddr).Port))
	p.log.info("Listening on /%s", bound)
	p.log.info("Loading plugins...")
	t := time.NewTimer(c.delay)
	select {
	case <-ctx.Done():
		t.Stop()
		return p.shutdown(bound, nil, nil)
	case <-t.C:
	}
	p.log.info("Loaded 0 plugins")

	serveCtx, stopServe := context.WithCancel(context.Background())
	defer stopServe()
	serveErr := make(chan error, 1)
	go func() {
		serveErr <- slp.Serve(serveCtx, ln, func() slp.StatusResponse { return p.status(serveCtx) })
	}()
	p.log.info("Done (%.2fs)!", time.Since(start).Seconds())

	for {
		select {
		case <-ctx.Done():
			return p.shutdown(bound, stopServe, serveErr)
		case err := <-serveErr:
			p.log.error("Status listener failed: %v", err)
			return errors.Join(fmt.Errorf("status listener: %w", err), p.shutdown(bound, nil, nil))
		case line := <-lines:
			if p.command(line) {
				return p.shutdown(bound, stopServe, serveErr)
			}
		}
	}
}

// status pings the try list in order, as Velocity's ping passthrough
// does, and answers with the first backend that answers. It reaches only
// the addresses of velocity.toml's [servers].
func (p *proxy) status(ctx context.Context) slp.StatusResponse {
	ctx, cancel := context.WithTimeout(ctx, backendPingTimeout)
	defer cancel()
	for _, name := range p.cfg.try {
		st, err := slp.Ping(ctx, p.cfg.servers[name])
		if err != nil {
			continue
		}
		return slp.StatusResponse{Version: st.Version, Players: st.Players, Description: motd(st)}
	}
	return slp.StatusResponse{
		Version:     slp.Version{Name: "kiln-test-proxy", Protocol: protocol},
		Players:     slp.Players{Max: p.cfg.maxPlayers},
		Description: NoBackendMOTD,
	}
}

// motd is a backend's description with its § formatting codes when it is
// a plain string or a text component without extra parts (what vanilla
// and kiln-test send), else Status's plain text.
func motd(st slp.Status) string {
	var raw struct {
		Description json.RawMessage `json:"description"`
	}
	if json.Unmarshal(st.Raw, &raw) != nil {
		return st.Description
	}
	var text string
	if json.Unmarshal(raw.Description, &text) == nil {
		return text
	}
	var comp struct {
		Text  *string         `json:"text"`
		Extra json.RawMessage `json:"extra"`
	}
	if json.Unmarshal(raw.Description, &comp) == nil && comp.Text != nil && comp.Extra == nil {
		return *comp.Text
	}
	return st.Description
}

// shutdown stops the status listener (when serving) and waits for it.
func (p *proxy) shutdown(bound string, stopServe context.CancelFunc, serveErr <-chan error) error {
	p.log.info("Shutting down the proxy...")
	p.log.info("Closing endpoint /%s", bound)
	if stopServe != nil {
		stopServe()
		<-serveErr // nil after a cancel
	}
	p.log.info("Goodbye!")
	return nil
}

// command runs one console line and reports whether it stops the proxy:
// Velocity's end and shutdown, and stop for those who type vanilla's.
func (p *proxy) command(line string) (stop bool) {
	line = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(line), "/"))
	if line == "" {
		return false
	}
	name, _, _ := strings.Cut(line, " ")
	switch name {
	case "end", "shutdown", "stop":
		return true
	case "glist":
		p.log.info("There are 0 players online.")
	default:
		p.log.info("Unknown command. Type \"/help\" for help.")
	}
	return false
}
