package install

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestConfigureProperties: server.properties gets the listen address and
// the environment's keys; every other line is kept, a managed key written
// by hand is replaced (its duplicates dropped), missing keys are appended.
func TestConfigureProperties(t *testing.T) {
	p := profile(t, "paper")
	root := t.TempDir()
	old := "#Minecraft server properties\n" +
		"motd=old motd\n" +
		"view-distance=12\n" +
		"  server-port = 25565\n" +
		"! comment server-ip=1.2.3.4\n" +
		"motd=duplicate\n" +
		"level-name=world" // no final newline
	if err := os.WriteFile(filepath.Join(root, "server.properties"), []byte(old), 0o644); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"MOTD": `Back\slash`, "MAX_PLAYERS": "42", "EULA": "true", "MINECRAFT_VERSION": "1.21.4"}
	if err := Configure(p, root, env, "127.0.0.1", 30001); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(filepath.Join(root, "server.properties"))
	want := "#Minecraft server properties\n" +
		"motd=Back\\\\slash\n" +
		"view-distance=12\n" +
		"server-port=30001\n" +
		"! comment server-ip=1.2.3.4\n" +
		"level-name=world\n" +
		"max-players=42\n" +
		"server-ip=127.0.0.1\n"
	if string(got) != want {
		t.Fatalf("server.properties:\n%s\nwant:\n%s", got, want)
	}
	// A second run changes nothing.
	fi, _ := os.Stat(filepath.Join(root, "server.properties"))
	if err := Configure(p, root, env, "127.0.0.1", 30001); err != nil {
		t.Fatal(err)
	}
	if fi2, _ := os.Stat(filepath.Join(root, "server.properties")); !os.SameFile(fi, fi2) {
		t.Error("an unchanged server.properties was rewritten")
	}

	// No file yet: written whole; every interface is server-ip= (empty).
	fresh := t.TempDir()
	if err := Configure(p, fresh, map[string]string{"MOTD": " lead"}, "", 25565); err != nil {
		t.Fatal(err)
	}
	got, _ = os.ReadFile(filepath.Join(fresh, "server.properties"))
	if !strings.HasSuffix(string(got), "motd=\\ lead\nserver-ip=\nserver-port=25565\n") || !strings.HasPrefix(string(got), "# Written by Kiln") {
		t.Fatalf("fresh server.properties = %q", got)
	}
}

// TestConfigureRefusesOddFiles: a symlink out of the root, a FIFO and a
// directory under the config's name fail the start; nothing outside the
// root is read or written, and a FIFO never blocks.
func TestConfigureRefusesOddFiles(t *testing.T) {
	p := profile(t, "paper")
	outside := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(outside, []byte("motd=secret\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for name, plant := range map[string]func(path string) error{
		"symlink out": func(path string) error { return os.Symlink(outside, path) },
		"fifo":        func(path string) error { return syscall.Mkfifo(path, 0o644) },
		"directory":   func(path string) error { return os.Mkdir(path, 0o755) },
	} {
		t.Run(name, func(t *testing.T) {
			root := t.TempDir()
			if err := plant(filepath.Join(root, "server.properties")); err != nil {
				t.Fatal(err)
			}
			if err := Configure(p, root, nil, "127.0.0.1", 30001); err == nil {
				t.Fatal("Configure succeeded")
			}
			if data, _ := os.ReadFile(outside); string(data) != "motd=secret\n" {
				t.Fatalf("outside file changed: %q", data)
			}
		})
	}
}

// TestConfigureVelocity: bind is replaced at top level only; no file, no
// write (Velocity writes its defaults on first start).
func TestConfigureVelocity(t *testing.T) {
	p := profile(t, "velocity")
	root := t.TempDir()
	if err := Configure(p, root, nil, "127.0.0.1", 30002); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "velocity.toml")); !os.IsNotExist(err) {
		t.Fatalf("velocity.toml written before Velocity's first start: %v", err)
	}
	old := "config-version = \"2.7\"\n# bind = \"x\"\nbind = \"0.0.0.0:25577\"\nmotd = \"hi\"\n[servers]\nbind = \"not this one\"\n"
	if err := os.WriteFile(filepath.Join(root, "velocity.toml"), []byte(old), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := Configure(p, root, nil, "::1", 30002); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(filepath.Join(root, "velocity.toml"))
	want := strings.Replace(old, "bind = \"0.0.0.0:25577\"", "bind = \"[::1]:30002\"", 1)
	if string(got) != want {
		t.Fatalf("velocity.toml:\n%s\nwant:\n%s", got, want)
	}
}

// TestConfigureBungeeCord: a minimal config.yml when there is none; the
// first listener's host set in an existing one, other keys kept; a file
// that is not YAML fails.
func TestConfigureBungeeCord(t *testing.T) {
	p := profile(t, "waterfall")
	root := t.TempDir()
	path := filepath.Join(root, "config.yml")
	if err := Configure(p, root, nil, "127.0.0.1", 30003); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(path)
	if !strings.Contains(string(got), "listeners:\n- host: 127.0.0.1:30003\n  query_port: 30003\n") {
		t.Fatalf("fresh config.yml = %q", got)
	}
	old := "ip_forward: true\nlisteners:\n  - query_port: 25577\n    host: 0.0.0.0:25577\n    motd: '&1Another Bungee server'\n  - host: 0.0.0.0:25578\nservers:\n  lobby:\n    address: localhost:25565\n"
	if err := os.WriteFile(path, []byte(old), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := Configure(p, root, nil, "", 30003); err != nil {
		t.Fatal(err)
	}
	got, _ = os.ReadFile(path)
	for _, want := range []string{"ip_forward: true", "host: 0.0.0.0:30003", "motd: '&1Another Bungee server'", "host: 0.0.0.0:25578", "address: localhost:25565"} {
		if !strings.Contains(string(got), want) {
			t.Errorf("config.yml lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(string(got), "0.0.0.0:25577") {
		t.Errorf("the first listener's old host is still there:\n%s", got)
	}
	if err := os.WriteFile(path, []byte("listeners: [unclosed\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := Configure(p, root, nil, "", 30003); err == nil || !strings.Contains(err.Error(), "not valid YAML") {
		t.Fatalf("broken config.yml: err = %v", err)
	}
}
