package spec

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/kilnhq/kiln/internal/catalog"
	"github.com/kilnhq/kiln/internal/validate"
)

func testCatalog(t testing.TB) *catalog.Catalog {
	t.Helper()
	cat, err := catalog.Load(false)
	if err != nil {
		t.Fatal(err)
	}
	return cat
}

// example is deployment-spec.md §1's example, as written there.
const example = `version: 1
servers:
  lobby:
    software: paper          # a software profile ` + "`type`" + ` from GET /servers/software
    version: "1.21.4"        # game version, or "latest" (resolved and pinned at apply time)
    memory: 2G               # 512M, 2G, 2GiB … (binary units)
    disk: 10G
    cpu: 200                 # percent of one core; optional, default 100
    image: "Java 21"         # optional: a docker_images label or value of the profile
    env: {MOTD: "Welcome"}   # profile environment variables; unknown keys are an error
    properties:              # optional server.properties overrides
      max-players: 200
    files:                   # optional files written on create and update
      - path: plugins/Example/config.yml
        content: |
          greeting: hello
    state: running           # running (default) | stopped
  survival:
    software: paper
    memory: 4G
proxies:
  edge:
    software: velocity       # a profile whose category is proxy
    memory: 1G
    port: 25565              # requested public port; optional
    servers: [lobby, survival]
    try: [lobby]             # default: the first of servers
    forwarding: modern       # modern | legacy | none
dbservices:
  stats:
    engine: postgres         # postgres | mariadb
    attach: [lobby, survival]
`

func TestParseExample(t *testing.T) {
	s, err := Parse([]byte(example), testCatalog(t))
	if err != nil {
		t.Fatalf("Parse(example) = %v", err)
	}
	lobby := s.Servers["lobby"]
	want := Server{
		Software: "paper", Version: "1.21.4", Memory: 2 << 30, Disk: 10 << 30, CPU: 200,
		Image: "ghcr.io/kiln/java:21", Env: map[string]string{"MOTD": "Welcome"},
		Properties: map[string]string{"max-players": "200"},
		Files:      []File{{Path: "plugins/Example/config.yml", Content: "greeting: hello\n"}},
		State:      StateRunning,
	}
	if !equalServer(lobby, want) {
		t.Errorf("lobby = %+v\nwant  %+v", lobby, want)
	}
	survival := s.Servers["survival"]
	if survival.Version != "latest" || survival.Disk != 10<<30 || survival.CPU != 100 || survival.State != StateRunning ||
		survival.Image != "" || len(survival.Env) != 0 || len(survival.Files) != 0 {
		t.Errorf("survival's defaults: %+v", survival)
	}
	edge := s.Proxies["edge"]
	if edge.Software != "velocity" || edge.Memory != 1<<30 || edge.Port != 25565 || edge.Forwarding != ForwardingModern ||
		!slices.Equal(edge.Backends, []string{"lobby", "survival"}) || !slices.Equal(edge.Try, []string{"lobby"}) {
		t.Errorf("edge = %+v", edge)
	}
	if db := s.DBServices["stats"]; db.Engine != EnginePostgres || !slices.Equal(db.Attach, []string{"lobby", "survival"}) {
		t.Errorf("stats = %+v", db)
	}
	b, err := Parse([]byte("version: 1\nservers:\n  a: {software: paper, memory: 1G}\nproxies:\n  b: {software: bungeecord, memory: 1G, servers: [a]}\n"), testCatalog(t))
	if err != nil || b.Proxies["b"].Forwarding != ForwardingLegacy {
		t.Errorf("a BungeeCord proxy's default forwarding: %+v, %v; want legacy", b, err)
	}
	if n := s.ResourceCount(); n != 4 {
		t.Errorf("ResourceCount = %d, want 4", n)
	}
	h, err := s.Hash()
	if err != nil {
		t.Fatal(err)
	}
	// Pinned: a change here changes every stored spec_hash (doc.go).
	if const_ := "sha256:"; !strings.HasPrefix(h, const_) || len(h) != len(const_)+64 {
		t.Fatalf("Hash = %q", h)
	}
	if h != exampleHash {
		t.Errorf("Hash(example) = %s, want the pinned %s", h, exampleHash)
	}
}

const exampleHash = "sha256:19dd6c4c69f447dd9a3d6ae3083ee8b05447f9a5ecd8f44ff3e90b82aa4f3cca"

func equalServer(a, b Server) bool {
	return a.Software == b.Software && a.Version == b.Version && a.Memory == b.Memory && a.Disk == b.Disk &&
		a.CPU == b.CPU && a.Image == b.Image && a.State == b.State &&
		maps2eq(a.Env, b.Env) && maps2eq(a.Properties, b.Properties) && slices.Equal(a.Files, b.Files)
}

func maps2eq(a, b map[string]string) bool {
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

// issues parses in and returns its issues as "path: message" lines.
// wantIssues checks that Parse refuses in with the issues want, each a
// prefix of one, in order.
func wantIssues(t *testing.T, in string, want []string) {
	t.Helper()
	got := issues(t, in)
	if len(got) != len(want) {
		t.Fatalf("%d issues, want %d:\n%s", len(got), len(want), strings.Join(got, "\n"))
	}
	for i, w := range want {
		if !strings.HasPrefix(got[i], w) {
			t.Errorf("issue %d = %q, want it to start with %q", i, got[i], w)
		}
	}
}

func issues(t *testing.T, in string) []string {
	t.Helper()
	_, err := Parse([]byte(in), testCatalog(t))
	if err == nil {
		t.Fatalf("Parse accepted:\n%s", in)
	}
	var ve *validate.Error
	if !errors.As(err, &ve) {
		t.Fatalf("Parse = %T %v, want *validate.Error", err, err)
	}
	var out []string
	for _, is := range ve.Issues {
		out = append(out, is.Path+": "+is.Message)
	}
	return out
}

func TestParseRules(t *testing.T) {
	const srv = "version: 1\nservers:\n  a:\n    software: paper\n    memory: 1G\n"
	for _, c := range []struct {
		name, in string
		want     []string // each a prefix of one issue, in order
	}{
		{"empty", "", []string{"version: is required"}},
		{"not a mapping", "- 1\n", []string{": must be a mapping"}},
		{"version missing", "servers: {}\n", []string{"version: is required"}},
		{"version 2", "version: 2\n", []string{"version: must be 1"}},
		{"version string", "version: \"1\"\n", []string{"version: must be 1"}},
		{"unknown top-level key", "version: 1\nnetworks: {}\n", []string{"networks: unknown field (line 2)"}},
		{"duplicate key", "version: 1\nversion: 1\n", []string{"version: is given twice (line 2)"}},
		{"bad name", "version: 1\nservers:\n  Lobby:\n    software: paper\n    memory: 1G\n",
			[]string{"servers.Lobby: name must be a lowercase letter"}},
		{"name too long", "version: 1\nservers:\n  a" + strings.Repeat("b", 63) + ":\n    software: paper\n    memory: 1G\n",
			[]string{"servers.a" + strings.Repeat("b", 63) + ": name must be"}},
		{"name across kinds", srv + "dbservices:\n  a:\n    engine: postgres\n",
			[]string{"dbservices.a: the name a is already used in servers"}},
		{"unknown software", "version: 1\nservers:\n  a:\n    software: spigot\n    memory: 1G\n",
			[]string{`servers.a.software: unknown software "spigot"`}},
		{"proxy software for a server", "version: 1\nservers:\n  a:\n    software: velocity\n    memory: 1G\n",
			[]string{"servers.a.software: velocity is a proxy, not a server"}},
		{"server software for a proxy", srv + "proxies:\n  p:\n    software: paper\n    memory: 1G\n    servers: [a]\n",
			[]string{"proxies.p.software: paper is a server, not a proxy"}},
		{"node not a name", "version: 1\nservers:\n  a:\n    software: paper\n    memory: 1G\n    node: \"game 1\"\n",
			[]string{"servers.a.node: must be a node's name"}},
		{"node of a proxy not a name", srv + "proxies:\n  p:\n    software: velocity\n    memory: 1G\n    servers: [a]\n    node: -x\n",
			[]string{"proxies.p.node: must be a node's name"}},
		{"node not a scalar", "version: 1\nservers:\n  a:\n    software: paper\n    memory: 1G\n    node: [a]\n",
			[]string{"servers.a.node: must be a"}},
		{"software and memory required", "version: 1\nservers:\n  a: {}\n",
			[]string{"servers.a.software: is required", "servers.a.memory: is required"}},
		{"memory too small", "version: 1\nservers:\n  a:\n    software: paper\n    memory: 128M\n",
			[]string{"servers.a.memory: must be between 256M and 64G"}},
		{"memory too large", "version: 1\nservers:\n  a:\n    software: paper\n    memory: 65G\n",
			[]string{"servers.a.memory: must be between 256M and 64G"}},
		{"memory without unit", "version: 1\nservers:\n  a:\n    software: paper\n    memory: 2048\n",
			[]string{"servers.a.memory: must be a whole number with a unit"}},
		{"disk bounds", srv + "    disk: 512M\n", []string{"servers.a.disk: must be between 1G and 2T"}},
		{"disk too large", srv + "    disk: 3T\n", []string{"servers.a.disk: must be between 1G and 2T"}},
		{"cpu bounds", srv + "    cpu: 5\n", []string{"servers.a.cpu: must be between 10 and 6400"}},
		{"cpu not a number", srv + "    cpu: lots\n", []string{"servers.a.cpu: must be a whole number"}},
		{"state", srv + "    state: paused\n", []string{"servers.a.state: must be one of running, stopped"}},
		{"unknown env", srv + "    env: {NOPE: 1}\n", []string{"servers.a.env.NOPE: unknown variable for paper"}},
		{"env type", srv + "    env: {MAX_PLAYERS: many}\n", []string{"servers.a.env.MAX_PLAYERS: must be an integer"}},
		{"env unknown and not a value", srv + "    env: {NOPE: x, MOTD: [1]}\n",
			[]string{"servers.a.env.NOPE: unknown variable for paper", "servers.a.env.MOTD: must be a single value, not a list or mapping"}},
		{"empty software", "version: 1\nservers:\n  a:\n    software:\n    memory: 1G\n", []string{"servers.a.software: must not be empty"}},
		{"env required without default", srv + "    env: {EULA: maybe}\n", []string{"servers.a.env.EULA: must be true or false"}},
		{"unknown image", srv + "    image: Java 99\n", []string{`servers.a.image: paper has no image "Java 99"`}},
		{"unknown field in a server", srv + "    memroy: 2G\n", []string{"servers.a.memroy: unknown field (line 6)"}},
		{"properties key", srv + "    properties: {\"bad key\": 1}\n", []string{"servers.a.properties.bad key: is not a server.properties key"}},
		{"properties multi-line", srv + "    properties: {motd: \"a\\nb\"}\n", []string{"servers.a.properties.motd: must be one line"}},
		{"files escape", srv + "    files:\n      - {path: ../x, content: a}\n", []string{`servers.a.files[0].path: must not contain ".." segments`}},
		{"files absolute", srv + "    files:\n      - {path: /etc/x, content: a}\n", []string{"servers.a.files[0].path: must be relative"}},
		{"files unclean", srv + "    files:\n      - {path: a//b, content: a}\n", []string{"servers.a.files[0].path: must be a clean path"}},
		{"files twice", srv + "    files:\n      - {path: a, content: x}\n      - {path: a, content: y}\n",
			[]string{"servers.a.files[1].path: a is given twice"}},
		{"files unknown field", srv + "    files:\n      - {path: a, content: x, mode: 600}\n",
			[]string{"servers.a.files[0].mode: unknown field"}},
		{"files missing content", srv + "    files:\n      - {path: a}\n", []string{"servers.a.files[0].content: is required"}},
		{"proxy without servers", srv + "proxies:\n  p:\n    software: velocity\n    memory: 1G\n",
			[]string{"proxies.p.servers: is required"}},
		{"proxy names a non-server", srv + "dbservices:\n  d:\n    engine: mariadb\nproxies:\n  p:\n    software: velocity\n    memory: 1G\n    servers: [a, d, zz]\n",
			[]string{"proxies.p.servers[1]: d is not a server of this spec", "proxies.p.servers[2]: zz is not a server of this spec"}},
		{"try outside servers", srv + "  b:\n    software: paper\n    memory: 1G\nproxies:\n  p:\n    software: velocity\n    memory: 1G\n    servers: [a]\n    try: [a, b]\n",
			[]string{"proxies.p.try[1]: b is not one of this proxy's servers"}},
		{"forwarding", srv + "proxies:\n  p:\n    software: velocity\n    memory: 1G\n    servers: [a]\n    forwarding: bungeeguard\n",
			[]string{"proxies.p.forwarding: must be one of modern, legacy, none"}},
		{"modern forwarding on bungeecord", srv + "proxies:\n  p:\n    software: bungeecord\n    memory: 1G\n    servers: [a]\n    forwarding: modern\n",
			[]string{"proxies.p.forwarding: modern forwarding needs Velocity; bungeecord knows legacy and none"}},
		{"proxy port", srv + "proxies:\n  p:\n    software: velocity\n    memory: 1G\n    servers: [a]\n    port: 70000\n",
			[]string{"proxies.p.port: must be between 1 and 65535"}},
		{"proxy has no properties", srv + "proxies:\n  p:\n    software: velocity\n    memory: 1G\n    servers: [a]\n    properties: {}\n",
			[]string{"proxies.p.properties: unknown field"}},
		{"server has no port", srv + "    port: 25565\n", []string{"servers.a.port: unknown field"}},
		{"engine", srv + "dbservices:\n  d:\n    engine: mongodb\n", []string{"dbservices.d.engine: must be one of postgres, mariadb"}},
		{"engine required", srv + "dbservices:\n  d:\n    attach: [a]\n", []string{"dbservices.d.engine: is required"}},
		{"attach a non-server", srv + "dbservices:\n  d:\n    engine: postgres\n    attach: [a, nope]\n",
			[]string{"dbservices.d.attach[1]: nope is not a server of this spec"}},
		{"attach twice", srv + "dbservices:\n  d:\n    engine: postgres\n    attach: [a, a]\n",
			[]string{"dbservices.d.attach[1]: a is listed twice"}},
		{"max_connections too low", srv + "dbservices:\n  d:\n    engine: postgres\n    max_connections: 0\n",
			[]string{"dbservices.d.max_connections: must be between 1 and 100"}},
		{"max_connections too high", srv + "dbservices:\n  d:\n    engine: mariadb\n    max_connections: 101\n",
			[]string{"dbservices.d.max_connections: must be between 1 and 100"}},
		{"max_connections not a number", srv + "dbservices:\n  d:\n    engine: postgres\n    max_connections: \"5\"\n",
			[]string{"dbservices.d.max_connections: must be a whole number"}},
		{"aliases", "version: 1\nservers:\n  a: &x\n    software: paper\n    memory: 1G\n  b: *x\n",
			[]string{"servers.a: anchors and aliases are not supported", "servers.b: anchors and aliases are not supported"}},
		{"several at once", "version: 3\nservers:\n  a:\n    software: paper\n    memory: 1K\n    cpu: 1\n",
			[]string{"version: must be 1", "servers.a.memory: must be a whole number with a unit", "servers.a.cpu: must be between"}},
	} {
		t.Run(c.name, func(t *testing.T) { wantIssues(t, c.in, c.want) })
	}
}

// TestMaxConnections: a dbservice's max_connections is kept when set; its
// default (20), written or not, is left out of the normalized spec, so a
// spec written before the field keeps its hash (the pinned one of
// TestParseExample stays).
func TestMaxConnections(t *testing.T) {
	const base = "version: 1\nservers:\n  a: {software: paper, memory: 1G}\ndbservices:\n  d:\n    engine: postgres\n    attach: [a]\n"
	hash := func(in string) (string, DBService) {
		t.Helper()
		s, err := Parse([]byte(in), testCatalog(t))
		if err != nil {
			t.Fatalf("Parse = %v", err)
		}
		h, err := s.Hash()
		if err != nil {
			t.Fatal(err)
		}
		return h, s.DBServices["d"]
	}
	none, d := hash(base)
	if d.MaxConnections != 0 || d.Connections() != DefaultMaxConnections {
		t.Errorf("without max_connections: %+v, Connections %d; want 0 and the default %d", d, d.Connections(), DefaultMaxConnections)
	}
	if def, d := hash(base + "    max_connections: 20\n"); def != none || d.MaxConnections != 0 {
		t.Errorf("max_connections: 20 = %s %+v; want the hash without it (%s) and 0", def, d, none)
	}
	set, d := hash(base + "    max_connections: 50\n")
	if set == none || d.MaxConnections != 50 || d.Connections() != 50 {
		t.Errorf("max_connections: 50 = %s %+v; want its own hash and 50", set, d)
	}
	raw, _ := json.Marshal(d)
	if want := `{"engine":"postgres","attach":["a"],"max_connections":50}`; string(raw) != want {
		t.Errorf("JSON = %s, want %s", raw, want)
	}
}

func TestParseSyntaxError(t *testing.T) {
	got := issues(t, "version: 1\nservers:\n  a: [\n")
	if len(got) != 1 || !strings.Contains(got[0], "line 4, column 1") {
		t.Fatalf("issues = %q, want one with line 4, column 1", got)
	}
	got = issues(t, "version: 1\n x: 2\n")
	if len(got) != 1 || !strings.Contains(got[0], "line 2, column 3") {
		t.Fatalf("issues = %q, want one with line 2, column 3", got)
	}
}

func TestParseLimits(t *testing.T) {
	big := "version: 1\nservers:\n  a:\n    software: paper\n    memory: 1G\n    files:\n      - path: big\n        content: \"" +
		strings.Repeat("x", MaxFileContent+1) + "\"\n"
	if got := issues(t, big); len(got) != 1 || !strings.HasPrefix(got[0], "servers.a.files[0].content: must be at most") {
		t.Errorf("a too large file: %q", got)
	}
	var b strings.Builder
	b.WriteString("version: 1\nservers:\n  a:\n    software: paper\n    memory: 1G\n    files:\n")
	for i := range MaxFiles + 1 {
		b.WriteString("      - {path: f" + strings.Repeat("x", i%3) + string(rune('a'+i%26)) + "/" + strings.Repeat("y", i/26) + ", content: x}\n")
	}
	if got := issues(t, b.String()); len(got) != 1 || !strings.HasPrefix(got[0], "servers.a.files: must list at most 100 files") {
		t.Errorf("too many files: %q", got)
	}
	b.Reset()
	b.WriteString("version: 1\ndbservices:\n")
	for i := range MaxResources + 1 {
		b.WriteString("  d" + strings.Repeat("a", i/26) + string(rune('a'+i%26)) + ": {engine: postgres}\n")
	}
	if got := issues(t, b.String()); len(got) != 1 || !strings.HasPrefix(got[0], ": a spec has at most 1000 resources") {
		t.Errorf("too many resources: %q", got)
	}
	if _, err := Parse(make([]byte, MaxYAML+1), testCatalog(t)); err == nil {
		t.Error("a spec over MaxYAML was accepted")
	}
}

// TestHashStable: comments, key order, whitespace, quoting and the
// spelling of sizes do not change the hash; a change of meaning does.
func TestHashStable(t *testing.T) {
	cat := testCatalog(t)
	hash := func(in string) string {
		t.Helper()
		s, err := Parse([]byte(in), cat)
		if err != nil {
			t.Fatalf("Parse(%q) = %v", in, err)
		}
		h, err := s.Hash()
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	base := hash("version: 1\nservers:\n  a:\n    software: paper\n    memory: 2G\n    env: {MOTD: hi, MAX_PLAYERS: 20}\n")
	for _, same := range []string{
		"# a network\nversion: 1\nservers:\n  a:   # the lobby\n    memory: 2048M\n    software: \"paper\"\n    env:\n      MAX_PLAYERS: 20\n      MOTD: 'hi'\n",
		"{version: 1, servers: {a: {software: paper, memory: 2GiB, env: {MOTD: hi, MAX_PLAYERS: \"20\"}, cpu: 100, disk: 10G, state: running, version: latest}}}",
		"version: 1\nservers:\n  a:\n    software: paper\n    memory: 2g\n    env: {MOTD: hi, MAX_PLAYERS: 0x14}\n    files: []\n    properties: {}\nproxies: {}\ndbservices:\n",
	} {
		if h := hash(same); h != base {
			t.Errorf("hash of an equivalent spec differs:\n%s", same)
		}
	}
	for _, other := range []string{
		"version: 1\nservers:\n  a:\n    software: paper\n    memory: 3G\n    env: {MOTD: hi, MAX_PLAYERS: 20}\n",
		"version: 1\nservers:\n  b:\n    software: paper\n    memory: 2G\n    env: {MOTD: hi, MAX_PLAYERS: 20}\n",
		"version: 1\nservers:\n  a:\n    software: paper\n    memory: 2G\n    env: {MOTD: hi, MAX_PLAYERS: 21}\n",
		"version: 1\nservers:\n  a:\n    software: paper\n    memory: 2G\n    state: stopped\n    env: {MOTD: hi, MAX_PLAYERS: 20}\n",
	} {
		if h := hash(other); h == base {
			t.Errorf("hash of a different spec is the same:\n%s", other)
		}
	}
	// Files are a set: their order does not matter.
	f1 := hash("version: 1\nservers:\n  a:\n    software: paper\n    memory: 1G\n    files:\n      - {path: a, content: x}\n      - {path: b, content: y}\n")
	f2 := hash("version: 1\nservers:\n  a:\n    software: paper\n    memory: 1G\n    files:\n      - {path: b, content: y}\n      - {path: a, content: x}\n")
	if f1 != f2 {
		t.Error("the order of files changes the hash")
	}
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{
		"512M": 512 << 20, "2G": 2 << 30, "2GiB": 2 << 30, "2Gi": 2 << 30, "2GB": 2 << 30, "2g": 2 << 30,
		"1T": 1 << 40, "1 G": 1 << 30, "0M": 0,
	} {
		if got, err := ParseSize(in); err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "2", "2K", "1.5G", "-1G", "G", "12345678G", "2 GiBs", "2Gb x"} {
		if got, err := ParseSize(in); err == nil {
			t.Errorf("ParseSize(%q) = %d, want an error", in, got)
		}
	}
	for b, want := range map[int64]string{2 << 30: "2G", 512 << 20: "512M", 1 << 40: "1T", 1536 << 20: "1536M", 100: "100 bytes"} {
		if got := FormatSize(b); got != want {
			t.Errorf("FormatSize(%d) = %q, want %q", b, got, want)
		}
	}
}

// TestParseNode: a server or a proxy may name its node; the JSON form
// (and so the hash) of a spec naming none is what it was before nodes
// could be named (TestParseExample pins that hash), and naming one
// changes it.
func TestParseNode(t *testing.T) {
	const base = "version: 1\nservers:\n  a:\n    software: paper\n    memory: 1G\n"
	without, err := Parse([]byte(base), testCatalog(t))
	if err != nil {
		t.Fatal(err)
	}
	with, err := Parse([]byte(base+"    node: game-1\nproxies:\n  p:\n    software: velocity\n    memory: 1G\n    servers: [a]\n    node: game.2\n"), testCatalog(t))
	if err != nil {
		t.Fatal(err)
	}
	if got := with.Servers["a"].Node; got != "game-1" {
		t.Errorf("servers.a.node = %q, want game-1", got)
	}
	if got := with.Proxies["p"].Node; got != "game.2" {
		t.Errorf("proxies.p.node = %q, want game.2", got)
	}
	j, _ := json.Marshal(without.Servers["a"])
	if strings.Contains(string(j), "node") {
		t.Errorf("a server naming no node has node in its JSON form: %s", j)
	}
	j, _ = json.Marshal(with.Servers["a"])
	if !strings.Contains(string(j), `"node":"game-1"`) {
		t.Errorf("a server naming a node lacks it in its JSON form: %s", j)
	}
	h1, _ := without.Hash()
	withA, err := Parse([]byte(base+"    node: game-1\n"), testCatalog(t))
	if err != nil {
		t.Fatal(err)
	}
	if h2, _ := withA.Hash(); h1 == h2 {
		t.Error("naming a node does not change the spec's hash")
	}
}
