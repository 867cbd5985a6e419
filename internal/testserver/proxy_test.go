package testserver

import (
	"encoding/json"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/BurntSushi/toml"

	"github.com/kilnhq/kiln/internal/catalog"
	"github.com/kilnhq/kiln/internal/catalog/install"
)

// startProxy launches Run in proxy mode in dir (a new one when empty)
// and waits for Done; addr is the bound address.
func startProxy(t *testing.T, dir string, opts Options) *instance {
	t.Helper()
	opts.Proxy = true
	opts.Dir = dir
	in := launch(t, opts)
	msg := in.out.waitFor(t, `^Listening on /`)
	in.addr = strings.TrimPrefix(msg, "Listening on /")
	if _, port, err := net.SplitHostPort(in.addr); err != nil || port == "0" {
		t.Fatalf("Listening line %q does not name a bound host:port", msg)
	}
	in.out.waitFor(t, `^Done \(\d+\.\d{2}s\)!$`)
	return in
}

func writeVelocity(t *testing.T, dir, content string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, "velocity.toml"), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// velocityTOMLFor is a velocity.toml binding loopback on any port, with
// the servers (name, address pairs) and try list given.
func velocityTOMLFor(try []string, servers ...string) string {
	var b strings.Builder
	b.WriteString("bind = \"127.0.0.1:0\"\n\n[servers]\n")
	for i := 0; i+1 < len(servers); i += 2 {
		b.WriteString(servers[i] + " = " + strconv.Quote(servers[i+1]) + "\n")
	}
	q := make([]string, len(try))
	for i, n := range try {
		q[i] = strconv.Quote(n)
	}
	b.WriteString("try = [" + strings.Join(q, ", ") + "]\n")
	return b.String()
}

// deadAddr is a loopback address nothing listens on at the moment.
func deadAddr(t *testing.T) string {
	t.Helper()
	return "127.0.0.1:" + strconv.Itoa(freePort(t))
}

func TestProxyForwardsStatus(t *testing.T) {
	backend := start(t, Options{MOTD: "§aBehind the proxy", MaxPlayers: 7})
	other := start(t, Options{MOTD: "Second in try"})
	tests := []struct {
		name    string
		toml    string
		want    string
		wantMax int
	}{
		{"first try backend", velocityTOMLFor([]string{"lobby", "other"}, "lobby", backend.addr, "other", other.addr), "Behind the proxy", 7},
		{"first try backend down", velocityTOMLFor([]string{"lobby", "other"}, "lobby", deadAddr(t), "other", other.addr), "Second in try", 20},
		{"no backend reachable", velocityTOMLFor([]string{"lobby"}, "lobby", deadAddr(t)), NoBackendMOTD, 500},
		{"empty try", velocityTOMLFor(nil, "lobby", backend.addr), NoBackendMOTD, 500},
		{"show-max-players", "show-max-players = 42\n" + velocityTOMLFor(nil), NoBackendMOTD, 42},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			writeVelocity(t, dir, tt.toml)
			in := startProxy(t, dir, Options{})
			st := ping(t, in.addr)
			if st.Description != tt.want || st.Players.Max != tt.wantMax {
				t.Errorf("Ping(proxy %s) = %q, max %d; want %q, max %d", in.addr, st.Description, st.Players.Max, tt.want, tt.wantMax)
			}
			if tt.want != NoBackendMOTD && st.Version.Name != "Kiln Test 1.21.4" {
				t.Errorf("Ping(proxy %s).Version = %+v, want the backend's", in.addr, st.Version)
			}
			var raw struct{ Description struct{ Text string } }
			if err := json.Unmarshal(st.Raw, &raw); err != nil || !strings.HasSuffix(raw.Description.Text, tt.want) {
				t.Errorf("Ping(proxy %s).Raw description text = %q, %v; want it to end in %q", in.addr, raw.Description.Text, err, tt.want)
			}
			if tt.want == "Behind the proxy" && raw.Description.Text != "§aBehind the proxy" {
				t.Errorf("Ping(proxy %s).Raw description text = %q, want the backend's § codes kept", in.addr, raw.Description.Text)
			}
		})
	}
}

func TestProxyEnd(t *testing.T) {
	for _, cmd := range []string{"end", "shutdown", "stop"} {
		t.Run(cmd, func(t *testing.T) {
			dir := t.TempDir()
			writeVelocity(t, dir, velocityTOMLFor(nil))
			in := startProxy(t, dir, Options{})
			in.send(t, "glist")
			if got, want := in.out.next(t), "There are 0 players online."; got != want {
				t.Errorf("after glist: line %q, want %q", got, want)
			}
			in.send(t, cmd)
			for _, want := range []string{"Shutting down the proxy...", "Closing endpoint /" + in.addr, "Goodbye!"} {
				if got := in.out.next(t); got != want {
					t.Errorf("after %s: line %q, want %q", cmd, got, want)
				}
			}
			if err := in.wait(t); err != nil {
				t.Errorf("Run() after %s = %v, want nil", cmd, err)
			}
			if c, err := net.Dial("tcp", in.addr); err == nil {
				c.Close()
				t.Errorf("Dial(%s) after Run returned succeeded, want the listener closed", in.addr)
			}
		})
	}
}

// TestProxyDefaultConfig starts a proxy in an empty root: it writes
// Velocity's default velocity.toml (bind 0.0.0.0:25577, no servers),
// the port option wins over its bind, and a ping says no backend.
func TestProxyDefaultConfig(t *testing.T) {
	dir := t.TempDir()
	port := freePort(t)
	in := startProxy(t, dir, Options{Port: port})
	if want := "127.0.0.1:" + strconv.Itoa(port); in.addr != want {
		t.Errorf("listening on %s, want the port option's %s", in.addr, want)
	}
	if st := ping(t, in.addr); st.Description != NoBackendMOTD {
		t.Errorf("Ping(%s).Description = %q, want %q", in.addr, st.Description, NoBackendMOTD)
	}
	var doc struct {
		Bind    string         `toml:"bind"`
		Servers map[string]any `toml:"servers"`
	}
	if _, err := toml.DecodeFile(filepath.Join(dir, "velocity.toml"), &doc); err != nil {
		t.Fatalf("velocity.toml after the first start: %v", err)
	}
	if try, _ := doc.Servers["try"].([]any); doc.Bind != defaultBind || len(doc.Servers) != 1 || try == nil || len(try) != 0 {
		t.Errorf("velocity.toml after the first start: bind %q, servers %v; want %q and only an empty try", doc.Bind, doc.Servers, defaultBind)
	}
}

// TestProxyBindFromConfig checks that velocity.toml's bind port is used
// when the port option is zero.
func TestProxyBindFromConfig(t *testing.T) {
	dir := t.TempDir()
	port := freePort(t)
	writeVelocity(t, dir, "bind = \"127.0.0.1:"+strconv.Itoa(port)+"\"\n[servers]\ntry = []\n")
	in := startProxy(t, dir, Options{})
	if want := "127.0.0.1:" + strconv.Itoa(port); in.addr != want {
		t.Errorf("listening on %s, want bind's %s", in.addr, want)
	}
}

// TestProxyKilnWiring wires a proxy as Kiln does (the default file the
// first start writes, WireVelocity, Configure through the catalog
// profile) and checks that a ping of the proxy is the backend's MOTD.
func TestProxyKilnWiring(t *testing.T) {
	cat, err := catalog.Load(true)
	if err != nil {
		t.Fatal(err)
	}
	prof, ok := cat.Get("kiln-test-proxy")
	if !ok {
		t.Fatal(`Get("kiln-test-proxy") not found in the dev catalog`)
	}
	backend := start(t, Options{MOTD: "Wired by Kiln"})

	dir := t.TempDir()
	first := startProxy(t, dir, Options{})
	first.send(t, prof.StopCommand)
	if err := first.wait(t); err != nil {
		t.Fatalf("Run() after %s = %v, want nil", prof.StopCommand, err)
	}

	old, err := os.ReadFile(filepath.Join(dir, install.VelocityConfig))
	if err != nil {
		t.Fatal(err)
	}
	secret := install.NewSecret()
	wired, err := install.WireVelocity(old, install.ProxyWiring{
		Bind:       "0.0.0.0:25577", // Configure sets it below
		Backends:   []install.Backend{{Name: "lobby", Addr: backend.addr}},
		Try:        []string{"lobby"},
		Forwarding: install.ForwardingModern,
		Secret:     secret,
	})
	if err != nil {
		t.Fatalf("WireVelocity(default velocity.toml) = %v", err)
	}
	if err := install.WriteConfigs(dir, map[string][]byte{install.VelocityConfig: wired, install.VelocitySecretFile: secret.File()}); err != nil {
		t.Fatal(err)
	}
	port := freePort(t)
	if err := install.Configure(prof, dir, nil, "127.0.0.1", port); err != nil {
		t.Fatalf("Configure(kiln-test-proxy) = %v", err)
	}

	// Options.Port zero: the bind Configure wrote is the address.
	in := startProxy(t, dir, Options{})
	if want := "127.0.0.1:" + strconv.Itoa(port); in.addr != want {
		t.Errorf("listening on %s, want Configure's bind %s", in.addr, want)
	}
	if st := ping(t, in.addr); st.Description != "Wired by Kiln" {
		t.Errorf("Ping(proxy %s).Description = %q, want the backend's %q", in.addr, st.Description, "Wired by Kiln")
	}
}

func TestProxyRefuses(t *testing.T) {
	tests := []struct {
		name   string
		toml   string
		secret string // forwarding.secret, when not empty
	}{
		{"not toml", "bind = \n", ""},
		{"bind without port", "bind = \"127.0.0.1\"\n", ""},
		{"bind port out of range", "bind = \"127.0.0.1:70000\"\n", ""},
		{"try not registered", velocityTOMLFor([]string{"nope"}, "lobby", "127.0.0.1:1"), ""},
		{"try not a list", "[servers]\ntry = \"lobby\"\n", ""},
		{"server not an address", "[servers]\nlobby = 5\n", ""},
		{"server without port", "[servers]\nlobby = \"127.0.0.1\"\n", ""},
		{"unknown forwarding", "player-info-forwarding-mode = \"magic\"\n", ""},
		{"modern without secret", "player-info-forwarding-mode = \"modern\"\n", ""},
		{"modern with empty secret", "player-info-forwarding-mode = \"modern\"\n", "\n"},
		{"secret outside the root", "player-info-forwarding-mode = \"modern\"\nforwarding-secret-file = \"../secret\"\n", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			parent := t.TempDir()
			if err := os.WriteFile(filepath.Join(parent, "secret"), []byte("s3cret\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			dir := filepath.Join(parent, "root")
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			writeVelocity(t, dir, tt.toml)
			if tt.secret != "" {
				if err := os.WriteFile(filepath.Join(dir, "forwarding.secret"), []byte(tt.secret), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			opts := Options{Proxy: true, Dir: dir, Host: "127.0.0.1", StartupDelay: -1}
			if err := Run(t.Context(), opts, strings.NewReader(""), io.Discard); err == nil {
				t.Errorf("Run(proxy) with velocity.toml %q = nil, want an error", tt.toml)
			}
		})
	}
}

func TestProxyModernWithSecret(t *testing.T) {
	dir := t.TempDir()
	writeVelocity(t, dir, "player-info-forwarding-mode = \"modern\"\n"+velocityTOMLFor(nil))
	if err := os.WriteFile(filepath.Join(dir, "forwarding.secret"), []byte("s3cret"), 0o600); err != nil {
		t.Fatal(err)
	}
	in := startProxy(t, dir, Options{})
	in.cancel()
	if err := in.wait(t); err != nil {
		t.Errorf("Run() after cancel = %v, want nil", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "velocity.toml.kiln-tmp")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("velocity.toml.kiln-tmp: %v, want none left", err)
	}
}

func FuzzConfigureProxy(f *testing.F) {
	for _, s := range []string{
		defaultVelocityTOML,
		velocityTOMLFor([]string{"lobby"}, "lobby", "127.0.0.1:25565"),
		"bind = \"[::1]:1\"\n[servers]\ntry = [1]\n",
		"player-info-forwarding-mode = \"MODERN\"\nforwarding-secret-file = \"/etc/passwd\"\n",
		"show-max-players = -1\n[servers]\na = \"x\"\n",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, content string) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "velocity.toml"), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		root, err := os.OpenRoot(dir)
		if err != nil {
			t.Fatal(err)
		}
		defer root.Close()
		cfg, err := configureProxy(Options{}, root)
		if err != nil {
			return
		}
		if cfg.port < 0 || cfg.port > 65535 {
			t.Errorf("configureProxy(%q) port %d", content, cfg.port)
		}
		for _, name := range cfg.try {
			if _, ok := cfg.servers[name]; !ok {
				t.Errorf("configureProxy(%q) try %q is not a server", content, name)
			}
		}
		if got, err := os.ReadFile(filepath.Join(dir, "velocity.toml")); err != nil || string(got) != content {
			t.Errorf("configureProxy(%q) changed an existing velocity.toml", content)
		}
	})
}
