package install

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/BurntSushi/toml"
	yaml "go.yaml.in/yaml/v4"
)

// Forwarding is how a proxy passes the player's identity to its backends
// (deployment-spec.md §1 forwarding; the same values as spec.Forwarding*).
type Forwarding string

// Forwarding modes.
const (
	ForwardingModern Forwarding = "modern" // Velocity only: HMAC-signed, needs the secret
	ForwardingLegacy Forwarding = "legacy" // BungeeCord's: IP and UUID in the handshake
	ForwardingNone   Forwarding = "none"   // nothing forwarded; offline-mode UUIDs
)

// Names of the files the wiring edits, relative to a server root.
const (
	VelocityConfig        = "velocity.toml"
	VelocitySecretFile    = "forwarding.secret"
	BungeeConfig          = "config.yml"
	PaperGlobalConfig     = "config/paper-global.yml"
	SpigotConfig          = "spigot.yml"
	PropertiesConfig      = "server.properties"
	velocityConfigVersion = "2.7" // config-version of a velocity.toml Kiln writes whole
)

// BackendFiles are the files WireBackend reads and may write.
func BackendFiles() []string {
	return []string{PaperGlobalConfig, SpigotConfig, PropertiesConfig}
}

// Backend is one game server behind a proxy.
type Backend struct {
	Name string // the spec's server name, ^[a-z][a-z0-9-]{0,62}$
	Addr string // host:port the proxy dials
}

// ProxyWiring is what a proxy must know of its network: where it listens,
// its backends in the spec's order, the try order and the forwarding mode.
type ProxyWiring struct {
	Bind       string    // host:port the proxy listens on
	Backends   []Backend // spec order
	Try        []string  // names of Backends, in order; not empty
	Forwarding Forwarding
	Secret     Secret // required for modern; written only into forwarding.secret
}

// BackendWiring is what a Paper-family backend must know of the proxy in
// front of it.
type BackendWiring struct {
	Forwarding Forwarding
	Secret     Secret // required for modern
}

// ErrInvalidWiring wraps a ProxyWiring or BackendWiring that breaks its
// rules (a caller's bug: the spec was checked before).
var ErrInvalidWiring = errors.New("invalid wiring")

// ErrModernUnsupported is returned by WireBungee for modern forwarding:
// BungeeCord and Waterfall only know legacy (spec.Parse already refuses
// it; this is the last line).
var ErrModernUnsupported = errors.New("bungeecord and waterfall do not support modern forwarding; use legacy")

// ConfigError is a config file the wiring cannot edit safely: not the
// format it should be, or a shape the edit would break (it names the
// file; the user must fix or delete it).
type ConfigError struct {
	File string
	Err  error
}

func (e *ConfigError) Error() string { return e.File + ": " + e.Err.Error() }
func (e *ConfigError) Unwrap() error { return e.Err }

var (
	backendName = regexp.MustCompile(`^[a-z][a-z0-9-]{0,62}$`)
	hostChars   = regexp.MustCompile(`^[A-Za-z0-9._:%-]+$`)
)

func checkAddr(what, addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%w: %s %q: %w", ErrInvalidWiring, what, addr, err)
	}
	if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 || strconv.Itoa(p) != port {
		return fmt.Errorf("%w: %s %q: bad port", ErrInvalidWiring, what, addr)
	}
	if !hostChars.MatchString(host) {
		return fmt.Errorf("%w: %s %q: bad host", ErrInvalidWiring, what, addr)
	}
	return nil
}

func (w *ProxyWiring) check() error {
	if err := checkAddr("bind", w.Bind); err != nil {
		return err
	}
	if len(w.Backends) == 0 {
		return fmt.Errorf("%w: no backends", ErrInvalidWiring)
	}
	seen := map[string]bool{}
	for _, b := range w.Backends {
		if !backendName.MatchString(b.Name) {
			return fmt.Errorf("%w: backend name %q", ErrInvalidWiring, b.Name)
		}
		if seen[b.Name] {
			return fmt.Errorf("%w: backend %q twice", ErrInvalidWiring, b.Name)
		}
		seen[b.Name] = true
		if err := checkAddr("backend "+b.Name, b.Addr); err != nil {
			return err
		}
	}
	if len(w.Try) == 0 {
		return fmt.Errorf("%w: empty try", ErrInvalidWiring)
	}
	tried := map[string]bool{}
	for _, t := range w.Try {
		if !seen[t] || tried[t] {
			return fmt.Errorf("%w: try %q is not a backend, or twice", ErrInvalidWiring, t)
		}
		tried[t] = true
	}
	return checkMode(w.Forwarding, w.Secret)
}

func checkMode(f Forwarding, s Secret) error {
	switch f {
	case ForwardingModern:
		if s.IsZero() {
			return fmt.Errorf("%w: modern forwarding without a secret", ErrInvalidWiring)
		}
		if _, err := ParseSecret(s.Reveal()); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalidWiring, err)
		}
	case ForwardingLegacy, ForwardingNone:
	default:
		return fmt.Errorf("%w: forwarding %q", ErrInvalidWiring, string(f))
	}
	return nil
}

// ---- Velocity ----

// WireVelocity edits velocity.toml (old; empty when Velocity never started
// and wrote its own) so the proxy listens on w.Bind, lists exactly
// w.Backends in [servers] with try = w.Try, forwards with
// w.Forwarding and reads its secret from forwarding.secret (write
// w.Secret.File() there). Entries of [forced-hosts] naming a server that
// is no longer a backend are dropped (Velocity refuses to start with
// them); a missing [forced-hosts] is written empty. Every other line
// (keys, tables, comments, and comments inside [servers]) is kept byte
// for byte: the file is edited line by line, never re-encoded.
//
// Errors: ErrInvalidWiring; *ConfigError for a file that is not TOML, is
// larger than 1 MiB, or whose shape the edit cannot keep valid (the
// result is parsed again and checked before it is returned).
func WireVelocity(old []byte, w ProxyWiring) ([]byte, error) {
	if err := w.check(); err != nil {
		return nil, err
	}
	if len(old) > maxConfigFile {
		return nil, &ConfigError{VelocityConfig, fmt.Errorf("larger than %d bytes", maxConfigFile)}
	}
	src := string(old)
	if strings.TrimSpace(src) == "" {
		src = "# Written by Kiln; bind, forwarding and [servers] are set again on every apply.\n" +
			"config-version = " + tomlString(velocityConfigVersion) + "\n"
	} else if _, err := toml.Decode(src, &map[string]any{}); err != nil {
		return nil, &ConfigError{VelocityConfig, fmt.Errorf("not valid TOML: %w", err)}
	}
	stmts := splitTOML(src)
	out := editVelocity(stmts, w)
	if err := checkVelocity(out, w); err != nil {
		return nil, &ConfigError{VelocityConfig, fmt.Errorf("cannot be wired safely: %w", err)}
	}
	return []byte(out), nil
}

// editVelocity writes the statements back with the wiring applied.
func editVelocity(stmts []tomlStmt, w ProxyWiring) string {
	top := map[string]string{
		"bind":                        tomlString(w.Bind),
		"player-info-forwarding-mode": tomlString(string(w.Forwarding)),
		"forwarding-secret-file":      tomlString(VelocitySecretFile),
	}
	topOrder := []string{"bind", "player-info-forwarding-mode", "forwarding-secret-file"}
	names := map[string]bool{}
	for _, b := range w.Backends {
		names[b.Name] = true
	}

	// Where missing top-level keys go: after the last top-level key, else
	// just before the first table.
	firstTable := len(stmts)
	for i, s := range stmts {
		if s.kind == stmtTable {
			firstTable = i
			break
		}
	}
	topAt := firstTable
	for i := firstTable - 1; i >= 0; i-- {
		if stmts[i].kind == stmtKV {
			topAt = i + 1
			break
		}
	}
	// Where [servers] gets its entries when it has no key to replace:
	// after its last comment line (before the blank lines that separate
	// it from the next table).
	serversAt := -1
	for i, s := range stmts {
		if s.kind != stmtTable || s.array || !slices.Equal(s.path, []string{"servers"}) {
			continue
		}
		serversAt = i + 1
		for j := i + 1; j < len(stmts) && stmts[j].kind != stmtTable; j++ {
			if stmts[j].kind == stmtKV {
				serversAt = -1 // replaced in place
				break
			}
			if strings.TrimSpace(stmts[j].text) != "" {
				serversAt = j + 1
			}
		}
		break
	}

	var out strings.Builder
	done := map[string]bool{}
	writeTop := func() {
		for _, k := range topOrder {
			if !done[k] {
				out.WriteString(k + " = " + top[k] + "\n")
				done[k] = true
			}
		}
	}
	serversDone, tryDone := false, false
	writeServers := func() {
		if !serversDone {
			for _, b := range w.Backends {
				out.WriteString(b.Name + " = " + tomlString(b.Addr) + "\n")
			}
			serversDone = true
		}
	}
	writeTry := func() {
		if !tryDone {
			q := make([]string, len(w.Try))
			for i, t := range w.Try {
				q[i] = tomlString(t)
			}
			out.WriteString("try = [" + strings.Join(q, ", ") + "]\n")
			tryDone = true
		}
	}
	finishServers := func() { writeServers(); writeTry() }

	table, inServers, sawServers, sawForced := "", false, false, false
	for i, s := range stmts {
		if i == topAt {
			writeTop()
		}
		if i == serversAt {
			finishServers()
		}
		switch s.kind {
		case stmtTable:
			if inServers {
				finishServers()
			}
			table = s.name()
			inServers = table == "servers"
			sawServers = sawServers || inServers
			sawForced = sawForced || table == "forced-hosts"
		case stmtKV:
			key := s.name()
			switch table {
			case "":
				if _, managed := top[key]; managed {
					if !done[key] {
						out.WriteString(key + " = " + top[key] + "\n")
						done[key] = true
					}
					continue
				}
			case "servers":
				writeServers()
				if key == "try" {
					writeTry()
				}
				continue // every other entry of [servers] is Kiln's to drop
			case "forced-hosts":
				if !forcedHostKnown(s.text, names) {
					continue
				}
			}
		}
		out.WriteString(s.text)
	}
	if topAt == len(stmts) {
		writeTop()
	}
	if serversAt == len(stmts) || inServers {
		finishServers()
	}
	if !sawServers {
		out.WriteString("\n[servers]\n")
		finishServers()
	}
	if !sawForced {
		out.WriteString("\n[forced-hosts]\n")
	}
	return out.String()
}

// forcedHostKnown reports whether a [forced-hosts] entry names only
// backends. An entry it cannot read is kept (the final check decides).
func forcedHostKnown(stmt string, names map[string]bool) bool {
	var m map[string]any
	if _, err := toml.Decode(stmt, &m); err != nil || len(m) != 1 {
		return true
	}
	for _, v := range m {
		list, ok := v.([]any)
		if !ok {
			return true
		}
		for _, e := range list {
			if s, ok := e.(string); ok && !names[s] {
				return false
			}
		}
	}
	return true
}

// checkVelocity parses the edited file and checks it says what w says.
func checkVelocity(out string, w ProxyWiring) error {
	var doc map[string]any
	if _, err := toml.Decode(out, &doc); err != nil {
		return err
	}
	for k, want := range map[string]string{
		"bind":                        w.Bind,
		"player-info-forwarding-mode": string(w.Forwarding),
		"forwarding-secret-file":      VelocitySecretFile,
	} {
		if got, _ := doc[k].(string); got != want {
			return fmt.Errorf("%s is %v after the edit", k, doc[k])
		}
	}
	servers, ok := doc["servers"].(map[string]any)
	if !ok || len(servers) != len(w.Backends)+1 {
		return errors.New("[servers] is not what was written")
	}
	for _, b := range w.Backends {
		if got, _ := servers[b.Name].(string); got != b.Addr {
			return fmt.Errorf("[servers] %s is %v after the edit", b.Name, servers[b.Name])
		}
	}
	try, _ := servers["try"].([]any)
	if len(try) != len(w.Try) {
		return errors.New("[servers] try is not what was written")
	}
	for i, t := range w.Try {
		if try[i] != t {
			return errors.New("[servers] try is not what was written")
		}
	}
	forced, ok := doc["forced-hosts"].(map[string]any)
	if !ok {
		return errors.New("[forced-hosts] is not a table")
	}
	for host, v := range forced {
		list, ok := v.([]any)
		if !ok {
			return fmt.Errorf("forced host %q is not a list", host)
		}
		for _, e := range list {
			if s, _ := e.(string); servers[s] == nil || s == "try" {
				return fmt.Errorf("forced host %q names %v, not a backend", host, e)
			}
		}
	}
	return nil
}

// tomlString is a TOML basic string. The values written are checked
// first (addresses, names, mode): no control characters reach here.
func tomlString(s string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(s) + `"`
}

// ---- BungeeCord / Waterfall ----

// WireBungee edits BungeeCord's or Waterfall's config.yml (old; empty
// when there is none yet): servers is exactly w.Backends in spec order
// (address set, restricted false, an existing entry's motd and other keys
// kept), listeners[0] gets host = w.Bind and priorities = w.Try, ip_forward
// is true for legacy and false for none. Forced hosts (in any listener)
// that name a server no longer a backend are dropped, and other
// listeners' priorities lose such names (BungeeCord refuses to start with
// them; a list left empty becomes w.Try). Comments and the order of keys
// are kept (yaml.v3 nodes); the layout is yaml.v3's, as BungeeCord itself
// rewrites the file when it saves it.
//
// Errors: ErrModernUnsupported for modern; ErrInvalidWiring; *ConfigError
// for a file that is not a YAML mapping or whose shape the edit cannot
// keep valid.
func WireBungee(old []byte, w ProxyWiring) ([]byte, error) {
	if w.Forwarding == ForwardingModern {
		return nil, ErrModernUnsupported
	}
	if err := w.check(); err != nil {
		return nil, err
	}
	if len(bytes.TrimSpace(old)) == 0 {
		old = []byte("# Written by Kiln; servers, ip_forward and listeners[0] host and priorities are set again on every apply.\nlisteners:\n- {}\n")
	}
	top, doc, err := loadYAML(BungeeConfig, old)
	if err != nil {
		return nil, err
	}
	names := map[string]bool{}
	for _, b := range w.Backends {
		names[b.Name] = true
	}

	setScalar(top, "ip_forward", yamlBool(w.Forwarding == ForwardingLegacy))

	oldServers := mapValue(top, "servers")
	servers := &yaml.Node{Kind: yaml.MappingNode}
	for _, b := range w.Backends {
		key := &yaml.Node{Kind: yaml.ScalarNode, Value: b.Name}
		entry := &yaml.Node{Kind: yaml.MappingNode}
		if oldServers != nil && oldServers.Kind == yaml.MappingNode {
			for i := 0; i+1 < len(oldServers.Content); i += 2 {
				if oldServers.Content[i].Value == b.Name && oldServers.Content[i+1].Kind == yaml.MappingNode {
					key, entry = oldServers.Content[i], oldServers.Content[i+1]
					break
				}
			}
		}
		setScalar(entry, "address", yamlString(b.Addr))
		setScalar(entry, "restricted", yamlBool(false))
		servers.Content = append(servers.Content, key, entry)
	}
	if oldServers != nil {
		servers.Style = oldServers.Style &^ yaml.FlowStyle
		servers.HeadComment, servers.LineComment, servers.FootComment = oldServers.HeadComment, oldServers.LineComment, oldServers.FootComment
	}
	setMapValue(top, "servers", servers)

	listeners := mapValue(top, "listeners")
	if listeners == nil || listeners.Kind != yaml.SequenceNode {
		listeners = &yaml.Node{Kind: yaml.SequenceNode}
		setMapValue(top, "listeners", listeners)
	}
	if len(listeners.Content) == 0 || listeners.Content[0].Kind != yaml.MappingNode {
		listeners.Content = append([]*yaml.Node{{Kind: yaml.MappingNode}}, listeners.Content...)
	}
	for i, l := range listeners.Content {
		if l.Kind != yaml.MappingNode {
			continue
		}
		if l.Style&yaml.FlowStyle != 0 {
			l.Style &^= yaml.FlowStyle
		}
		if i == 0 {
			setScalar(l, "host", yamlString(w.Bind))
			if p := mapValue(l, "priorities"); p != nil && p.Kind == yaml.SequenceNode {
				p.Content = yamlList(w.Try).Content // keeps the comments on the list
			} else {
				setMapValue(l, "priorities", yamlList(w.Try))
			}
		} else if p := mapValue(l, "priorities"); p != nil && p.Kind == yaml.SequenceNode {
			p.Content = slices.DeleteFunc(p.Content, func(n *yaml.Node) bool { return !names[n.Value] })
			if len(p.Content) == 0 {
				setMapValue(l, "priorities", yamlList(w.Try))
			}
		}
		if fh := mapValue(l, "forced_hosts"); fh != nil && fh.Kind == yaml.MappingNode {
			var keep []*yaml.Node
			for j := 0; j+1 < len(fh.Content); j += 2 {
				if v := fh.Content[j+1]; v.Kind != yaml.ScalarNode || names[v.Value] {
					keep = append(keep, fh.Content[j], v)
				}
			}
			fh.Content = keep
		}
	}
	out, err := encodeYAML(doc)
	if err != nil {
		return nil, &ConfigError{BungeeConfig, err}
	}
	if err := checkBungee(out, w); err != nil {
		return nil, &ConfigError{BungeeConfig, fmt.Errorf("cannot be wired safely: %w", err)}
	}
	return out, nil
}

// checkBungee decodes the edited file as BungeeCord reads it and checks it
// says what w says.
func checkBungee(out []byte, w ProxyWiring) error {
	var got struct {
		IPForward bool `yaml:"ip_forward"`
		Servers   map[string]struct {
			Address    string `yaml:"address"`
			Restricted bool   `yaml:"restricted"`
		} `yaml:"servers"`
		Listeners []struct {
			Host        string         `yaml:"host"`
			Priorities  []string       `yaml:"priorities"`
			ForcedHosts map[string]any `yaml:"forced_hosts"`
		} `yaml:"listeners"`
	}
	if err := yaml.Unmarshal(out, &got); err != nil {
		return err
	}
	if got.IPForward != (w.Forwarding == ForwardingLegacy) {
		return errors.New("ip_forward is not what was written")
	}
	if len(got.Servers) != len(w.Backends) {
		return errors.New("servers is not what was written")
	}
	for _, b := range w.Backends {
		if s, ok := got.Servers[b.Name]; !ok || s.Address != b.Addr || s.Restricted {
			return fmt.Errorf("servers.%s is not what was written", b.Name)
		}
	}
	if len(got.Listeners) == 0 || got.Listeners[0].Host != w.Bind || !slices.Equal(got.Listeners[0].Priorities, w.Try) {
		return errors.New("listeners[0] is not what was written")
	}
	for i, l := range got.Listeners {
		for _, p := range l.Priorities {
			if _, ok := got.Servers[p]; !ok {
				return fmt.Errorf("listeners[%d] priorities name %q, not a backend", i, p)
			}
		}
	}
	return nil
}

// ---- Paper-family backends ----

// WireBackend edits a Paper-family backend's files for the proxy in front
// of it. files holds the current content of BackendFiles() by name (a
// missing name: no such file); the answer holds the files to write, new or
// changed only (empty: nothing to do).
//
//   - modern: config/paper-global.yml proxies.velocity enabled: true,
//     online-mode: true, secret: the secret; spigot.yml settings.bungeecord
//     false if it is set.
//   - legacy: spigot.yml settings.bungeecord: true; paper-global.yml
//     proxies.velocity.enabled false if it is set.
//   - none: both turned off where they are set (a proxy that forwards
//     nothing must not meet a backend that waits for forwarded data).
//   - every mode: online-mode=false in server.properties (the proxy
//     authenticates players; a backend in online mode would ask the proxy
//     to authenticate again and refuse it).
//
// Missing files and sections are created (Paper and Spigot fill in every
// other key with its default on start); other settings, comments and
// order are kept. A file is never created only to turn something off.
//
// Errors: ErrInvalidWiring; *ConfigError for a YAML file that is not a
// mapping, or a file larger than 1 MiB.
func WireBackend(files map[string][]byte, b BackendWiring) (map[string][]byte, error) {
	if err := checkMode(b.Forwarding, b.Secret); err != nil {
		return nil, err
	}
	for name, data := range files {
		if len(data) > maxConfigFile {
			return nil, &ConfigError{name, fmt.Errorf("larger than %d bytes", maxConfigFile)}
		}
	}
	out := map[string][]byte{}
	edit := func(name string, create bool, f func(top *yaml.Node)) error {
		old, exists := files[name]
		if !exists && !create {
			return nil
		}
		src := old
		if len(bytes.TrimSpace(src)) == 0 {
			src = []byte("{}\n")
		}
		top, doc, err := loadYAML(name, src)
		if err != nil {
			return err
		}
		if top.Style&yaml.FlowStyle != 0 {
			top.Style &^= yaml.FlowStyle
		}
		f(top)
		data, err := encodeYAML(doc)
		if err != nil {
			return &ConfigError{name, err}
		}
		if string(data) == "{}\n" && !exists {
			return nil
		}
		if exists && sameYAML(src, data) {
			// Nothing to change: the operator's file stays as written
			// (yaml.v3 would lay it out its own way, a little
			// differently each time for some comments).
			return nil
		}
		out[name] = data
		return nil
	}
	velocityOn := b.Forwarding == ForwardingModern
	bungeeOn := b.Forwarding == ForwardingLegacy
	err := edit(PaperGlobalConfig, velocityOn, func(top *yaml.Node) {
		if velocityOn {
			v := ensureMap(ensureMap(top, "proxies"), "velocity")
			setScalar(v, "enabled", yamlBool(true))
			setScalar(v, "online-mode", yamlBool(true))
			setScalar(v, "secret", yamlString(b.Secret.Reveal()))
		} else {
			turnOff(top, "proxies", "velocity", "enabled")
		}
	})
	if err != nil {
		return nil, err
	}
	err = edit(SpigotConfig, bungeeOn, func(top *yaml.Node) {
		if bungeeOn {
			setScalar(ensureMap(top, "settings"), "bungeecord", yamlBool(true))
		} else {
			turnOff(top, "settings", "bungeecord")
		}
	})
	if err != nil {
		return nil, err
	}
	props := setProperties(files[PropertiesConfig], map[string]string{"online-mode": "false"})
	if old, ok := files[PropertiesConfig]; !ok || !bytes.Equal(props, old) {
		out[PropertiesConfig] = props
	}
	if err := checkBackend(files, out, b); err != nil {
		return nil, err
	}
	return out, nil
}

// sameYAML tells whether two YAML documents hold the same values.
func sameYAML(a, b []byte) bool {
	var va, vb any
	if yaml.Unmarshal(a, &va) != nil || yaml.Unmarshal(b, &vb) != nil {
		return false
	}
	return reflect.DeepEqual(va, vb)
}

// checkBackend reads the wired files back as Paper, Spigot and the
// server read them and checks they say what b says.
func checkBackend(files, out map[string][]byte, b BackendWiring) error {
	final := maps.Clone(files)
	maps.Copy(final, out)
	unsafe := func(name, format string, args ...any) error {
		return &ConfigError{name, fmt.Errorf("cannot be wired safely: "+format, args...)}
	}
	if v, _ := propertyValue(final[PropertiesConfig], "online-mode"); v != "false" {
		return unsafe(PropertiesConfig, "online-mode reads %q after the edit", v)
	}
	if data, ok := final[PaperGlobalConfig]; ok {
		var paper struct {
			Proxies struct {
				Velocity struct {
					Enabled    bool   `yaml:"enabled"`
					OnlineMode bool   `yaml:"online-mode"`
					Secret     string `yaml:"secret"`
				} `yaml:"velocity"`
			} `yaml:"proxies"`
		}
		if err := yaml.Unmarshal(data, &paper); err != nil {
			return unsafe(PaperGlobalConfig, "%w", err)
		}
		v := paper.Proxies.Velocity
		modern := b.Forwarding == ForwardingModern
		if v.Enabled != modern || modern && (!v.OnlineMode || v.Secret != b.Secret.Reveal()) {
			return unsafe(PaperGlobalConfig, "proxies.velocity is not what was written")
		}
	}
	if data, ok := final[SpigotConfig]; ok {
		var spigot struct {
			Settings struct {
				BungeeCord bool `yaml:"bungeecord"`
			} `yaml:"settings"`
		}
		if err := yaml.Unmarshal(data, &spigot); err != nil {
			return unsafe(SpigotConfig, "%w", err)
		}
		if spigot.Settings.BungeeCord != (b.Forwarding == ForwardingLegacy) {
			return unsafe(SpigotConfig, "settings.bungeecord is not what was written")
		}
	}
	return nil
}

// propertyValue is the value the last assignment of key has in a Java
// properties file, reading logical lines as java.util.Properties does (a
// line ending in an odd number of backslashes continues on the next).
// Escapes in values are left as written: this only checks Kiln's own
// plain values.
func propertyValue(data []byte, key string) (string, bool) {
	var value string
	found := false
	var logical strings.Builder
	for line := range strings.Lines(string(data)) {
		line = strings.TrimRight(line, "\r\n")
		if logical.Len() > 0 {
			line = strings.TrimLeft(line, " \t\f")
		} else if t := strings.TrimLeft(line, " \t\f"); t == "" || t[0] == '#' || t[0] == '!' {
			continue // comments never continue
		}
		n := len(line) - len(strings.TrimRight(line, `\`))
		if n%2 == 1 {
			logical.WriteString(line[:len(line)-1])
			continue
		}
		logical.WriteString(line)
		l := logical.String()
		logical.Reset()
		if k, ok := propertyKey(l); ok && k == key {
			rest := strings.TrimLeft(strings.TrimLeft(l, " \t\f")[len(k):], " \t\f")
			if rest != "" && (rest[0] == '=' || rest[0] == ':') {
				rest = strings.TrimLeft(rest[1:], " \t\f")
			}
			value, found = rest, true
		}
	}
	if logical.Len() > 0 {
		if k, ok := propertyKey(logical.String()); ok && k == key {
			return "", false // a key cut by a final backslash
		}
	}
	return value, found
}

// turnOff sets the boolean at path to false when it exists and is not
// false already.
func turnOff(top *yaml.Node, path ...string) {
	m := top
	for _, k := range path[:len(path)-1] {
		if m = mapValue(m, k); m == nil || m.Kind != yaml.MappingNode {
			return
		}
	}
	last := path[len(path)-1]
	if v := mapValue(m, last); v != nil && !(v.Kind == yaml.ScalarNode && v.Value == "false") {
		setScalar(m, last, yamlBool(false))
	}
}

// ensureMap is the mapping under key in m, created (or replacing a
// non-mapping value) when needed.
func ensureMap(m *yaml.Node, key string) *yaml.Node {
	v := mapValue(m, key)
	if v == nil || v.Kind != yaml.MappingNode {
		v = &yaml.Node{Kind: yaml.MappingNode}
		setMapValue(m, key, v)
	}
	v.Style &^= yaml.FlowStyle
	return v
}

// loadYAML parses a YAML document whose top is a mapping.
func loadYAML(name string, data []byte) (top, doc *yaml.Node, err error) {
	doc = &yaml.Node{}
	if err := yaml.Unmarshal(data, doc); err != nil {
		return nil, nil, &ConfigError{name, fmt.Errorf("not valid YAML: %w", err)}
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
		return nil, nil, &ConfigError{name, errors.New("not a YAML mapping")}
	}
	return doc.Content[0], doc, nil
}

// encodeYAML writes doc with yaml.v3, two-space indent. yaml.v3 panics on
// some node trees it cannot write; that is an error here, never a crash.
func encodeYAML(doc *yaml.Node) (out []byte, err error) {
	defer func() {
		if r := recover(); r != nil {
			out, err = nil, fmt.Errorf("cannot write YAML: %v", r)
		}
	}()
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(doc); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// setScalar sets key in m to the scalar v; an existing scalar is changed
// in place, so the comments on it are kept.
func setScalar(m *yaml.Node, key string, v *yaml.Node) {
	if old := mapValue(m, key); old != nil && old.Kind == yaml.ScalarNode {
		old.Tag, old.Value, old.Style = v.Tag, v.Value, 0
		return
	}
	setMapValue(m, key, v)
}

func yamlBool(b bool) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: strconv.FormatBool(b)}
}

func yamlString(s string) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s}
}

func yamlList(items []string) *yaml.Node {
	n := &yaml.Node{Kind: yaml.SequenceNode}
	for _, s := range items {
		n.Content = append(n.Content, yamlString(s))
	}
	return n
}

// ---- reading and writing a root ----

// ReadConfigs reads the named files (paths relative to the server root at
// root) that exist, for WireVelocity, WireBungee and WireBackend. Each must
// be a regular file of at most 1 MiB inside the root: a symlink leading
// out of the root, a FIFO, a device or a directory under one of these
// names is an error, never read.
func ReadConfigs(root string, names ...string) (map[string][]byte, error) {
	r, err := os.OpenRoot(root)
	if err != nil {
		return nil, fmt.Errorf("read configs: %w", err)
	}
	defer r.Close()
	files := map[string][]byte{}
	for _, name := range names {
		data, exists, err := readConfig(r, name)
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", name, err)
		}
		if exists {
			files[name] = data
		}
	}
	return files, nil
}

// WriteConfigs writes each file into the server root at root, atomically
// (temporary file, sync, rename) and never through a symlink (the rename
// replaces it), creating parent directories. forwarding.secret and
// config/paper-global.yml, which hold the secret, are written 0600, the
// others 0644.
func WriteConfigs(root string, files map[string][]byte) error {
	r, err := os.OpenRoot(root)
	if err != nil {
		return fmt.Errorf("write configs: %w", err)
	}
	defer r.Close()
	for _, name := range slices.Sorted(maps.Keys(files)) {
		perm := os.FileMode(0o644)
		if name == VelocitySecretFile || name == PaperGlobalConfig {
			perm = 0o600
		}
		data := files[name]
		if err := writeRoot(r, name, perm, func(w io.Writer) error { _, err := w.Write(data); return err }); err != nil {
			return fmt.Errorf("write %s: %w", name, err)
		}
	}
	return nil
}
