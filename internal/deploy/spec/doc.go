// Package spec reads deployment specs: the YAML of deployment-spec.md §1
// (version 1), checked against every rule there and against the software
// catalog, normalized (defaults filled in, sizes in bytes) and hashed
// (spec_hash). It is the ground the deployments API, the planner and the
// runs stand on: a configuration's YAML is accepted only when Parse
// accepts it, and a push creates a version only when Hash differs.
//
// It owns the format and nothing else: no I/O, no database, no clock, and
// it never changes the catalog it reads. Parse is safe for concurrent use
// and never panics on any input (FuzzParse).
//
// Errors. Every broken rule is one validate.Issue at a dotted path
// ("servers.lobby.memory", "proxies.edge.servers[1]", "" for the whole
// spec), all of them together in one *validate.Error; the API turns it into
// 400 VALIDATION_ERROR with its issues. Unknown and repeated keys name
// their line. A YAML syntax error is the only issue, with its line and
// column.
//
// Decisions where §1 is silent:
//   - YAML: go.yaml.in/yaml/v4 (v4.0.0, the YAML organisation's
//     maintained fork of go-yaml): it is the only one of the candidates in
//     research/libraries.md whose syntax errors carry a line and a column
//     (v3 says "line 3" only), and its yaml.Node keeps the line of every key.
//     The package uses only Unmarshal into a Node and LoadError's
//     position. It is Kiln's one YAML module (the catalog, the config file,
//     the proxies' config writers and the OpenAPI document use it too;
//     v3 remains only as an indirect requirement of minio-go).
//   - Anchors, aliases and merge keys are refused: a spec is small and
//     explicit, and an alias can make a naive walk of the tree exponential.
//   - memory is required (there is no sensible size for every software),
//     disk defaults to 10G, cpu to 100, version to "latest", state to
//     running, forwarding to modern for Velocity (its recommended mode) and
//     legacy for BungeeCord and Waterfall (which do not know modern: asking
//     for it there is an error), try to the first of servers; port is optional
//     (0: any free port; 1–65535 here, the node's range is checked by
//     internal/deploy, which knows it). servers is required on a proxy, engine on a
//     dbservice; attach may be empty.
//   - max_connections (a dbservice's, optional): how many connections its
//     database user may hold at once on the shared host, 1 to 100
//     (MaxMaxConnections: a tenant must not take a host's every
//     connection; PostgreSQL allows 100 by default), default 20
//     (DefaultMaxConnections, internal/dbservice.MaxConnections). The
//     default, written or not, is left out of the normalized form, so a
//     spec written before the field keeps its hash and a dbservice applied
//     before it is not planned as changed.
//   - node (a server's or a proxy's, optional): the name of the node to
//     run on, syntax only here (a node's name: 1-63 letters, digits, '.',
//     '_' or '-', starting with a letter or digit; cluster.ValidName);
//     internal/deploy checks at push that it names a node of the cluster,
//     and placement spreads the servers that name none. Left out of the
//     normalized form when not given, so a spec written before the field
//     keeps its hash.
//   - Sizes are a whole number and M, G or T, binary whatever the spelling
//     (M, Mi, MB, MiB, either case: "2GB" is 2 GiB, as "binary units" says);
//     a bare number is refused, since "memory: 2048" reads as megabytes to
//     some and bytes to others.
//   - A proxy takes a server's fields except properties (proxies read no
//     server.properties), plus port, servers, try and forwarding. A
//     dbservice takes engine, attach and max_connections only.
//   - env: keys must be variables of the profile and values fit them
//     (catalog.Profile.Env's checks, at this spec's paths); profile
//     defaults are not copied into the spec (a catalog update must not
//     change the hash of an unchanged YAML). properties: keys of letters,
//     digits, '.', '_' and '-'; values one line. Values are kept as written,
//     except booleans (true/false) and integers (decimal: 0x14 is 20).
//   - image: a label or a value of the profile's docker images; the
//     normalized spec holds the value.
//   - files: at most 100 per server, content at most 256 KiB, path relative
//     and clean (no "..", no leading "/", no "//" or "./"), unique; the
//     normalized list is sorted by path (the order has no meaning).
//   - References (refs.go): a file's content may hold
//     ${dbservices.NAME.FIELD} (host, port, name, user, password,
//     jdbc_url) and ${servers.NAME.address}, resolved when a run applies
//     the spec; they are kept as written, so the normalized spec, its hash
//     and every version hold the template, never a value. "$${" before
//     one writes "${" literally; any other "${" is text (plugins'
//     placeholders). Each must name a dbservice, or a server, of the spec
//     (a proxy is made after the servers, which could not read its
//     address): an issue at the file's content path naming the reference
//     and its line (exact in a literal block, the value's first line
//     otherwise). A variable may not hold one (a dbservice reaches a
//     server's environment through attach). Servers referencing each
//     other's address in a circle are refused (each would need the other
//     made first); a server may reference its own.
//   - Team secrets: ${secrets.NAME} (NAME as internal/secrets allows: a
//     letter or _, then letters, digits or _) may be in a file's content
//     and in the value of a variable the profile keeps secret
//     (RCON_PASSWORD) — any other variable is stored with the server and
//     answered by the API in clear, so a secret there is an issue at it.
//     Whether the team has the secret is not known here: a run checks it.
//     LiteralSecrets refuses a secret variable written literally; it is
//     internal/deploy's check of a spec being saved, not Parse's, so a
//     version saved before it still parses and applies.
//   - Limits: the YAML at most 1 MiB, at most 1,000 resources (the size
//     the planner is measured at: bench/deployments.sh).
//
// Normalized form and hash. The JSON of Spec (its field tags) is:
//
//	{"version":1,
//	 "servers":{"<name>":{"software","version","memory","disk","cpu","image",
//	            "env":{},"properties":{},"files":[{"path","content"}],"state","node"?}},
//	 "proxies":{"<name>":{…the server fields…,"port","servers":[],"try":[],"forwarding"}},
//	 "dbservices":{"<name>":{"engine","attach":[],"max_connections"}}}
//
// with sizes in bytes, empty maps and lists written (never null), attach
// sorted, and max_connections only when it is not the default (20). spec_hash is "sha256:" and the hex SHA-256 of its RFC 8785
// canonical form (github.com/gowebpki/jcs, the Go port of the RFC's
// reference code: sorted keys, fixed number and string forms); comments,
// key order, whitespace, quoting and the spelling of sizes do not change
// it. The hash of §1's example is pinned in the tests: changing this form
// changes every stored spec_hash and needs a migration.
package spec
