package install

import (
	"bytes"
	"errors"
	"flag"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/wiring/*.golden")

// testSecret is a fixed secret, so golden files are stable.
var testSecret = mustSecret("k1lnT3stS3cretk1lnT3stS3cretk1lnT3stS3cretk1lnT3stS3cret01234567")

func mustSecret(s string) Secret {
	sec, err := ParseSecret(s)
	if err != nil {
		panic(err)
	}
	return sec
}

func fixture(t *testing.T, name string) []byte {
	t.Helper()
	if name == "" {
		return nil
	}
	data, err := os.ReadFile(filepath.Join("testdata", "wiring", name))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// golden compares got with testdata/wiring/<name>.golden (rewritten with
// -update).
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", "wiring", name+".golden")
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s: got\n%s\nwant\n%s", name, got, want)
	}
}

func twoBackends(f Forwarding) ProxyWiring {
	return ProxyWiring{
		Bind:       "0.0.0.0:30100",
		Backends:   []Backend{{"survival", "10.0.0.5:30001"}, {"lobby", "10.0.0.6:30002"}},
		Try:        []string{"lobby", "survival"},
		Forwarding: f,
		Secret:     testSecret,
	}
}

func oneBackend(f Forwarding) ProxyWiring {
	return ProxyWiring{
		Bind:       "[::1]:30101",
		Backends:   []Backend{{"lobby", "10.0.0.6:30002"}},
		Try:        []string{"lobby"},
		Forwarding: f,
	}
}

// keptLines are lines of the fixtures the user wrote that must survive.
var keptLines = map[string][]string{
	"velocity.toml": {
		"# Config version. Do not change this\n", "config-version = \"2.7\"\n",
		"# USER: our network's own setting, not Velocity's\n", "  \"keep\", # a comment inside an array\n",
		"ping-passthrough = \"DISABLED\" # trailing comment kept\n",
		"# In what order we should try servers when a player logs in or is kicked from a server.\n",
		"\"lobby.example.com\" = [\n  \"lobby\"\n]\n", "[advanced]\n", "accepts-transfers = false\n", "map = \"Velocity\"\n",
	},
	"config.yml": {"# USER: edited by hand, keep this comment\n", "motd: '&1Just another Waterfall - Forced Host'", "lobby.example.com: lobby", "stats: 1d0f7bd0", "- bungeecord.command.alert"},
}

// TestWireVelocity: golden outputs from Velocity's default file (with the
// user's comments and keys) and from no file; wiring twice is wiring
// once; a backend removed from the spec leaves [servers] and its forced
// host.
func TestWireVelocity(t *testing.T) {
	for _, tc := range []struct {
		name   string
		input  string // fixture, "" for no file
		before *ProxyWiring
		w      ProxyWiring
	}{
		{name: "velocity-modern", input: "velocity.toml", w: twoBackends(ForwardingModern)},
		{name: "velocity-legacy", input: "velocity.toml", w: twoBackends(ForwardingLegacy)},
		{name: "velocity-fresh", w: twoBackends(ForwardingModern)},
		{name: "velocity-remove", input: "velocity.toml", before: new(twoBackends(ForwardingModern)), w: oneBackend(ForwardingNone)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := fixture(t, tc.input)
			if tc.before != nil {
				var err error
				if in, err = WireVelocity(in, *tc.before); err != nil {
					t.Fatal(err)
				}
			}
			got, err := WireVelocity(in, tc.w)
			if err != nil {
				t.Fatalf("WireVelocity: %v", err)
			}
			golden(t, tc.name, got)
			again, err := WireVelocity(got, tc.w)
			if err != nil || !bytes.Equal(again, got) {
				t.Errorf("WireVelocity twice = %q, %v; want the first output", again, err)
			}
			if tc.input != "" {
				for _, l := range keptLines[tc.input] {
					if !strings.Contains(string(got), l) {
						t.Errorf("output lost %q", l)
					}
				}
			}
			for _, gone := range []string{"factions", "minigames"} {
				if strings.Contains(string(got), gone) {
					t.Errorf("output still names %q", gone)
				}
			}
			if tc.before != nil && strings.Contains(string(got), "survival") {
				t.Errorf("removed backend still there:\n%s", got)
			}
		})
	}
}

// TestWireBungee: the same for BungeeCord/Waterfall's config.yml; modern
// is refused.
func TestWireBungee(t *testing.T) {
	for _, tc := range []struct {
		name   string
		input  string
		before *ProxyWiring
		w      ProxyWiring
	}{
		{name: "bungee-legacy", input: "config.yml", w: twoBackends(ForwardingLegacy)},
		{name: "bungee-fresh", w: twoBackends(ForwardingLegacy)},
		{name: "bungee-remove", input: "config.yml", before: new(twoBackends(ForwardingLegacy)), w: oneBackend(ForwardingNone)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := fixture(t, tc.input)
			if tc.before != nil {
				var err error
				if in, err = WireBungee(in, *tc.before); err != nil {
					t.Fatal(err)
				}
			}
			got, err := WireBungee(in, tc.w)
			if err != nil {
				t.Fatalf("WireBungee: %v", err)
			}
			golden(t, tc.name, got)
			again, err := WireBungee(got, tc.w)
			if err != nil || !bytes.Equal(again, got) {
				t.Errorf("WireBungee twice = %q, %v; want the first output", again, err)
			}
			if tc.input != "" {
				for _, l := range keptLines[tc.input] {
					if !strings.Contains(string(got), l) {
						t.Errorf("output lost %q", l)
					}
				}
			}
			if strings.Contains(string(got), "pvp") {
				t.Errorf("output still names pvp:\n%s", got)
			}
			if tc.before != nil && strings.Contains(string(got), "survival") {
				t.Errorf("removed backend still there:\n%s", got)
			}
		})
	}
	if _, err := WireBungee(fixture(t, "config.yml"), twoBackends(ForwardingModern)); !errors.Is(err, ErrModernUnsupported) {
		t.Errorf("WireBungee(modern) = %v, want ErrModernUnsupported", err)
	}
}

// TestWireBackend: modern, legacy and none on Paper's files, on no files
// at all, and switching modes; wiring the result again changes nothing.
func TestWireBackend(t *testing.T) {
	defaults := func(t *testing.T) map[string][]byte {
		return map[string][]byte{
			PaperGlobalConfig: fixture(t, "paper-global.yml"),
			SpigotConfig:      fixture(t, "spigot.yml"),
			PropertiesConfig:  fixture(t, "server.properties"),
		}
	}
	modern := BackendWiring{Forwarding: ForwardingModern, Secret: testSecret}
	for _, tc := range []struct {
		name   string
		files  func(t *testing.T) map[string][]byte
		before *BackendWiring
		b      BackendWiring
	}{
		{name: "backend-modern", files: defaults, b: modern},
		{name: "backend-legacy", files: defaults, b: BackendWiring{Forwarding: ForwardingLegacy}},
		{name: "backend-fresh-modern", files: func(*testing.T) map[string][]byte { return nil }, b: modern},
		{name: "backend-fresh-legacy", files: func(*testing.T) map[string][]byte { return nil }, b: BackendWiring{Forwarding: ForwardingLegacy}},
		{name: "backend-modern-to-legacy", files: defaults, before: &modern, b: BackendWiring{Forwarding: ForwardingLegacy}},
		{name: "backend-legacy-to-none", files: defaults, before: &BackendWiring{Forwarding: ForwardingLegacy}, b: BackendWiring{Forwarding: ForwardingNone}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			files := tc.files(t)
			if files == nil {
				files = map[string][]byte{}
			}
			if tc.before != nil {
				out, err := WireBackend(files, *tc.before)
				if err != nil {
					t.Fatal(err)
				}
				maps.Copy(files, out)
			}
			out, err := WireBackend(files, tc.b)
			if err != nil {
				t.Fatalf("WireBackend: %v", err)
			}
			var all bytes.Buffer
			for _, name := range slices.Sorted(maps.Keys(out)) {
				all.WriteString("=== " + name + "\n")
				all.Write(out[name])
			}
			golden(t, tc.name, all.Bytes())
			maps.Copy(files, out)
			if again, err := WireBackend(files, tc.b); err != nil || len(again) != 0 {
				t.Errorf("WireBackend twice wrote %v, %v; want nothing", slices.Collect(maps.Keys(again)), err)
			}
			if tc.name == "backend-modern" {
				for name, l := range map[string]string{
					PaperGlobalConfig: "# USER: our own note, keep it", SpigotConfig: "# USER: keep this line too",
					PropertiesConfig: "# USER: a hand-written comment\n",
				} {
					if !strings.Contains(string(files[name]), l) {
						t.Errorf("%s lost %q", name, l)
					}
				}
			}
		})
	}
}

// TestWiringErrors: a wiring that breaks its rules is ErrInvalidWiring; a
// file that is not the format it should be is a *ConfigError naming it.
func TestWiringErrors(t *testing.T) {
	bad := map[string]func(*ProxyWiring){
		"bind without port":  func(w *ProxyWiring) { w.Bind = "0.0.0.0" },
		"bind port 0":        func(w *ProxyWiring) { w.Bind = "0.0.0.0:0" },
		"quote in address":   func(w *ProxyWiring) { w.Backends[0].Addr = `a"b:1` },
		"no backends":        func(w *ProxyWiring) { w.Backends = nil },
		"bad name":           func(w *ProxyWiring) { w.Backends[0].Name = "Lobby" },
		"duplicate backend":  func(w *ProxyWiring) { w.Backends[1].Name = w.Backends[0].Name },
		"try not a backend":  func(w *ProxyWiring) { w.Try = []string{"hub"} },
		"empty try":          func(w *ProxyWiring) { w.Try = nil },
		"unknown forwarding": func(w *ProxyWiring) { w.Forwarding = "bungeeguard" },
		"modern no secret":   func(w *ProxyWiring) { w.Secret = Secret{} },
	}
	for name, breakIt := range bad {
		t.Run(name, func(t *testing.T) {
			w := twoBackends(ForwardingModern)
			w.Backends = slices.Clone(w.Backends)
			breakIt(&w)
			if _, err := WireVelocity(fixture(t, "velocity.toml"), w); !errors.Is(err, ErrInvalidWiring) {
				t.Errorf("WireVelocity = %v, want ErrInvalidWiring", err)
			}
		})
	}
	if _, err := WireBackend(nil, BackendWiring{Forwarding: ForwardingModern}); !errors.Is(err, ErrInvalidWiring) {
		t.Errorf("WireBackend(modern, no secret) = %v, want ErrInvalidWiring", err)
	}

	for _, tc := range []struct {
		name string
		call func() error
		file string
	}{
		{"velocity not toml", func() error {
			_, err := WireVelocity([]byte("bind = [unclosed\n"), twoBackends(ForwardingModern))
			return err
		}, VelocityConfig},
		{"velocity binary", func() error {
			_, err := WireVelocity([]byte("\x00\x01\xff"), twoBackends(ForwardingModern))
			return err
		}, VelocityConfig},
		{"velocity servers inline", func() error {
			_, err := WireVelocity([]byte("servers = { lobby = \"a:1\" }\n"), twoBackends(ForwardingModern))
			return err
		}, VelocityConfig},
		{"velocity too large", func() error {
			_, err := WireVelocity(bytes.Repeat([]byte("#\n"), maxConfigFile), twoBackends(ForwardingModern))
			return err
		}, VelocityConfig},
		{"bungee not yaml", func() error {
			_, err := WireBungee([]byte("listeners: [unclosed\n"), twoBackends(ForwardingLegacy))
			return err
		}, BungeeConfig},
		{"bungee a list", func() error { _, err := WireBungee([]byte("- a\n- b\n"), twoBackends(ForwardingLegacy)); return err }, BungeeConfig},
		{"paper-global a string", func() error {
			_, err := WireBackend(map[string][]byte{PaperGlobalConfig: []byte("just text\n")}, BackendWiring{Forwarding: ForwardingModern, Secret: testSecret})
			return err
		}, PaperGlobalConfig},
		{"properties continued into kiln's line", func() error {
			_, err := WireBackend(map[string][]byte{PropertiesConfig: []byte("motd=a\\\n")}, BackendWiring{Forwarding: ForwardingNone})
			return err
		}, PropertiesConfig},
		{"spigot not yaml", func() error {
			_, err := WireBackend(map[string][]byte{SpigotConfig: []byte("settings: {\n")}, BackendWiring{Forwarding: ForwardingLegacy})
			return err
		}, SpigotConfig},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			ce, ok := errors.AsType[*ConfigError](err)
			if !ok || ce.File != tc.file {
				t.Errorf("err = %v, want a *ConfigError for %s", err, tc.file)
			}
		})
	}
}

// TestConfigsReadWrite: ReadConfigs refuses a symlink out of the root, a
// FIFO and a directory; WriteConfigs replaces a symlink instead of
// writing through it, and writes secret-bearing files 0600.
func TestPropertyValue(t *testing.T) {
	for in, want := range map[string]string{
		"online-mode=false\n":                        "false",
		"a=1\nonline-mode = true\nonline-mode:false": "false",
		"# x \\\nonline-mode=false\n":                "false",
		"motd=a\\\n  online-mode=false\n":            "",
		"motd=a\\\\\nonline-mode=false\n":            "false",
		"online-mode\tfalse\n":                       "false",
	} {
		if got, _ := propertyValue([]byte(in), "online-mode"); got != want {
			t.Errorf("propertyValue(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestConfigsReadWrite(t *testing.T) {
	outside := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(outside, []byte("online-mode=true\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for name, plant := range map[string]func(path string) error{
		"symlink out": func(path string) error { return os.Symlink(outside, path) },
		"fifo":        func(path string) error { return syscall.Mkfifo(path, 0o644) },
		"directory":   func(path string) error { return os.Mkdir(path, 0o755) },
	} {
		t.Run(name, func(t *testing.T) {
			root := t.TempDir()
			if err := plant(filepath.Join(root, PropertiesConfig)); err != nil {
				t.Fatal(err)
			}
			if _, err := ReadConfigs(root, BackendFiles()...); err == nil {
				t.Fatal("ReadConfigs succeeded")
			}
		})
	}

	root := t.TempDir()
	if err := os.Symlink(outside, filepath.Join(root, PropertiesConfig)); err != nil {
		t.Fatal(err)
	}
	out, err := WireBackend(map[string][]byte{}, BackendWiring{Forwarding: ForwardingModern, Secret: testSecret})
	if err != nil {
		t.Fatal(err)
	}
	out[VelocitySecretFile] = testSecret.File()
	if err := WriteConfigs(root, out); err != nil {
		t.Fatal(err)
	}
	if data, _ := os.ReadFile(outside); string(data) != "online-mode=true\n" {
		t.Errorf("written through a symlink: outside file is %q", data)
	}
	got, err := ReadConfigs(root, append(BackendFiles(), VelocitySecretFile, "missing.yml")...)
	if err != nil {
		t.Fatal(err)
	}
	if !maps.EqualFunc(got, out, bytes.Equal) {
		t.Errorf("ReadConfigs after WriteConfigs = %q, want %q", got, out)
	}
	for name, want := range map[string]os.FileMode{VelocitySecretFile: 0o600, PaperGlobalConfig: 0o600, PropertiesConfig: 0o644} {
		fi, err := os.Lstat(filepath.Join(root, name))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode() != want {
			t.Errorf("%s: mode %v, want %v", name, fi.Mode(), want)
		}
	}
}

// TestWireBackendLeavesSettledFiles: a config file whose values already
// say what the wiring says is left byte for byte as the operator wrote
// it (comments, layout, flow style), whatever yaml.v3 would make of it;
// one that changes is written once and then left alone.
func TestWireBackendLeavesSettledFiles(t *testing.T) {
	paper := []byte("# my settings\nproxies: {velocity: {enabled: false}}  # off\n? t\n#\n")
	files := map[string][]byte{PaperGlobalConfig: paper, PropertiesConfig: []byte("online-mode=false\n")}
	out, err := WireBackend(files, BackendWiring{Forwarding: ForwardingNone})
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != 0 {
		t.Errorf("nothing to change, but WireBackend rewrote %v", slices.Sorted(maps.Keys(out)))
	}
	out, err = WireBackend(files, BackendWiring{Forwarding: ForwardingModern, Secret: testSecret})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := out[PaperGlobalConfig]; !ok {
		t.Fatal("modern forwarding did not change paper-global.yml")
	}
	maps.Copy(files, out)
	if again, err := WireBackend(files, BackendWiring{Forwarding: ForwardingModern, Secret: testSecret}); err != nil || len(again) != 0 {
		t.Errorf("the second wiring changed %v (%v), want nothing", slices.Sorted(maps.Keys(again)), err)
	}
}
