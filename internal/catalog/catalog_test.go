package catalog

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/kilnhq/kiln/internal/validate"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden")

func mustLoad(t *testing.T, dev bool) *Catalog {
	t.Helper()
	c, err := Load(dev)
	if err != nil {
		t.Fatalf("Load(%v): %v", dev, err)
	}
	return c
}

func TestLoadEmbedded(t *testing.T) {
	want := []struct {
		id        int
		typ       string
		category  Category
		port      int
		stop      string
		pluginDir string
		installer string
	}{
		{1, "paper", Server, 25565, "stop", "plugins", InstallFill},
		{2, "purpur", Server, 25565, "stop", "plugins", InstallPurpur},
		{3, "folia", Server, 25565, "stop", "plugins", InstallFill},
		{4, "vanilla", Server, 25565, "stop", "", InstallMojang},
		{5, "fabric", Server, 25565, "stop", "mods", InstallFabric},
		{6, "forge", Server, 25565, "stop", "mods", InstallForge},
		{7, "neoforge", Server, 25565, "stop", "mods", InstallNeoForge},
		{8, "velocity", Proxy, 25577, "end", "plugins", InstallFill},
		{9, "waterfall", Proxy, 25577, "end", "plugins", InstallFill},
		{10, "bungeecord", Proxy, 25577, "end", "plugins", InstallBungeeCord},
		{11, "quilt", Server, 25565, "stop", "mods", InstallQuilt},
		{12, "custom", Server, 25565, "stop", "plugins", InstallCustom},
		{100, "kiln-test", Server, 25565, "stop", "plugins", InstallTestServer},
		{101, "kiln-test-proxy", Proxy, 25577, "end", "plugins", InstallTestServer},
	}
	for _, dev := range []bool{false, true} {
		c := mustLoad(t, dev)
		got := c.List()
		n := len(want)
		if !dev {
			n -= 2 // no kiln-test, no kiln-test-proxy
		}
		if len(got) != n {
			t.Fatalf("Load(%v).List() has %d profiles, want %d", dev, len(got), n)
		}
		for i, w := range want[:n] {
			p := got[i]
			if p.ID != w.id || p.Type != w.typ || p.Category != w.category || p.Port != w.port ||
				p.StopCommand != w.stop || p.PluginDir != w.pluginDir || p.Installer.Kind != w.installer {
				t.Errorf("List()[%d] = {%d %s %s %d %q %q %s}, want %+v", i,
					p.ID, p.Type, p.Category, p.Port, p.StopCommand, p.PluginDir, p.Installer.Kind, w)
			}
			if g, ok := c.Get(w.typ); !ok || g.ID != w.id {
				t.Errorf("Get(%q) = %d, %v; want id %d", w.typ, g.ID, ok, w.id)
			}
		}
		for _, typ := range []string{"kiln-test", "kiln-test-proxy"} {
			if _, ok := c.Get(typ); ok != dev {
				t.Errorf("Load(%v).Get(%s) found = %v", dev, typ, ok)
			}
		}
	}
	if _, ok := mustLoad(t, true).Get("spigot"); ok {
		t.Errorf("Get(spigot) found a profile")
	}
}

// TestEveryProfileStarts expands every profile's start command with the
// platform variables and checks the shared rules of the catalog.
func TestEveryProfileStarts(t *testing.T) {
	c := mustLoad(t, true)
	vars := map[string]string{
		VarServerMemory: "2048", VarServerPort: "25566", VarServerJar: "server.jar",
		VarJava: "/usr/lib/jvm/21/bin/java", VarKilnBin: "/usr/local/bin/kiln",
		VarServerArgsFile: "libraries/unix_args.txt",
	}
	var labels []string
	for _, p := range c.List() {
		t.Run(p.Type, func(t *testing.T) {
			argv, err := p.Command(vars)
			if err != nil {
				t.Fatalf("Command: %v", err)
			}
			for _, a := range argv {
				if strings.Contains(a, "${") {
					t.Errorf("Command left a placeholder: %q", a)
				}
			}
			if !slices.Contains(argv, "25566") {
				if p.Type != "waterfall" && p.Type != "bungeecord" {
					t.Errorf("Command = %q, does not pass the port", argv)
				}
			}
			if p.Dev {
				return
			}
			var l []string
			for _, im := range p.DockerImages {
				l = append(l, im.Label)
			}
			if labels == nil {
				labels = l
			} else if !slices.Equal(l, labels) {
				t.Errorf("image labels %q, want the same as the other profiles %q", l, labels)
			}
			if p.Category == Proxy && p.Java.Source != JavaFixed {
				t.Errorf("proxy java rule %q, want fixed", p.Java.Source)
			}
			if p.VersionVar == "" {
				t.Errorf("no version_var")
			}
		})
	}
}

const aikar = "-XX:+AlwaysPreTouch -XX:+DisableExplicitGC -XX:+ParallelRefProcEnabled -XX:+PerfDisableSharedMem " +
	"-XX:+UnlockExperimentalVMOptions -XX:+UseG1GC -XX:G1HeapRegionSize=8M -XX:G1HeapWastePercent=5 " +
	"-XX:G1MaxNewSizePercent=40 -XX:G1MixedGCCountTarget=4 -XX:G1MixedGCLiveThresholdPercent=90 " +
	"-XX:G1NewSizePercent=30 -XX:G1RSetUpdatingPauseTimePercent=5 -XX:G1ReservePercent=20 " +
	"-XX:InitiatingHeapOccupancyPercent=15 -XX:MaxGCPauseMillis=200 -XX:MaxTenuringThreshold=1 " +
	"-XX:SurvivorRatio=32 -Dusing.aikars.flags=https://mcflags.emc.gs -Daikars.new.flags=true"

func TestCommand(t *testing.T) {
	c := mustLoad(t, true)
	base := map[string]string{VarServerMemory: "4096", VarServerPort: "25570", VarServerJar: "server.jar", VarJava: "java"}
	with := func(kv ...string) map[string]string {
		m := map[string]string{}
		for k, v := range base {
			m[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	tests := []struct {
		name string
		typ  string
		vars map[string]string
		want string
	}{
		{"paper aikar", "paper", base,
			"java -Xms4096M -Xmx4096M " + aikar + " -jar server.jar --nogui --port 25570"},
		{"purpur aikar", "purpur", base,
			"java -Xms4096M -Xmx4096M " + aikar + " -jar server.jar --nogui --port 25570"},
		{"folia large heap", "folia", with(VarServerMemory, "12288"),
			"java -Xms12288M -Xmx12288M " + strings.NewReplacer(
				"G1NewSizePercent=30", "G1NewSizePercent=40",
				"G1MaxNewSizePercent=40", "G1MaxNewSizePercent=50",
				"G1HeapRegionSize=8M", "G1HeapRegionSize=16M",
				"G1ReservePercent=20", "G1ReservePercent=15",
				"InitiatingHeapOccupancyPercent=15", "InitiatingHeapOccupancyPercent=20").Replace(aikar) +
				" -jar server.jar --nogui --port 25570"},
		{"vanilla", "vanilla", base,
			"java -Xms4096M -Xmx4096M " + aikar + " -jar server.jar --port 25570 nogui"},
		{"vanilla without aikar", "vanilla", with("USE_AIKAR_FLAGS", "false"),
			"java -Xms4096M -Xmx4096M -jar server.jar --port 25570 nogui"},
		{"fabric", "fabric", base,
			"java -Xms4096M -Xmx4096M " + aikar + " -jar server.jar --port 25570 nogui"},
		{"forge jar", "forge", with(VarServerJar, "forge-1.16.5-36.2.39.jar"),
			"java -Xms4096M -Xmx4096M " + aikar + " -jar forge-1.16.5-36.2.39.jar --port 25570 nogui"},
		{"forge args file", "forge", with(VarServerJar, "", VarServerArgsFile, "libraries/net/minecraftforge/forge/1.20.1-47.3.0/unix_args.txt"),
			"java -Xms4096M -Xmx4096M " + aikar + " @libraries/net/minecraftforge/forge/1.20.1-47.3.0/unix_args.txt --port 25570 nogui"},
		{"neoforge large heap", "neoforge", with(VarServerMemory, "16384", VarServerArgsFile, "libraries/net/neoforged/neoforge/21.1.77/unix_args.txt"),
			"java -Xms16384M -Xmx16384M " + strings.NewReplacer(
				"G1NewSizePercent=30", "G1NewSizePercent=40",
				"G1MaxNewSizePercent=40", "G1MaxNewSizePercent=50",
				"G1HeapRegionSize=8M", "G1HeapRegionSize=16M",
				"G1ReservePercent=20", "G1ReservePercent=15",
				"InitiatingHeapOccupancyPercent=15", "InitiatingHeapOccupancyPercent=20").Replace(aikar) +
				" @libraries/net/neoforged/neoforge/21.1.77/unix_args.txt --port 25570 nogui"},
		{"neoforge without aikar", "neoforge", with("USE_AIKAR_FLAGS", "false", VarServerArgsFile, "libraries/net/neoforged/neoforge/21.1.77/unix_args.txt"),
			"java -Xms4096M -Xmx4096M @libraries/net/neoforged/neoforge/21.1.77/unix_args.txt --port 25570 nogui"},
		{"velocity", "velocity", with(VarServerMemory, "512"),
			"java -Xms512M -Xmx512M -XX:+UseG1GC -XX:G1HeapRegionSize=4M -XX:+UnlockExperimentalVMOptions -XX:+ParallelRefProcEnabled -XX:+AlwaysPreTouch -XX:MaxInlineLevel=15 -jar server.jar --port 25570"},
		{"kiln-test", "kiln-test", with(VarKilnBin, "/opt/kiln"), "/opt/kiln testserver --port 25570"},
		{"kiln-test-proxy", "kiln-test-proxy", with(VarKilnBin, "/opt/kiln"), "/opt/kiln testserver --proxy --port 25570"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, _ := c.Get(tt.typ)
			got, err := p.Command(tt.vars)
			if err != nil {
				t.Fatalf("Command: %v", err)
			}
			if want := strings.Fields(tt.want); !slices.Equal(got, want) {
				t.Errorf("Command(%v)\n got %q\nwant %q", tt.vars, got, want)
			}
		})
	}
}

func TestCommandErrors(t *testing.T) {
	c := mustLoad(t, true)
	paper, _ := c.Get("paper")
	ok := map[string]string{VarServerMemory: "1024", VarServerPort: "25565", VarServerJar: "server.jar", VarJava: "java"}
	drop := func(k string) map[string]string {
		m := map[string]string{}
		for kk, v := range ok {
			if kk != k {
				m[kk] = v
			}
		}
		return m
	}
	set := func(k, v string) map[string]string {
		m := drop(k)
		m[k] = v
		return m
	}
	for name, vars := range map[string]map[string]string{
		"no java":   drop(VarJava),
		"empty jar": set(VarServerJar, ""),
	} {
		if _, err := paper.Command(vars); !errors.Is(err, ErrUnresolved) {
			t.Errorf("%s: Command error = %v, want ErrUnresolved", name, err)
		}
	}
	for name, vars := range map[string]map[string]string{
		"memory not a number": set(VarServerMemory, "2G"),
		"memory zero":         set(VarServerMemory, "0"),
		"port out of range":   set(VarServerPort, "70000"),
	} {
		if _, err := paper.Command(vars); err == nil {
			t.Errorf("%s: Command(%v) = nil error", name, vars)
		}
	}

	// A profile variable without a default must be passed.
	p := paper.clone()
	p.EnvironmentVariables = append(p.EnvironmentVariables, EnvVar{Key: "SEED", Title: "s", Description: "s"})
	p.Start = append(p.Start, "--seed=${SEED}")
	if _, err := p.Command(ok); !errors.Is(err, ErrUnresolved) {
		t.Errorf("Command without SEED: %v, want ErrUnresolved", err)
	}
	got, err := p.Command(set("SEED", "42"))
	if err != nil || got[len(got)-1] != "--seed=42" {
		t.Errorf("Command with SEED = %q, %v", got, err)
	}
	// A variable with a default falls back to it.
	p.Start = append(p.Start[:len(p.Start)-1], "--motd=${MOTD}")
	if got, err := p.Command(ok); err != nil || got[len(got)-1] != "--motd=A Minecraft server run by Kiln" {
		t.Errorf("Command with default MOTD = %q, %v", got, err)
	}
}

func TestLoadRejects(t *testing.T) {
	good, err := profileFiles.ReadFile("profiles/vanilla.yaml")
	if err != nil {
		t.Fatal(err)
	}
	shared, err := profileFiles.ReadFile("profiles/include/minecraft-server.yaml")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		files map[string]string
		want  string // substring of one issue
	}{
		{"type is not the file name", map[string]string{"p/other.yaml": string(good)}, "want the file name"},
		{"duplicate id", map[string]string{
			"p/vanilla.yaml": string(good),
			"p/paper.yaml":   strings.Replace(string(good), "type: vanilla", "type: paper", 1),
		}, "id 4 is also used"},
		{"unknown placeholder", map[string]string{
			"p/vanilla.yaml": strings.Replace(string(good), `"nogui"`, `"${NOPE}"`, 1),
		}, "placeholder ${NOPE}"},
		{"malformed placeholder", map[string]string{
			"p/vanilla.yaml": strings.Replace(string(good), `"nogui"`, `"${lower}"`, 1),
		}, "bad placeholder name"},
		{"unknown field", map[string]string{
			"p/vanilla.yaml": string(good) + "stop: stop\n",
		}, "field stop not found"},
		{"bad category", map[string]string{
			"p/vanilla.yaml": strings.Replace(string(good), "category: server", "category: lobby", 1),
		}, "must be server or proxy"},
		{"unknown installer", map[string]string{
			"p/vanilla.yaml": strings.Replace(string(good), "{kind: mojang}", "{kind: spigot}", 1),
		}, "unknown installer"},
		{"bad default", map[string]string{
			"p/vanilla.yaml":                  string(good),
			"p/include/minecraft-server.yaml": strings.Replace(string(shared), "default: 20", "default: [20]", 1),
		}, "must be a string, number, boolean or null"},
		{"platform variable as env key", map[string]string{
			"p/vanilla.yaml":                  string(good),
			"p/include/minecraft-server.yaml": strings.Replace(string(shared), "key: MOTD", "key: SERVER_PORT", 1),
		}, "is a platform variable"},
		{"unknown include", map[string]string{
			"p/vanilla.yaml": strings.Replace(string(good), "include: [minecraft-server, aikar-flags]", "include: [minecraft-server, aikar-flags, nope]", 1),
		}, "no include/nope.yaml"},
		{"flags without an include", map[string]string{
			"p/vanilla.yaml": strings.Replace(string(good), "include: [minecraft-server, aikar-flags]", "include: [minecraft-server]", 1),
		}, "in a profile that includes a JVM flag set"},
		{"flags inside an element", map[string]string{
			"p/vanilla.yaml": strings.Replace(string(good), `"nogui"`, `"x${JVM_FLAGS}"`, 1),
		}, "${JVM_FLAGS} must be a whole element"},
		{"include without the flags element", map[string]string{
			"p/vanilla.yaml": strings.Replace(string(good), `  - "${JVM_FLAGS}"`+"\n", "", 1),
		}, "has no ${JVM_FLAGS} element"},
		{"default outside the enum", map[string]string{
			"p/vanilla.yaml": string(good) + "  - {key: COLOR, title: c, description: d, default: red, enum: [blue]}\n",
		}, "default: must be one of blue"},
		{"min on a string", map[string]string{
			"p/vanilla.yaml": string(good) + "  - {key: NAME, title: c, description: d, default: x, min: 1}\n",
		}, "min and max bound integers only"},
		{"duplicate of an included key", map[string]string{
			"p/vanilla.yaml": string(good) + "  - {key: EULA, title: c, description: d, default: false}\n",
		}, "duplicate key EULA"},
		{"empty stop", map[string]string{
			"p/vanilla.yaml": strings.Replace(string(good), "stop_command: stop", `stop_command: ""`, 1),
		}, "stop_command: must not be empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fsys := fstest.MapFS{}
			for _, inc := range []string{"minecraft-server", "aikar-flags"} {
				data, err := profileFiles.ReadFile("profiles/include/" + inc + ".yaml")
				if err != nil {
					t.Fatal(err)
				}
				fsys["p/include/"+inc+".yaml"] = &fstest.MapFile{Data: data}
			}
			for name, data := range tt.files {
				fsys[name] = &fstest.MapFile{Data: []byte(data)}
			}
			_, err := load(fsys, "p", true)
			ve, ok := errors.AsType[*validate.Error](err)
			if !ok {
				t.Fatalf("load = %v, want a *validate.Error", err)
			}
			for _, is := range ve.Issues {
				if strings.Contains(is.Path+": "+is.Message, tt.want) {
					return
				}
			}
			t.Errorf("load issues = %+v, want one containing %q", ve.Issues, tt.want)
		})
	}
}

func TestEnv(t *testing.T) {
	paper, _ := mustLoad(t, false).Get("paper")
	got, err := paper.Env(map[string]string{"MOTD": "Hello", "MAX_PLAYERS": "50", "EULA": "false", "DIFFICULTY": "hard", "VIEW_DISTANCE": "12"})
	if err != nil {
		t.Fatalf("Env: %v", err)
	}
	want := map[string]string{
		"MINECRAFT_VERSION": "latest", "BUILD_NUMBER": "latest", "CHANNEL": "default", "EULA": "false",
		"MOTD": "Hello", "MAX_PLAYERS": "50", "ONLINE_MODE": "true", "ENABLE_RCON": "false", "USE_AIKAR_FLAGS": "true",
		"DIFFICULTY": "hard", "VIEW_DISTANCE": "12",
	}
	if !mapsEqual(got, want) {
		t.Errorf("Env = %v, want %v", got, want)
	}
	if props, want := paper.Properties(got), map[string]string{"motd": "Hello", "max-players": "50", "online-mode": "true",
		"enable-rcon": "false", "difficulty": "hard", "view-distance": "12"}; !mapsEqual(props, want) {
		t.Errorf("Properties = %v, want %v", props, want)
	}

	bad := map[string]string{
		"NOPE": "1", "EULA": "yes", "MAX_PLAYERS": "many", "MOTD": "a\nb=c",
		"DIFFICULTY": "nightmare", "MODE": "Creative", "VIEW_DISTANCE": "33", "SIMULATION_DISTANCE": "2",
		"SPAWN_PROTECTION": "-1", "MAX_WORLD_SIZE": "0", "PVP": "yes", "LEVEL_TYPE": "minecraft:caves",
		"OPS": "Notch,not a name", "WHITELIST": "jeb_:nope", "ENABLE_RCON": "true", "RCON_PORT": "70000",
	}
	_, err = paper.Env(bad)
	ve, ok := errors.AsType[*validate.Error](err)
	if !ok {
		t.Fatalf("Env(bad) = %v, want *validate.Error", err)
	}
	issues := map[string]string{}
	for _, is := range ve.Issues {
		issues[is.Path] = is.Message
	}
	wantIssues := map[string]string{
		"env.NOPE":                "unknown variable for paper",
		"env.EULA":                "must be true or false",
		"env.MAX_PLAYERS":         "must be an integer",
		"env.MOTD":                "must not contain control characters",
		"env.DIFFICULTY":          "must be one of peaceful, easy, normal, hard",
		"env.MODE":                "must be one of survival, creative, adventure, spectator",
		"env.VIEW_DISTANCE":       "must be between 3 and 32",
		"env.SIMULATION_DISTANCE": "must be between 3 and 32",
		"env.SPAWN_PROTECTION":    "must be between 0 and 29999984",
		"env.MAX_WORLD_SIZE":      "must be between 1 and 29999984",
		"env.PVP":                 "must be true or false",
		"env.LEVEL_TYPE":          "must be one of minecraft:normal, minecraft:flat, minecraft:large_biomes, minecraft:amplified, minecraft:single_biome_surface, DEFAULT, FLAT, LARGEBIOMES, AMPLIFIED, CUSTOMIZED, BUFFET",
		"env.OPS":                 `"not a name" is not a player name (1-16 letters, digits or _, optionally followed by :uuid)`,
		"env.WHITELIST":           `"jeb_": "nope" is not a UUID`,
		"env.RCON_PASSWORD":       "is required when ENABLE_RCON is true",
		"env.RCON_PORT":           "must be between 1 and 65535",
	}
	if !mapsEqual(issues, wantIssues) {
		t.Errorf("Env(bad) issues =\n%v\nwant\n%v", issues, wantIssues)
	}
	if _, err := paper.Env(map[string]string{"ENABLE_RCON": "true", "RCON_PASSWORD": "s3cret-pass"}); err != nil {
		t.Errorf("Env(RCON with a password) = %v", err)
	}

	p := paper.clone()
	p.EnvironmentVariables = append(p.EnvironmentVariables, EnvVar{Key: "SECRET", Title: "t", Description: "d"})
	if _, err := p.Env(nil); err == nil || !strings.Contains(err.Error(), "env.SECRET: is required") {
		t.Errorf("Env(nil) with a required variable = %v", err)
	}
}

// TestEULA: every game server needs the EULA accepted by its user, which
// no default does; proxies and the test server need none.
func TestEULA(t *testing.T) {
	c := mustLoad(t, true)
	for _, p := range c.List() {
		needs := p.Category == Server && !p.Dev
		if p.NeedsEULA() != needs {
			t.Errorf("%s.NeedsEULA() = %v, want %v", p.Type, p.NeedsEULA(), needs)
		}
		if p.EULAAccepted(nil) != !needs {
			t.Errorf("%s.EULAAccepted(nil) = %v, want %v", p.Type, p.EULAAccepted(nil), !needs)
		}
		if !p.EULAAccepted(map[string]string{"EULA": "true"}) {
			t.Errorf("%s.EULAAccepted(EULA=true) = false", p.Type)
		}
		if needs && p.EULAAccepted(map[string]string{"EULA": "false"}) {
			t.Errorf("%s.EULAAccepted(EULA=false) = true", p.Type)
		}
	}
}

func TestParsePlayers(t *testing.T) {
	got, err := ParsePlayers(" Notch , jeb_:853c80ef3c3749fdaa49938b674adae6,Dinnerbone:61699b2e-d327-4a01-9f1e-0ea8c3f06bc6 ")
	want := []Player{{Name: "Notch"}, {Name: "jeb_", UUID: "853c80ef-3c37-49fd-aa49-938b674adae6"},
		{Name: "Dinnerbone", UUID: "61699b2e-d327-4a01-9f1e-0ea8c3f06bc6"}}
	if err != nil || !slices.Equal(got, want) {
		t.Errorf("ParsePlayers = %v, %v; want %v", got, err, want)
	}
	if got, err := ParsePlayers("  "); err != nil || got != nil {
		t.Errorf("ParsePlayers(blank) = %v, %v", got, err)
	}
	for _, bad := range []string{"a,,b", "toolongname_12345", "Notch,notch", "x:{853c80ef-3c37-49fd-aa49-938b674adae6}", "ünïcode"} {
		if _, err := ParsePlayers(bad); err == nil {
			t.Errorf("ParsePlayers(%q) = nil error", bad)
		}
	}
	// Java: UUID.nameUUIDFromBytes("OfflinePlayer:Notch".getBytes(UTF_8)).
	if got := OfflineUUID("Notch"); got != "b50ad385-829d-3141-a216-7e7d7539ba7f" {
		t.Errorf("OfflineUUID(Notch) = %s", got)
	}
}

func TestJavaFor(t *testing.T) {
	c := mustLoad(t, true)
	paper, _ := c.Get("paper")
	tests := []struct {
		version string
		want    int
	}{
		{"1.8.8", 8}, {"1.12.2", 8}, {"1.16.5", 8}, {"1.16", 8},
		{"1.17", 16}, {"1.17.1", 16},
		{"1.18", 17}, {"1.19.4", 17}, {"1.20.4", 17}, {"1.20", 17},
		{"1.20.5", 21}, {"1.20.5-rc1", 21}, {"1.20.6", 21}, {"1.21", 21}, {"1.21.4", 21}, {"1.21.11", 21},
		{"26.1", 25}, {"26.1-snapshot-1", 25}, {"27.2.1", 25},
		{"20w45a", 8}, {"21w20a", 16}, {"21w37a", 17}, {"24w13a", 17}, {"24w14a", 21}, {"25w41a", 21},
		{"b1.7.3", 8}, {"rd-132211", 8},
		{"latest", 25}, {"", 25}, {"nonsense", 25},
	}
	for _, tt := range tests {
		if got := paper.JavaFor(tt.version); got != tt.want {
			t.Errorf("paper.JavaFor(%q) = %d, want %d", tt.version, got, tt.want)
		}
	}
	velocity, _ := c.Get("velocity")
	if got := velocity.JavaFor("3.4.0-SNAPSHOT"); got != 21 {
		t.Errorf("velocity.JavaFor = %d, want 21", got)
	}
	kt, _ := c.Get("kiln-test")
	if got := kt.JavaFor("1.21"); got != 0 {
		t.Errorf("kiln-test.JavaFor = %d, want 0", got)
	}
}

func TestImage(t *testing.T) {
	c := mustLoad(t, true)
	paper, _ := c.Get("paper")
	for java, want := range map[int]string{
		8: "ghcr.io/kiln/java:8", 16: "ghcr.io/kiln/java:17", 17: "ghcr.io/kiln/java:17",
		21: "ghcr.io/kiln/java:21", 25: "ghcr.io/kiln/java:25", 30: "ghcr.io/kiln/java:25", 0: "ghcr.io/kiln/java:8",
	} {
		if got := paper.Image(java); got.Value != want {
			t.Errorf("paper.Image(%d) = %q, want %q", java, got.Value, want)
		}
	}
	kt, _ := c.Get("kiln-test")
	if got := kt.Image(0); got.Value != "kiln/testserver:dev" || got.Label != "Kiln test server" {
		t.Errorf("kiln-test.Image(0) = %+v", got)
	}
	ktp, _ := c.Get("kiln-test-proxy")
	if got := ktp.Image(0); got.Value != "kiln/testserver:dev" {
		t.Errorf("kiln-test-proxy.Image(0) = %+v, want kiln-test's image", got)
	}
}

// TestGetReturnsCopies checks that a caller cannot change the catalog.
func TestGetReturnsCopies(t *testing.T) {
	c := mustLoad(t, false)
	p, _ := c.Get("paper")
	p.Start[0] = "evil"
	p.EnvironmentVariables[0].Default = "evil"
	p.JVMFlags.LargeHeap.Replace["-XX:G1ReservePercent=20"] = "evil"
	p.JVMFlags.Flags[0] = "evil"
	again, _ := c.Get("paper")
	if again.Start[0] != "${JAVA}" || again.EnvironmentVariables[0].Default != "latest" ||
		again.JVMFlags.LargeHeap.Replace["-XX:G1ReservePercent=20"] != "-XX:G1ReservePercent=15" || again.JVMFlags.Flags[0] != "-XX:+AlwaysPreTouch" {
		t.Errorf("Get returned a profile sharing state with the catalog")
	}
}

// TestJSONGolden pins the JSON form of the catalog (what GET
// /servers/software can serve): the seed fields with their types plus ours.
func TestJSONGolden(t *testing.T) {
	got, err := json.MarshalIndent(mustLoad(t, true).List(), "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	got = append(got, '\n')
	golden := filepath.Join("testdata", "catalog.golden.json")
	if *update {
		if err := os.WriteFile(golden, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run go test ./internal/catalog -update)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("catalog JSON differs from %s; run go test ./internal/catalog -update and review the diff", golden)
	}

	// Seed shape: every required field present with its JSON type.
	var list []map[string]any
	if err := json.Unmarshal(got, &list); err != nil {
		t.Fatal(err)
	}
	for _, p := range list {
		for field, kind := range map[string]string{"id": "number", "name": "string", "type": "string",
			"description": "string", "docker_images": "array", "environment_variables": "array"} {
			if jsonKind(p[field]) != kind {
				t.Errorf("%v.%s is %T, want %s", p["type"], field, p[field], kind)
			}
		}
		for _, v := range p["environment_variables"].([]any) {
			ev := v.(map[string]any)
			if _, ok := ev["default"]; !ok || jsonKind(ev["optional"]) != "boolean" {
				t.Errorf("%v env %v lacks default or optional", p["type"], ev["key"])
			}
		}
	}
}

func jsonKind(v any) string {
	switch v.(type) {
	case float64:
		return "number"
	case string:
		return "string"
	case []any:
		return "array"
	case bool:
		return "boolean"
	}
	return "other"
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if bv, ok := b[k]; !ok || bv != v {
			return false
		}
	}
	return true
}

func FuzzJavaFor(f *testing.F) {
	for _, s := range []string{"1.21.4", "1.20.5-rc1", "24w14a", "26.1", "b1.7.3", "", "1.", "1.99999999999.1", "..", "9w99z"} {
		f.Add(s)
	}
	known := []int{8, 16, 17, 21, 25}
	f.Fuzz(func(t *testing.T, v string) {
		if got := minecraftJava(v); !slices.Contains(known, got) {
			t.Errorf("minecraftJava(%q) = %d, not a known Java", v, got)
		}
	})
}

func FuzzExpand(f *testing.F) {
	for _, s := range []string{"-Xmx${SERVER_MEMORY}M", "${A}${B}", "$", "${", "${}", "${a}", "$${A}", "x}${A"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := expand(s, func(name string) (string, error) { return "<" + name + ">", nil })
		if err != nil {
			return
		}
		// Every "${" of the input starts a placeholder, and no value
		// contains one, so none may be left.
		if strings.Contains(got, "${") {
			t.Errorf("expand(%q) = %q kept a placeholder", s, got)
		}
	})
}

func TestResultVars(t *testing.T) {
	p, _ := mustLoad(t, false).Get("forge")
	for _, tt := range []struct {
		res  Result
		want string
	}{
		{Result{Jar: "forge-1.16.5-36.2.34.jar"}, "-jar forge-1.16.5-36.2.34.jar --port"},
		{Result{ArgsFile: "libraries/net/minecraftforge/forge/1.20.1-47.3.0/unix_args.txt"}, " @libraries/net/minecraftforge/forge/1.20.1-47.3.0/unix_args.txt --port"},
	} {
		vars := tt.res.Vars()
		vars[VarJava] = "java"
		vars[VarServerMemory] = "1024"
		vars[VarServerPort] = "25565"
		argv, err := p.Command(vars)
		if err != nil || !strings.Contains(strings.Join(argv, " "), tt.want) {
			t.Errorf("Command(%v) = %q, %v; want it to contain %q", vars, argv, err, tt.want)
		}
	}
}
