package install

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"slices"
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

// TestConfigureSettings: the server.properties keys of the environment
// (its defaults included: RCON off) and eula.txt from EULA, written again
// whenever the variable changes.
func TestConfigureSettings(t *testing.T) {
	p := profile(t, "paper")
	root := t.TempDir()
	env, err := p.Env(map[string]string{"DIFFICULTY": "hard", "MODE": "creative", "VIEW_DISTANCE": "16", "SIMULATION_DISTANCE": "8",
		"SEED": "-4172144997902289642", "LEVEL_TYPE": "minecraft:flat", "PVP": "false", "ENABLE_WHITELIST": "true",
		"ENFORCE_WHITELIST": "true", "SPAWN_PROTECTION": "0", "ALLOW_FLIGHT": "true", "MAX_WORLD_SIZE": "10000"})
	if err != nil {
		t.Fatal(err)
	}
	if err := Configure(p, root, env, "", 25565); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(filepath.Join(root, "server.properties"))
	want := "# Written by Kiln; the keys Kiln manages are set again before every start.\n" +
		"allow-flight=true\ndifficulty=hard\nenable-rcon=false\nenforce-whitelist=true\ngamemode=creative\n" +
		"level-seed=-4172144997902289642\nlevel-type=minecraft:flat\nmax-players=20\nmax-world-size=10000\n" +
		"motd=A Minecraft server run by Kiln\nonline-mode=true\npvp=false\nserver-ip=\nserver-port=25565\n" +
		"simulation-distance=8\nspawn-protection=0\nview-distance=16\nwhite-list=true\n"
	if string(got) != want {
		t.Errorf("server.properties:\n%s\nwant:\n%s", got, want)
	}
	eula := func() string {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(root, "eula.txt"))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	if got := eula(); got != "# Written by Kiln from the EULA variable: https://aka.ms/MinecraftEULA\neula=false\n" {
		t.Errorf("eula.txt without EULA=true = %q", got)
	}
	// The user accepts; then RCON on with a password.
	env, _ = p.Env(map[string]string{"EULA": "true", "ENABLE_RCON": "true", "RCON_PASSWORD": "hunter2-but-longer", "RCON_PORT": "25580"})
	if err := Configure(p, root, env, "", 25565); err != nil {
		t.Fatal(err)
	}
	if got := eula(); got != "# Written by Kiln from the EULA variable: https://aka.ms/MinecraftEULA\neula=true\n" {
		t.Errorf("eula.txt with EULA=true = %q", got)
	}
	got, _ = os.ReadFile(filepath.Join(root, "server.properties"))
	for _, line := range []string{"enable-rcon=true\n", "rcon.password=hunter2-but-longer\n", "rcon.port=25580\n", "difficulty=hard\n"} {
		if !strings.Contains(string(got), line) {
			t.Errorf("server.properties lacks %q:\n%s", line, got)
		}
	}
	// An eula.txt the user wrote that says the same is left alone.
	if err := os.WriteFile(filepath.Join(root, "eula.txt"), []byte("#By changing the setting below to TRUE you are indicating your agreement\neula=TRUE\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := Configure(p, root, env, "", 25565); err != nil {
		t.Fatal(err)
	}
	if got := eula(); !strings.HasPrefix(got, "#By changing") {
		t.Errorf("an accepting eula.txt was rewritten: %q", got)
	}
	// Proxies have no EULA.
	vroot := t.TempDir()
	if err := Configure(profile(t, "velocity"), vroot, nil, "", 25577); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(vroot, "eula.txt")); !os.IsNotExist(err) {
		t.Errorf("velocity got an eula.txt: %v", err)
	}
}

// TestConfigurePlayers: OPS and WHITELIST become ops.json and
// whitelist.json entries with the UUID given, the offline UUID in offline
// mode, or Mojang's (a stand-in for api.mojang.com behind the mirror);
// entries already in the files are kept.
func TestConfigurePlayers(t *testing.T) {
	p := profile(t, "paper")
	read := func(root, name string) []map[string]any {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(root, name))
		if err != nil {
			t.Fatal(err)
		}
		var out []map[string]any
		if err := json.Unmarshal(b, &out); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return out
	}

	// Offline mode: computed locally, nothing asked of anyone.
	root := t.TempDir()
	existing := `[{"uuid":"11111111-2222-3333-4444-555555555555","name":"Admin","level":3,"bypassesPlayerLimit":true,"extra":1}]`
	if err := os.WriteFile(filepath.Join(root, "ops.json"), []byte(existing), 0o644); err != nil {
		t.Fatal(err)
	}
	env, err := p.Env(map[string]string{"ONLINE_MODE": "false", "OPS": "admin,Notch", "WHITELIST": "jeb_:853c80ef3c3749fdaa49938b674adae6,Notch"})
	if err != nil {
		t.Fatal(err)
	}
	if err := Configure(p, root, env, "", 25565); err != nil {
		t.Fatal(err)
	}
	ops := read(root, "ops.json")
	wantOps := []map[string]any{
		{"uuid": "11111111-2222-3333-4444-555555555555", "name": "Admin", "level": 3.0, "bypassesPlayerLimit": true, "extra": 1.0},
		{"uuid": "b50ad385-829d-3141-a216-7e7d7539ba7f", "name": "Notch", "level": 4.0, "bypassesPlayerLimit": false},
	}
	if !reflect.DeepEqual(ops, wantOps) {
		t.Errorf("ops.json = %v, want %v", ops, wantOps)
	}
	wl := read(root, "whitelist.json")
	wantWL := []map[string]any{
		{"uuid": "853c80ef-3c37-49fd-aa49-938b674adae6", "name": "jeb_"},
		{"uuid": "b50ad385-829d-3141-a216-7e7d7539ba7f", "name": "Notch"},
	}
	if !reflect.DeepEqual(wl, wantWL) {
		t.Errorf("whitelist.json = %v, want %v", wl, wantWL)
	}

	// Online mode without a network: a name without UUID is an error.
	online, _ := p.Env(map[string]string{"OPS": "Dinnerbone"})
	if err := Configure(p, t.TempDir(), online, "", 25565); err == nil || !strings.Contains(err.Error(), "Dinnerbone needs a UUID") {
		t.Errorf("Configure(online, no uuid) = %v", err)
	}

	// Online mode through the installer: Mojang's answer, once per name
	// new to the file; an unknown name fails the start.
	var asked []string
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api.mojang.com/users/profiles/minecraft/{name}", func(w http.ResponseWriter, r *http.Request) {
		asked = append(asked, r.PathValue("name"))
		if r.PathValue("name") != "Dinnerbone" {
			// What api.mojang.com answers for a name no account has.
			w.WriteHeader(http.StatusNotFound)
			fmt.Fprintf(w, `{"path":"/users/profiles/minecraft/%s","errorMessage":"Couldn't find any profile with name %s"}`, r.PathValue("name"), r.PathValue("name"))
			return
		}
		fmt.Fprint(w, `{"id":"61699b2ed3274a019f1e0ea8c3f06bc6","name":"Dinnerbone"}`)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	i, err := New(Options{MirrorURL: srv.URL, CacheDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	oroot := t.TempDir()
	for range 2 {
		if err := i.Configure(t.Context(), p, oroot, online, "", 25565); err != nil {
			t.Fatal(err)
		}
	}
	if got := read(oroot, "ops.json"); !reflect.DeepEqual(got, []map[string]any{
		{"uuid": "61699b2e-d327-4a01-9f1e-0ea8c3f06bc6", "name": "Dinnerbone", "level": 4.0, "bypassesPlayerLimit": false}}) {
		t.Errorf("ops.json = %v", got)
	}
	if !slices.Equal(asked, []string{"Dinnerbone"}) {
		t.Errorf("Mojang was asked for %q, want Dinnerbone once", asked)
	}
	unknown, _ := p.Env(map[string]string{"WHITELIST": "nobody_here"})
	err = i.Configure(t.Context(), p, oroot, unknown, "", 25565)
	if pe, ok := errors.AsType[*PlayersError](err); !ok || pe.Var != "WHITELIST" || !errors.Is(err, ErrUnknownPlayer) ||
		err.Error() != "configure paper: WHITELIST: whitelist.json: nobody_here: no Minecraft account has that name" {
		t.Errorf("Configure(unknown player) = %v, want a *PlayersError wrapping ErrUnknownPlayer", err)
	}
	if _, err := os.Stat(filepath.Join(oroot, "whitelist.json")); !os.IsNotExist(err) {
		t.Errorf("whitelist.json written despite the failure: %v", err)
	}

	// A file that is not a list is the user's to fix, never overwritten.
	broken := t.TempDir()
	os.WriteFile(filepath.Join(broken, "ops.json"), []byte("{oops"), 0o644)
	if err := Configure(p, broken, env, "", 25565); err == nil || !strings.Contains(err.Error(), "ops.json: not a JSON list") {
		t.Errorf("Configure(broken ops.json) = %v", err)
	}
}

func TestManagedProperties(t *testing.T) {
	p := profile(t, "paper")
	if got, want := ManagedProperties(p, nil), []string{"enable-rcon", "max-players", "motd", "online-mode", "server-ip", "server-port"}; !slices.Equal(got, want) {
		t.Errorf("ManagedProperties(paper, nil) = %q, want %q", got, want)
	}
	if got := ManagedProperties(p, map[string]string{"DIFFICULTY": "hard"}); !slices.Contains(got, "difficulty") {
		t.Errorf("ManagedProperties(paper, DIFFICULTY) = %q, want difficulty in it", got)
	}
}
