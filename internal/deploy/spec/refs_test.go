package spec

import (
	"slices"
	"strings"
	"testing"
)

// wired is a network whose files reference its dbservice and servers.
const wired = `version: 1
servers:
  lobby:
    software: paper
    memory: 1G
    files:
      - path: plugins/Stats/config.yml
        content: |
          host: ${dbservices.stats.host}
          port: ${dbservices.stats.port}
          url: ${dbservices.stats.jdbc_url}
          user: ${dbservices.stats.user}
          password: ${dbservices.stats.password}
          me: ${servers.lobby.address}
          hub: ${servers.hub.address}
          literal: $${servers.lobby.address} and ${player} and ${other.thing}
  hub:
    software: paper
    memory: 1G
proxies:
  edge:
    software: velocity
    memory: 1G
    servers: [lobby]
    files:
      - {path: motd.txt, content: "lobby at ${servers.lobby.address}"}
dbservices:
  stats:
    engine: postgres
`

// TestReferences: the files' references are kept as written in the
// normalized spec (and so in its hash: the template, never a value),
// listed by Refs and References, and Expand writes their values in,
// "$${" as "${", and every other "${" as it is.
func TestReferences(t *testing.T) {
	s, err := Parse([]byte(wired), testCatalog(t))
	if err != nil {
		t.Fatalf("Parse = %v", err)
	}
	lobby := s.Servers["lobby"]
	if !strings.Contains(lobby.Files[0].Content, "password: ${dbservices.stats.password}\n") {
		t.Errorf("content = %q, want the references as written", lobby.Files[0].Content)
	}
	want := []Ref{{RefDBService, "stats", "host"}, {RefDBService, "stats", "port"}, {RefDBService, "stats", "jdbc_url"},
		{RefDBService, "stats", "user"}, {RefDBService, "stats", "password"}, {RefServer, "lobby", "address"}, {RefServer, "hub", "address"}}
	if got := lobby.References(); !slices.Equal(got, want) {
		t.Errorf("References = %v, want %v", got, want)
	}
	if got := s.Proxies["edge"].References(); !slices.Equal(got, []Ref{{RefServer, "lobby", "address"}}) {
		t.Errorf("edge's References = %v", got)
	}
	values := map[Ref]string{
		{RefDBService, "stats", "host"}: "10.0.0.5", {RefDBService, "stats", "port"}: "5432",
		{RefDBService, "stats", "jdbc_url"}: "jdbc:postgresql://10.0.0.5:5432/kiln_stats", {RefDBService, "stats", "user"}: "kiln_stats",
		{RefDBService, "stats", "password"}: "s3cret", {RefServer, "lobby", "address"}: "127.0.0.1:25565",
		{RefServer, "hub", "address"}: "127.0.0.1:25566",
	}
	got := Expand(lobby.Files[0].Content, func(r Ref) string { return values[r] })
	const expanded = `host: 10.0.0.5
port: 5432
url: jdbc:postgresql://10.0.0.5:5432/kiln_stats
user: kiln_stats
password: s3cret
me: 127.0.0.1:25565
hub: 127.0.0.1:25566
literal: ${servers.lobby.address} and ${player} and ${other.thing}
`
	if got != expanded {
		t.Errorf("Expand =\n%s\nwant\n%s", got, expanded)
	}
	if !(Ref{RefDBService, "stats", "password"}).Password() || (Ref{RefDBService, "stats", "user"}).Password() ||
		!(Ref{RefSecret, "api", ""}).Password() {
		t.Error("Password: a dbservice's password and a secret are one, nothing else")
	}
	// A secret: in a secret variable and in a file; the variables' come
	// first, by name.
	sv := Server{Env: map[string]string{"RCON_PASSWORD": "${secrets.rcon}", "MOTD": "hi"},
		Files: []File{{Path: "t", Content: "token=${secrets.api_token} ${secrets.rcon}"}}}
	if got := sv.References(); !slices.Equal(got, []Ref{{RefSecret, "rcon", ""}, {RefSecret, "api_token", ""}}) {
		t.Errorf("References = %v", got)
	}
	if got := (Ref{RefSecret, "rcon", ""}).String(); got != "${secrets.rcon}" {
		t.Errorf("String = %q", got)
	}
}

// TestReferenceRules: every reference that cannot be resolved is an issue
// at its file's path with its line (exact in a literal block, the
// value's first line otherwise); a variable cannot take one; servers
// cannot reference each other's address in a circle.
func TestReferenceRules(t *testing.T) {
	const base = "version: 1\nservers:\n  a:\n    software: paper\n    memory: 1G\n"
	file := func(content string) string {
		return base + "    files:\n      - path: x.yml\n        content: |\n          first\n          " + content + "\n"
	}
	for _, c := range []struct {
		name, in string
		want     []string
	}{
		{"unknown dbservice", file("p: ${dbservices.stats.password}"),
			[]string{"servers.a.files[0].content: ${dbservices.stats.password} (line 10): this spec has no dbservice stats"}},
		{"a server as a dbservice", file("p: ${dbservices.a.password}"),
			[]string{"servers.a.files[0].content: ${dbservices.a.password} (line 10): this spec has no dbservice a (it is a server)"}},
		{"unknown dbservice field", file("p: ${dbservices.stats.pass}") + "dbservices:\n  stats: {engine: postgres}\n",
			[]string{"servers.a.files[0].content: ${dbservices.stats.pass} (line 10): a dbservice's field is one of host, port, name, user, password, jdbc_url"}},
		{"unknown server", file("${servers.nope.address}"),
			[]string{"servers.a.files[0].content: ${servers.nope.address} (line 10): this spec has no server nope"}},
		{"unknown server field", file("${servers.a.port}"),
			[]string{"servers.a.files[0].content: ${servers.a.port} (line 10): a server's field is address"}},
		{"bad name", file("${servers.A.address}"),
			[]string{"servers.a.files[0].content: ${servers.A.address} (line 10): does not name a server"}},
		{"not closed", file("${servers.a.address"),
			[]string{"servers.a.files[0].content: ${servers (line 10): is not closed with } on its line"}},
		{"a proxy's address", base + "proxies:\n  p:\n    software: velocity\n    memory: 1G\n    servers: [a]\n" +
			"    files:\n      - {path: x, content: \"${servers.p.address}\"}\n",
			[]string{"proxies.p.files[0].content: ${servers.p.address} (line 12): p is a proxy; only a server's address can be referenced"}},
		{"in env", base + "    env: {MOTD: \"at ${servers.a.address}\"}\n",
			[]string{"servers.a.env.MOTD: ${servers.a.address}: a variable cannot take a reference to a dbservice or a server"}},
		{"a secret in a variable kept in clear", base + "    env: {MOTD: \"${secrets.motd}\"}\n",
			[]string{"servers.a.env.MOTD: ${secrets.motd}: only a variable paper keeps secret can take a secret (RCON_PASSWORD); write it in a file (files[].content) instead"}},
		{"a bad secret name in a variable", base + "    env: {RCON_PASSWORD: \"${secrets.no-dash}\"}\n",
			[]string{"servers.a.env.RCON_PASSWORD: ${secrets.no-dash}: does not name a secret"}},
		{"a bad secret name in a file", file("${secrets.}"),
			[]string{"servers.a.files[0].content: ${secrets.} (line 10): does not name a secret"}},
		{"a circle", "version: 1\nservers:\n" +
			"  a: {software: paper, memory: 1G, files: [{path: x, content: \"${servers.b.address}\"}]}\n" +
			"  b: {software: paper, memory: 1G, files: [{path: x, content: \"${servers.c.address}\"}]}\n" +
			"  c: {software: paper, memory: 1G, files: [{path: x, content: \"${servers.a.address} ${servers.c.address}\"}]}\n",
			[]string{"servers.c.files[0].content: ${servers.a.address}: the servers a → b → c → a reference each other's address"}},
	} {
		t.Run(c.name, func(t *testing.T) { wantIssues(t, c.in, c.want) })
	}
	// Its own address, another's without a circle, and text that only
	// looks like a reference are fine.
	ok := "version: 1\nservers:\n" +
		"  a: {software: paper, memory: 1G, files: [{path: x, content: \"${servers.a.address} ${servers.b.address} $${servers.zz.address} ${x.y} ${secrets.any_name}\"}]}\n" +
		"  b: {software: paper, memory: 1G, env: {RCON_PASSWORD: \"${secrets.RCON}\"}}\n"
	if _, err := Parse([]byte(ok), testCatalog(t)); err != nil {
		t.Errorf("Parse = %v, want it accepted", err)
	}
}
