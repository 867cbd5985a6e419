package install

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func addFixtures(f *testing.F, names ...string) {
	for _, n := range names {
		data, err := os.ReadFile(filepath.Join("testdata", "wiring", n))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
}

// wiringErr reports an error the editors may return for arbitrary input.
func wiringErr(err error) bool {
	_, ok := errors.AsType[*ConfigError](err)
	return ok
}

// FuzzWireVelocity: any velocity.toml either is refused with a
// *ConfigError or gives a file that WireVelocity itself checked and that
// a second wiring leaves unchanged. Never a panic.
func FuzzWireVelocity(f *testing.F) {
	addFixtures(f, "velocity.toml")
	for _, s := range []string{
		"", "bind = 1", "[servers]\n", "[servers]\ntry = [\n'a', # ]\n]\nx = 1\n", "a = \"\"\"\n[servers]\n\"\"\"\n",
		"[forced-hosts]\n\"x\" = [\"lobby\", \"gone\"]\n", "'bind' = \"x:1\"\n", "[[servers]]\n", "servers.lobby = \"a:1\"\n",
		"a = '''x'''''\n", "a = \"\"\"x\\\"\"\"\"\n", "bind = \"a\" # c\r\n[servers]\r\nlobby = \"b:1\"\r\n",
	} {
		f.Add([]byte(s))
	}
	w := twoBackends(ForwardingModern)
	f.Fuzz(func(t *testing.T, data []byte) {
		var joined strings.Builder
		for _, s := range splitTOML(string(data)) {
			joined.WriteString(s.text)
		}
		if want := string(data); joined.String() != want && joined.String() != want+"\n" {
			t.Fatalf("splitTOML(%q) joins to %q", data, joined.String())
		}
		out, err := WireVelocity(data, w)
		if err != nil {
			if !wiringErr(err) {
				t.Fatalf("WireVelocity(%q) = %v, not a *ConfigError", data, err)
			}
			return
		}
		again, err := WireVelocity(out, w)
		if err != nil || !bytes.Equal(again, out) {
			t.Fatalf("WireVelocity(%q) not idempotent:\n%s\nthen\n%s (%v)", data, out, again, err)
		}
	})
}

// FuzzWireBungee: the same for config.yml.
func FuzzWireBungee(f *testing.F) {
	addFixtures(f, "config.yml")
	for _, s := range []string{"", "listeners: 1", "servers: [a]\n", "a: &x {b: *x}\n", "listeners:\n- priorities: [gone]\n- priorities: [gone]\n", "{servers: {lobby: {motd: hi}}}"} {
		f.Add([]byte(s))
	}
	w := twoBackends(ForwardingLegacy)
	f.Fuzz(func(t *testing.T, data []byte) {
		out, err := WireBungee(data, w)
		if err != nil {
			if !wiringErr(err) {
				t.Fatalf("WireBungee(%q) = %v, not a *ConfigError", data, err)
			}
			return
		}
		again, err := WireBungee(out, w)
		if err != nil || !bytes.Equal(again, out) {
			t.Fatalf("WireBungee(%q) not idempotent:\n%s\nthen\n%s (%v)", data, out, again, err)
		}
	})
}

// FuzzWireBackend: arbitrary paper-global.yml, spigot.yml and
// server.properties, each mode.
func FuzzWireBackend(f *testing.F) {
	read := func(n string) []byte {
		data, err := os.ReadFile(filepath.Join("testdata", "wiring", n))
		if err != nil {
			f.Fatal(err)
		}
		return data
	}
	f.Add(read("paper-global.yml"), read("spigot.yml"), read("server.properties"), uint8(0))
	f.Add([]byte("proxies: 1\n"), []byte("settings: [a]\n"), []byte("online-mode"), uint8(1))
	f.Add([]byte(""), []byte("{}"), []byte("online-mode=true\\\n"), uint8(2))
	modes := []BackendWiring{{Forwarding: ForwardingModern, Secret: testSecret}, {Forwarding: ForwardingLegacy}, {Forwarding: ForwardingNone}}
	f.Fuzz(func(t *testing.T, paper, spigot, props []byte, mode uint8) {
		b := modes[int(mode)%len(modes)]
		files := map[string][]byte{PaperGlobalConfig: paper, SpigotConfig: spigot, PropertiesConfig: props}
		out, err := WireBackend(files, b)
		if err != nil {
			if !wiringErr(err) {
				t.Fatalf("WireBackend = %v, not a *ConfigError", err)
			}
			return
		}
		for k, v := range out {
			files[k] = v
		}
		if again, err := WireBackend(files, b); err != nil || len(again) != 0 {
			t.Fatalf("WireBackend not idempotent: %v, %v", again, err)
		}
	})
}
