package install

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/google/uuid"
	yaml "go.yaml.in/yaml/v4"

	"github.com/kilnhq/kiln/internal/catalog"
	"github.com/kilnhq/kiln/internal/catalog/install/upstream"
)

// Configure is the package function Configure, except that a player of
// OPS or WHITELIST whose UUID is neither given nor in the file yet, on a
// server in online mode, is looked up at Mojang's profile API through the
// installer's fetcher (its mirror, User-Agent and limits).
func (i *Installer) Configure(ctx context.Context, p catalog.Profile, root string, env map[string]string, host string, port int) error {
	return configure(ctx, p, root, env, host, port, i.lookupUUID)
}

// maxConfigFile bounds a config file Configure reads and rewrites.
const maxConfigFile = 1 << 20

// mojangProfiles is Mojang's name → profile API: GET <name> answers
// {"id":"<32 hex>","name":"<name as registered>"}, 404 (formerly 204)
// for a name no account has.
const mojangProfiles = "https://api.mojang.com/users/profiles/minecraft/"

// ErrUnknownPlayer: an OPS or WHITELIST name that no Minecraft account
// has.
var ErrUnknownPlayer = errors.New("no Minecraft account has that name")

// PlayersError reports an OPS or WHITELIST list Configure could not
// write: a name without UUID Mojang does not know or could not be asked
// about, a file that is not a JSON list. Everything before it (the
// listen address, server.properties, eula.txt) was written.
type PlayersError struct {
	Var string // OPS or WHITELIST
	Err error
}

func (e *PlayersError) Error() string { return e.Var + ": " + e.Err.Error() }
func (e *PlayersError) Unwrap() error { return e.Err }

// lookupUUID returns the online UUID of a player name from Mojang.
func (i *Installer) lookupUUID(ctx context.Context, name string) (string, error) {
	body, err := i.fetch.Bytes(ctx, mojangProfiles+url.PathEscape(name))
	if upstream.IsStatus(err, http.StatusNotFound) || err == nil && len(bytes.TrimSpace(body)) == 0 {
		return "", fmt.Errorf("%s: %w", name, ErrUnknownPlayer)
	}
	if err != nil {
		return "", fmt.Errorf("look up the UUID of %s: %w", name, err)
	}
	var prof struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(body, &prof); err != nil {
		return "", fmt.Errorf("look up the UUID of %s: %w", name, err)
	}
	u, err := uuid.Parse(prof.ID)
	if err != nil {
		return "", fmt.Errorf("look up the UUID of %s: the answer's id %q is not a UUID", name, prof.ID)
	}
	return u.String(), nil
}

// Configure writes, into the server root at root, where the software must
// listen (host, empty for every interface, and port) and, for
// server.properties software, the keys its environment sets (MOTD, player
// limit, difficulty…, enable-rcon=false unless ENABLE_RCON is true), in
// the file the profile's Listen names. It runs before every start, so the
// file always says what Kiln gave the server: a value the user changed by
// hand in one of these keys is replaced (as Wings does); every other line
// is kept. The file is replaced atomically, never written through a
// symlink. It fails on a file it cannot understand (a config.yml that is
// not YAML) rather than start the software on a port it was not given.
//
// Software that needs the Minecraft EULA gets eula.txt from the EULA
// variable; OPS and WHITELIST players are added to ops.json and
// whitelist.json (players already there are kept). This function needs
// no network: a player without a UUID in the list or the file is given
// the offline UUID when ONLINE_MODE is false, and is an error otherwise
// (Installer.Configure looks it up).
//
// Velocity writes its default velocity.toml on its first start; until then
// Configure has no file to edit, and the --port of the start command alone
// sets the port (the address is then every interface).
func Configure(p catalog.Profile, root string, env map[string]string, host string, port int) error {
	return configure(context.Background(), p, root, env, host, port, nil)
}

func configure(ctx context.Context, p catalog.Profile, root string, env map[string]string, host string, port int,
	lookup func(context.Context, string) (string, error)) error {
	r, err := os.OpenRoot(root)
	if err != nil {
		return fmt.Errorf("configure %s: %w", p.Type, err)
	}
	defer r.Close()
	var name string
	var edit func(old []byte, exists bool) ([]byte, error)
	switch p.Listen {
	case catalog.ListenProperties:
		name = "server.properties"
		set := p.Properties(env)
		set["server-ip"] = host
		set["server-port"] = strconv.Itoa(port)
		edit = func(old []byte, _ bool) ([]byte, error) { return setProperties(old, set), nil }
	case catalog.ListenVelocity:
		name = "velocity.toml"
		edit = func(old []byte, exists bool) ([]byte, error) {
			if !exists {
				return nil, nil
			}
			return setVelocityBind(old, listenAddr(host, port)), nil
		}
	case catalog.ListenBungeeCord:
		name = "config.yml"
		edit = func(old []byte, exists bool) ([]byte, error) {
			return setBungeeListener(old, exists, listenAddr(host, port), port)
		}
	default:
		return nil
	}
	if err := editFile(r, name, edit); err != nil {
		return fmt.Errorf("configure %s: %w", p.Type, err)
	}
	if p.NeedsEULA() {
		eula := "# Written by Kiln from the EULA variable: " + catalog.EULAURL + "\neula=" + strconv.FormatBool(env["EULA"] == "true") + "\n"
		err := editFile(r, "eula.txt", func(old []byte, exists bool) ([]byte, error) {
			if exists && eulaValue(old) == (env["EULA"] == "true") {
				return old, nil
			}
			return []byte(eula), nil
		})
		if err != nil {
			return fmt.Errorf("configure %s: %w", p.Type, err)
		}
	}
	for _, l := range []struct{ key, file string }{{"OPS", "ops.json"}, {"WHITELIST", "whitelist.json"}} {
		if _, ok := p.Var(l.key); !ok || env[l.key] == "" {
			continue
		}
		players, err := catalog.ParsePlayers(env[l.key])
		if err != nil {
			return fmt.Errorf("configure %s: %s: %w", p.Type, l.key, err)
		}
		offline := env["ONLINE_MODE"] == "false"
		err = editFile(r, l.file, func(old []byte, exists bool) ([]byte, error) {
			return mergePlayers(ctx, old, exists, players, l.key == "OPS", offline, lookup)
		})
		if err != nil {
			return fmt.Errorf("configure %s: %w", p.Type, &PlayersError{Var: l.key, Err: err})
		}
	}
	return nil
}

// editFile rewrites name in r through edit, which gets the current
// content (exists false when there is none) and returns the new one: nil
// or the same bytes leave the file as it is.
func editFile(r *os.Root, name string, edit func(old []byte, exists bool) ([]byte, error)) error {
	old, exists, err := readConfig(r, name)
	if err != nil {
		return fmt.Errorf("read %s: %w", name, err)
	}
	out, err := edit(old, exists)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	if out == nil || (exists && bytes.Equal(out, old)) {
		return nil
	}
	if err := writeRoot(r, name, 0o644, func(w io.Writer) error { _, err := w.Write(out); return err }); err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	return nil
}

// eulaValue reads the eula key of an eula.txt as the server does: true
// only when it says true (in any case).
func eulaValue(data []byte) bool {
	for line := range strings.Lines(string(data)) {
		if k, ok := propertyKey(line); ok && k == "eula" {
			_, v, _ := strings.Cut(strings.TrimSpace(line), "=")
			return strings.EqualFold(strings.TrimSpace(v), "true")
		}
	}
	return false
}

// mergePlayers adds players to an ops.json or whitelist.json (a JSON list
// of objects with uuid and name; ops add level 4 and
// bypassesPlayerLimit false) and returns the new content. Entries already
// there are kept as they are (an op's level, fields Kiln does not know),
// except that a UUID given in the list replaces the entry's; a name
// matches in any case. A player new to the file gets the UUID given, else
// the offline UUID on a server in offline mode, else lookup's answer (an
// error without lookup).
func mergePlayers(ctx context.Context, old []byte, exists bool, players []catalog.Player, ops, offline bool,
	lookup func(context.Context, string) (string, error)) ([]byte, error) {
	var list []map[string]any
	if exists && len(bytes.TrimSpace(old)) > 0 {
		if err := json.Unmarshal(old, &list); err != nil {
			return nil, fmt.Errorf("not a JSON list of players (fix or delete the file): %w", err)
		}
	}
	byName := map[string]map[string]any{}
	for _, e := range list {
		if n, ok := e["name"].(string); ok {
			byName[strings.ToLower(n)] = e
		}
	}
	changed := false
	for _, pl := range players {
		if e, ok := byName[strings.ToLower(pl.Name)]; ok {
			if pl.UUID != "" && e["uuid"] != pl.UUID {
				e["uuid"] = pl.UUID
				changed = true
			}
			continue
		}
		id := pl.UUID
		switch {
		case id != "":
		case offline:
			id = catalog.OfflineUUID(pl.Name)
		case lookup != nil:
			var err error
			if id, err = lookup(ctx, pl.Name); err != nil {
				return nil, err
			}
		default:
			return nil, fmt.Errorf("%s needs a UUID: the server is in online mode; write it as %s:<uuid>", pl.Name, pl.Name)
		}
		e := map[string]any{"uuid": id, "name": pl.Name}
		if ops {
			e["level"] = 4
			e["bypassesPlayerLimit"] = false
		}
		list = append(list, e)
		byName[strings.ToLower(pl.Name)] = e
		changed = true
	}
	if !changed && exists {
		return old, nil
	}
	if list == nil {
		list = []map[string]any{}
	}
	out, err := json.MarshalIndent(list, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(out, '\n'), nil
}

// listenAddr is host:port, with every interface for an empty host.
func listenAddr(host string, port int) string {
	if host == "" {
		host = "0.0.0.0"
	}
	return net.JoinHostPort(host, strconv.Itoa(port))
}

// readConfig reads name from r if it is a regular file. os.Root follows a
// symlink only while it stays inside the root; the file is opened
// non-blocking and checked on its descriptor, so a FIFO or a device
// planted under that name is refused, never read.
func readConfig(r *os.Root, name string) ([]byte, bool, error) {
	f, err := r.OpenFile(name, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, false, err
	}
	if !fi.Mode().IsRegular() {
		return nil, false, fmt.Errorf("%s is not a regular file", name)
	}
	data, err := io.ReadAll(io.LimitReader(f, maxConfigFile+1))
	if err != nil {
		return nil, false, err
	}
	if len(data) > maxConfigFile {
		return nil, false, fmt.Errorf("larger than %d bytes", maxConfigFile)
	}
	return data, true, nil
}

// setProperties sets keys in a Java properties file: a line assigning one
// of them is replaced in place (the first; later duplicates are dropped,
// Java would let the last win), missing keys are appended in name order,
// and every other line is kept byte for byte.
func setProperties(old []byte, set map[string]string) []byte {
	var out bytes.Buffer
	if len(old) == 0 {
		out.WriteString("# Written by Kiln; the keys Kiln manages are set again before every start.\n")
	}
	done := map[string]bool{}
	for line := range strings.Lines(string(old)) {
		key, ok := propertyKey(line)
		if v, managed := set[key]; ok && managed {
			if !done[key] {
				out.WriteString(key + "=" + escapeProperty(v) + "\n")
				done[key] = true
			}
			continue
		}
		out.WriteString(line)
		if !strings.HasSuffix(line, "\n") {
			out.WriteByte('\n')
		}
	}
	for _, k := range slices.Sorted(maps.Keys(set)) {
		if !done[k] {
			out.WriteString(k + "=" + escapeProperty(set[k]) + "\n")
		}
	}
	return out.Bytes()
}

// propertyKey is the key a properties line assigns; false for blank and
// comment lines. Keys Kiln manages hold no escapes, so a key with a
// backslash never matches one.
func propertyKey(line string) (string, bool) {
	s := strings.TrimLeft(line, " \t\f")
	if s == "" || s[0] == '#' || s[0] == '!' || s[0] == '\n' || s[0] == '\r' {
		return "", false
	}
	end := strings.IndexAny(s, "=: \t\f\r\n")
	if end < 0 {
		end = len(s)
	}
	return s[:end], true
}

// escapeProperty escapes a value for a properties file: backslashes, and
// a leading space, which the format would otherwise drop.
func escapeProperty(v string) string {
	v = strings.ReplaceAll(v, `\`, `\\`)
	if strings.HasPrefix(v, " ") {
		v = `\` + v
	}
	return v
}

// setVelocityBind replaces the top-level bind line of velocity.toml (the
// one before the first [table]), or adds one at the top.
func setVelocityBind(old []byte, addr string) []byte {
	line := "bind = " + strconv.Quote(addr) + "\n"
	var out bytes.Buffer
	done, inTable := false, false
	for l := range strings.Lines(string(old)) {
		t := strings.TrimSpace(l)
		if strings.HasPrefix(t, "[") {
			inTable = true
		}
		if !inTable && !done && (strings.HasPrefix(t, "bind ") || strings.HasPrefix(t, "bind=")) {
			out.WriteString(line)
			done = true
			continue
		}
		out.WriteString(l)
		if !strings.HasSuffix(l, "\n") {
			out.WriteByte('\n')
		}
	}
	if !done {
		return append([]byte(line), out.Bytes()...)
	}
	return out.Bytes()
}

// setBungeeListener sets the host of config.yml's first listener, writing
// a minimal file when there is none: BungeeCord and Waterfall fill in
// every other key with its default and save the file on start.
func setBungeeListener(old []byte, exists bool, addr string, port int) ([]byte, error) {
	if !exists || len(bytes.TrimSpace(old)) == 0 {
		return []byte("# Written by Kiln; listeners[0].host is set again before every start.\n" +
			"listeners:\n- host: " + addr + "\n  query_port: " + strconv.Itoa(port) + "\n"), nil
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(old, &doc); err != nil {
		return nil, fmt.Errorf("not valid YAML: %w", err)
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
		return nil, errors.New("not a YAML mapping")
	}
	top := doc.Content[0]
	listeners := mapValue(top, "listeners")
	if listeners == nil || listeners.Kind != yaml.SequenceNode {
		listeners = &yaml.Node{Kind: yaml.SequenceNode}
		setMapValue(top, "listeners", listeners)
	}
	if len(listeners.Content) == 0 || listeners.Content[0].Kind != yaml.MappingNode {
		listeners.Content = append([]*yaml.Node{{Kind: yaml.MappingNode}}, listeners.Content...)
	}
	setMapValue(listeners.Content[0], "host", &yaml.Node{Kind: yaml.ScalarNode, Value: addr})
	var out bytes.Buffer
	enc := yaml.NewEncoder(&out)
	enc.SetIndent(2)
	if err := enc.Encode(&doc); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

func mapValue(m *yaml.Node, key string) *yaml.Node {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}

func setMapValue(m *yaml.Node, key string, v *yaml.Node) {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			m.Content[i+1] = v
			return
		}
	}
	m.Content = append(m.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: key}, v)
}

// EditProperties sets keys in a server.properties file (as Configure
// does: a line assigning one is replaced in place, a missing one
// appended) and removes the lines assigning the keys of remove; every
// other line is kept byte for byte. The deployments executor writes a
// spec's properties with it.
func EditProperties(old []byte, set map[string]string, remove []string) []byte {
	if len(remove) > 0 {
		var kept bytes.Buffer
		for line := range strings.Lines(string(old)) {
			if key, ok := propertyKey(line); ok && slices.Contains(remove, key) {
				if _, reset := set[key]; !reset {
					continue
				}
			}
			kept.WriteString(line)
		}
		old = kept.Bytes()
	}
	if len(set) == 0 {
		return old
	}
	return setProperties(old, set)
}

// ManagedProperties are the server.properties keys Kiln sets itself
// before every start for software of p run with env, the variables a
// user set (the listen address and port, and the keys of the variables
// that have a value: set in env, or a default): a deployment spec cannot
// own them. A key of a variable without default (DIFFICULTY) is the
// spec's to set while env leaves the variable unset.
func ManagedProperties(p catalog.Profile, env map[string]string) []string {
	if p.Listen != catalog.ListenProperties {
		return nil
	}
	all := map[string]string{}
	for _, v := range p.EnvironmentVariables {
		if _, set := env[v.Key]; set || v.Default != nil {
			all[v.Key] = "x"
		}
	}
	keys := slices.Collect(maps.Keys(p.Properties(all)))
	keys = append(keys, "server-ip", "server-port")
	slices.Sort(keys)
	return keys
}
