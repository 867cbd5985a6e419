package spec

import (
	"errors"
	"fmt"
	"maps"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"

	yaml "go.yaml.in/yaml/v4"

	"github.com/kilnhq/kiln/internal/catalog"
	"github.com/kilnhq/kiln/internal/cluster"
	"github.com/kilnhq/kiln/internal/validate"
)

// Limits of a spec (doc.go says why).
const (
	MaxYAML        = 1 << 20   // bytes of YAML
	MaxResources   = 1000      // servers + proxies + dbservices
	MaxFiles       = 100       // files of one server or proxy
	MaxFileContent = 256 << 10 // bytes of one file's content
	maxFilePath    = 1024
	maxValue       = 4096 // bytes of one env or properties value
)

const (
	defaultCPU     = 100
	defaultDisk    = 10 << 30
	defaultVersion = "latest"
)

var (
	nameRE     = regexp.MustCompile(`^[a-z][a-z0-9-]{0,62}$`)
	propertyRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$`)
)

// Parse reads a deployment spec (YAML, version 1), checks it against every
// rule of deployment-spec.md §1 and the catalog, and returns it normalized.
// All broken rules are reported together as one *validate.Error, each
// issue at a dotted path ("proxies.edge.servers[1]"); a YAML syntax error
// is one issue whose message has the line and column.
func Parse(data []byte, cat Catalog) (*Spec, error) {
	if len(data) > MaxYAML {
		return nil, validate.Errorf("", "the spec is larger than %d bytes", MaxYAML)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, validate.Errorf("", "%s", syntaxMessage(err))
	}
	p := &parser{cat: cat}
	s := p.spec(&doc)
	if err := p.c.Err(); err != nil {
		return nil, err
	}
	return s, nil
}

// syntaxMessage words a YAML error with its line and column.
func syntaxMessage(err error) string {
	var le *yaml.LoadError
	if errors.As(err, &le) && le.Mark.Line > 0 {
		return fmt.Sprintf("YAML syntax error at line %d, column %d: %s", le.Mark.Line, le.Mark.Column, le.Message)
	}
	return "YAML syntax error: " + strings.TrimPrefix(err.Error(), "yaml: ")
}

type parser struct {
	c   validate.Collector
	cat Catalog
	// texts are the files' contents read, whose references are checked
	// once every resource's name is known.
	texts []refText
}

// refText is a text of the spec that may hold references: a file's
// content, where it is, and whose it is.
type refText struct {
	at    string     // its path: servers.lobby.files[0].content
	owner string     // the server's or proxy's path: servers.lobby
	node  *yaml.Node // its value, for line numbers
}

func (p *parser) add(at, format string, args ...any) { p.c.Add(at, format, args...) }

// field is one key of a mapping, in document order.
type field struct {
	key  string
	node *yaml.Node
}

// mapping returns n's keys in order when n is a mapping, reporting
// duplicate keys, keys not in allowed (when given), anchors, aliases and
// merge keys (a spec is small and explicit; an alias could also make a
// walk of the tree exponential).
func (p *parser) mapping(n *yaml.Node, at string, allowed ...string) ([]field, bool) {
	if !p.plain(n, at) {
		return nil, false
	}
	if n.Kind != yaml.MappingNode {
		p.add(at, "must be a mapping")
		return nil, false
	}
	var out []field
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode || k.Tag == "!!merge" {
			p.add(at, "keys must be plain names (line %d)", k.Line)
			continue
		}
		kat := validate.Join(at, k.Value)
		switch {
		case seen[k.Value]:
			p.add(kat, "is given twice (line %d)", k.Line)
			continue
		case allowed != nil && !slices.Contains(allowed, k.Value):
			p.add(kat, "unknown field (line %d)", k.Line)
			continue
		}
		seen[k.Value] = true
		out = append(out, field{k.Value, v})
	}
	return out, true
}

// plain refuses anchors and aliases.
func (p *parser) plain(n *yaml.Node, at string) bool {
	if n.Kind == yaml.AliasNode || n.Anchor != "" {
		p.add(at, "anchors and aliases are not supported (line %d)", n.Line)
		return false
	}
	return true
}

func isNull(n *yaml.Node) bool { return n.Kind == yaml.ScalarNode && n.Tag == "!!null" }

// scalar returns a scalar's text as written: "1.20" stays "1.20".
func (p *parser) scalar(n *yaml.Node, at string) (string, bool) {
	if !p.plain(n, at) {
		return "", false
	}
	switch {
	case n.Kind != yaml.ScalarNode:
		p.add(at, "must be a single value, not a list or mapping")
		return "", false
	case isNull(n):
		p.add(at, "must not be empty")
		return "", false
	}
	return n.Value, true
}

// value is scalar, normalized for env and properties values: true/false
// for booleans, decimal for integers, as written otherwise.
func (p *parser) value(n *yaml.Node, at string) (string, bool) {
	v, ok := p.scalar(n, at)
	if !ok {
		return "", false
	}
	switch n.Tag {
	case "!!bool":
		b, err := strconv.ParseBool(strings.ToLower(v))
		if err == nil {
			v = strconv.FormatBool(b)
		}
	case "!!int":
		if i, err := strconv.ParseInt(v, 0, 64); err == nil {
			v = strconv.FormatInt(i, 10)
		}
	}
	if len(v) > maxValue {
		p.add(at, "must be at most %d bytes", maxValue)
		return "", false
	}
	if strings.ContainsAny(v, "\x00\r\n") {
		p.add(at, "must be one line")
		return "", false
	}
	return v, true
}

func (p *parser) integer(n *yaml.Node, at string, lo, hi int) (int, bool) {
	v, ok := p.scalar(n, at)
	if !ok {
		return 0, false
	}
	i, err := strconv.ParseInt(v, 0, 64)
	if n.Tag != "!!int" || err != nil {
		p.add(at, "must be a whole number")
		return 0, false
	}
	if i < int64(lo) || i > int64(hi) {
		p.add(at, "must be between %d and %d", lo, hi)
		return 0, false
	}
	return int(i), true
}

func (p *parser) oneOf(n *yaml.Node, at string, allowed ...string) (string, bool) {
	v, ok := p.scalar(n, at)
	if !ok {
		return "", false
	}
	if !slices.Contains(allowed, v) {
		p.add(at, "must be one of %s", strings.Join(allowed, ", "))
		return "", false
	}
	return v, true
}

func (p *parser) size(n *yaml.Node, at string, lo, hi int64) (int64, bool) {
	v, ok := p.scalar(n, at)
	if !ok {
		return 0, false
	}
	b, err := ParseSize(v)
	if err != nil {
		p.add(at, "%v", err)
		return 0, false
	}
	if b < lo || b > hi {
		p.add(at, "must be between %s and %s", FormatSize(lo), FormatSize(hi))
		return 0, false
	}
	return b, true
}

// names reads a sequence of resource names (no duplicates).
func (p *parser) names(n *yaml.Node, at string) ([]string, bool) {
	if !p.plain(n, at) {
		return nil, false
	}
	if n.Kind != yaml.SequenceNode {
		p.add(at, "must be a list of names")
		return nil, false
	}
	out := []string{}
	ok := true
	for i, e := range n.Content {
		eat := at + "[" + strconv.Itoa(i) + "]"
		v, good := p.scalar(e, eat)
		if !good {
			ok = false
			continue
		}
		if slices.Contains(out, v) {
			p.add(eat, "%s is listed twice", v)
			ok = false
			continue
		}
		out = append(out, v)
	}
	return out, ok
}

func (p *parser) spec(doc *yaml.Node) *Spec {
	s := &Spec{Version: 1, Servers: map[string]Server{}, Proxies: map[string]Proxy{}, DBServices: map[string]DBService{}}
	if doc.Kind == 0 || len(doc.Content) == 0 {
		p.add("version", "is required (the spec is empty)")
		return s
	}
	top, ok := p.mapping(doc.Content[0], "", "version", "servers", "proxies", "dbservices")
	if !ok {
		return s
	}
	owner := map[string]string{} // name → its top-level key
	var versionSeen bool
	var proxies []field // checked after the servers they name
	var dbs []field
	for _, f := range top {
		switch f.key {
		case "version":
			versionSeen = true
			if v, ok := p.scalar(f.node, "version"); ok && (v != "1" || f.node.Tag != "!!int") {
				p.add("version", "must be 1")
			}
		case "servers", "proxies", "dbservices":
			if isNull(f.node) {
				continue
			}
			entries, ok := p.mapping(f.node, f.key)
			if !ok {
				continue
			}
			for _, e := range entries {
				at := validate.Join(f.key, e.key)
				if !nameRE.MatchString(e.key) {
					p.add(at, "name must be a lowercase letter then up to 62 lowercase letters, digits or dashes")
					continue
				}
				if prev, taken := owner[e.key]; taken {
					p.add(at, "the name %s is already used in %s (names are unique across servers, proxies and dbservices)", e.key, prev)
					continue
				}
				owner[e.key] = f.key
				switch f.key {
				case "servers":
					if sv, ok := p.server(e.node, at, catalog.Server); ok {
						s.Servers[e.key] = sv
					}
				case "proxies":
					proxies = append(proxies, e)
				case "dbservices":
					dbs = append(dbs, e)
				}
			}
		}
	}
	if !versionSeen {
		p.add("version", "is required (version: 1)")
	}
	if len(owner) > MaxResources {
		p.add("", "a spec has at most %d resources, this one %d", MaxResources, len(owner))
	}
	isServer := func(name string) bool { return owner[name] == "servers" }
	for _, e := range proxies {
		if px, ok := p.proxy(e.node, validate.Join("proxies", e.key), isServer); ok {
			s.Proxies[e.key] = px
		}
	}
	for _, e := range dbs {
		if db, ok := p.dbservice(e.node, validate.Join("dbservices", e.key), isServer); ok {
			s.DBServices[e.key] = db
		}
	}
	p.references(owner)
	return s
}

// serverFields are the fields of a server; a proxy has them too, but
// properties.
var serverFields = []string{"software", "version", "memory", "disk", "cpu", "image", "env", "properties", "files", "state", "node"}

// server reads a server, or the server part of a proxy (category Proxy;
// extra are the proxy's own fields, returned for the caller to read).
func (p *parser) server(n *yaml.Node, at string, category catalog.Category, extra ...string) (Server, bool) {
	allowed := serverFields
	if category == catalog.Proxy {
		allowed = append(slices.DeleteFunc(slices.Clone(serverFields), func(f string) bool { return f == "properties" }), extra...)
	}
	fields, ok := p.mapping(n, at, allowed...)
	if !ok {
		return Server{}, false
	}
	sv := Server{Version: defaultVersion, Disk: defaultDisk, CPU: defaultCPU, State: StateRunning,
		Env: map[string]string{}, Properties: map[string]string{}, Files: []File{}}
	good := true
	var prof catalog.Profile
	var known bool
	var env, image *yaml.Node
	has := map[string]bool{}
	for _, f := range fields {
		fat := validate.Join(at, f.key)
		has[f.key] = true
		switch f.key {
		case "software":
			v, ok := p.scalar(f.node, fat)
			if !ok {
				good = false
				continue
			}
			sv.Software = v
			if prof, known = p.cat.Get(v); !known {
				p.add(fat, "unknown software %q (GET /servers/software lists them)", v)
				good = false
			} else if prof.Category != category {
				p.add(fat, "%s is a %s, not a %s", v, prof.Category, category)
				good = false
				known = false
			}
		case "version":
			v, ok := p.scalar(f.node, fat)
			good = good && ok
			if ok && (len(v) > 64 || strings.ContainsAny(v, "\x00\r\n/ ")) {
				p.add(fat, "must be a game version such as 1.21.4, or latest")
				good = false
			}
			sv.Version = v
		case "memory":
			sv.Memory, ok = p.size(f.node, fat, 256<<20, 64<<30)
			good = good && ok
		case "disk":
			sv.Disk, ok = p.size(f.node, fat, 1<<30, 2<<40)
			good = good && ok
		case "cpu":
			sv.CPU, ok = p.integer(f.node, fat, 10, 6400)
			good = good && ok
		case "image":
			image = f.node
		case "env":
			env = f.node
		case "properties":
			sv.Properties, ok = p.properties(f.node, fat)
			good = good && ok
		case "files":
			sv.Files, ok = p.files(f.node, fat, at)
			good = good && ok
		case "state":
			sv.State, ok = p.oneOf(f.node, fat, StateRunning, StateStopped)
			good = good && ok
		case "node":
			v, ok := p.scalar(f.node, fat)
			if ok {
				if err := cluster.ValidName(v); err != nil {
					p.add(fat, "must be a node's name: 1-63 letters, digits, '.', '_' or '-', starting with a letter or digit")
					ok = false
				}
			}
			good = good && ok
			sv.Node = v
		}
	}
	for _, req := range []string{"software", "memory"} {
		if !has[req] {
			p.add(validate.Join(at, req), "is required")
			good = false
		}
	}
	if env != nil && !isNull(env) {
		sv.Env, ok = p.env(env, validate.Join(at, "env"), prof, known)
		good = good && ok
	}
	if image != nil && !isNull(image) {
		sv.Image, ok = p.image(image, validate.Join(at, "image"), prof, known)
		good = good && ok
	}
	return sv, good
}

func (p *parser) env(n *yaml.Node, at string, prof catalog.Profile, known bool) (map[string]string, bool) {
	fields, ok := p.mapping(n, at)
	if !ok {
		return nil, false
	}
	out := map[string]string{}
	good := true
	for _, f := range fields {
		fat := validate.Join(at, f.key)
		if _, ok := prof.Var(f.key); known && !ok {
			p.add(fat, "unknown variable for %s", prof.Type)
			good = false
			continue
		}
		v, ok := p.value(f.node, fat)
		if !ok {
			good = false
			continue
		}
		for _, tk := range scan(v) {
			written := v[tk.start:tk.end]
			switch {
			case tk.escape:
			case tk.bad != "":
				p.add(fat, "%s: %s", written, tk.bad)
			case tk.ref.Kind != RefSecret:
				p.add(fat, "%s: a variable cannot take a reference to a dbservice or a server; write it in a file (files[].content), or attach the dbservice to the server for its DB_* variables", written)
			case known && !prof.SecretVar(f.key):
				// Any other variable is stored with the server and
				// answered by GET /servers/{id} in clear.
				p.add(fat, "%s: only a variable %s keeps secret can take a secret (%s); write it in a file (files[].content) instead", written, prof.Type, secretVars(prof))
			default:
				continue
			}
			good = false
			break
		}
		out[f.key] = v
	}
	if !known || !good {
		return out, good
	}
	// The profile's own checks (unknown keys, types, required variables
	// without a default), at this spec's paths.
	if _, err := prof.Env(out); err != nil {
		var ve *validate.Error
		if !errors.As(err, &ve) {
			p.add(at, "%v", err)
			return nil, false
		}
		for _, is := range ve.Issues {
			p.add(validate.Join(at, strings.TrimPrefix(is.Path, "env.")), "%s", is.Message)
		}
		return nil, false
	}
	return out, true
}

func (p *parser) image(n *yaml.Node, at string, prof catalog.Profile, known bool) (string, bool) {
	v, ok := p.scalar(n, at)
	if !ok || !known {
		return v, ok
	}
	var names []string
	for _, im := range prof.DockerImages {
		if v == im.Label || v == im.Value {
			return im.Value, true
		}
		names = append(names, strconv.Quote(im.Label))
	}
	p.add(at, "%s has no image %q (its images: %s)", prof.Type, v, strings.Join(names, ", "))
	return "", false
}

func (p *parser) properties(n *yaml.Node, at string) (map[string]string, bool) {
	out := map[string]string{}
	if isNull(n) {
		return out, true
	}
	fields, ok := p.mapping(n, at)
	if !ok {
		return out, false
	}
	good := true
	for _, f := range fields {
		fat := validate.Join(at, f.key)
		if !propertyRE.MatchString(f.key) {
			p.add(fat, "is not a server.properties key (letters, digits, '.', '_' and '-')")
			good = false
			continue
		}
		v, ok := p.value(f.node, fat)
		if !ok {
			good = false
			continue
		}
		out[f.key] = v
	}
	return out, good
}

func (p *parser) files(n *yaml.Node, at, owner string) ([]File, bool) {
	out := []File{}
	if isNull(n) {
		return out, true
	}
	if !p.plain(n, at) {
		return out, false
	}
	if n.Kind != yaml.SequenceNode {
		p.add(at, "must be a list of {path, content}")
		return out, false
	}
	if len(n.Content) > MaxFiles {
		p.add(at, "must list at most %d files", MaxFiles)
		return out, false
	}
	good := true
	seen := map[string]bool{}
	for i, e := range n.Content {
		eat := at + "[" + strconv.Itoa(i) + "]"
		fields, ok := p.mapping(e, eat, "path", "content")
		if !ok {
			good = false
			continue
		}
		var f File
		present := map[string]bool{}
		for _, fl := range fields {
			present[fl.key] = true
			fat := validate.Join(eat, fl.key)
			switch fl.key {
			case "path":
				v, ok := p.scalar(fl.node, fat)
				if ok {
					if msg := badPath(v); msg != "" {
						p.add(fat, "%s", msg)
						ok = false
					} else if seen[v] {
						p.add(fat, "%s is given twice", v)
						ok = false
					}
				}
				if !ok {
					good = false
					continue
				}
				seen[v], f.Path = true, v
			case "content":
				if isNull(fl.node) {
					continue // an empty file
				}
				v, ok := p.scalar(fl.node, fat)
				if ok && len(v) > MaxFileContent {
					p.add(fat, "must be at most %d bytes", MaxFileContent)
					ok = false
				}
				if !ok {
					good = false
					continue
				}
				f.Content = v
				p.texts = append(p.texts, refText{at: fat, owner: owner, node: fl.node})
			}
		}
		for _, req := range []string{"path", "content"} {
			if !present[req] {
				p.add(validate.Join(eat, req), "is required")
				good = false
			}
		}
		out = append(out, f)
	}
	slices.SortFunc(out, func(a, b File) int { return strings.Compare(a.Path, b.Path) })
	return out, good
}

// badPath says what is wrong with a file path of a spec, "" when nothing.
func badPath(p string) string {
	switch {
	case p == "":
		return "must not be empty"
	case len(p) > maxFilePath:
		return fmt.Sprintf("must be at most %d bytes", maxFilePath)
	case strings.ContainsRune(p, 0):
		return "must not contain NUL bytes"
	case strings.HasPrefix(p, "/"):
		return "must be relative to the server's root (no leading /)"
	case slices.Contains(strings.Split(p, "/"), ".."):
		return `must not contain ".." segments`
	case path.Clean(p) != p || p == ".":
		return "must be a clean path (no ./, // or trailing /)"
	}
	return ""
}

// proxyFields are a proxy's own fields, beside serverFields.
var proxyFields = []string{"port", "servers", "try", "forwarding"}

func (p *parser) proxy(n *yaml.Node, at string, isServer func(string) bool) (Proxy, bool) {
	sv, good := p.server(n, at, catalog.Proxy, proxyFields...)
	// Modern forwarding is Velocity's; BungeeCord and Waterfall know
	// legacy (and none) only.
	velocity := true
	if prof, ok := p.cat.Get(sv.Software); ok && prof.Category == catalog.Proxy {
		velocity = prof.Listen == catalog.ListenVelocity
	}
	px := Proxy{Server: sv, Forwarding: ForwardingModern, Backends: []string{}, Try: []string{}}
	if !velocity {
		px.Forwarding = ForwardingLegacy
	}
	fields, ok := p.quietMapping(n)
	if !ok {
		return px, false
	}
	var tryNode *yaml.Node
	hasServers := false
	for _, f := range fields {
		fat := validate.Join(at, f.key)
		switch f.key {
		case "port":
			px.Port, ok = p.integer(f.node, fat, 1, 65535)
			good = good && ok
		case "servers":
			hasServers = true
			px.Backends, ok = p.backends(f.node, fat, isServer)
			good = good && ok
		case "try":
			tryNode = f.node
		case "forwarding":
			px.Forwarding, ok = p.oneOf(f.node, fat, ForwardingModern, ForwardingLegacy, ForwardingNone)
			if ok && px.Forwarding == ForwardingModern && !velocity {
				p.add(fat, "modern forwarding needs Velocity; %s knows legacy and none", sv.Software)
				ok = false
			}
			good = good && ok
		}
	}
	if !hasServers {
		p.add(validate.Join(at, "servers"), "is required (the servers this proxy sends players to)")
		good = false
	}
	switch {
	case tryNode != nil:
		tat := validate.Join(at, "try")
		try, ok := p.names(tryNode, tat)
		for i, name := range try {
			if !slices.Contains(px.Backends, name) {
				p.add(tat+"["+strconv.Itoa(i)+"]", "%s is not one of this proxy's servers", name)
				ok = false
			}
		}
		if ok && len(try) == 0 {
			p.add(tat, "must name at least one server")
			ok = false
		}
		px.Try = try
		good = good && ok
	case len(px.Backends) > 0:
		px.Try = px.Backends[:1]
	}
	return px, good
}

// quietMapping returns a mapping's fields without reporting anything (the
// caller's first pass over the same node did).
func (p *parser) quietMapping(n *yaml.Node) ([]field, bool) {
	if n.Kind != yaml.MappingNode || n.Anchor != "" {
		return nil, false
	}
	var out []field
	for i := 0; i+1 < len(n.Content); i += 2 {
		out = append(out, field{n.Content[i].Value, n.Content[i+1]})
	}
	return out, true
}

// backends reads a list of names that must be servers of the spec.
func (p *parser) backends(n *yaml.Node, at string, isServer func(string) bool) ([]string, bool) {
	names, ok := p.names(n, at)
	for i, name := range names {
		if !isServer(name) {
			p.add(at+"["+strconv.Itoa(i)+"]", "%s is not a server of this spec", name)
			ok = false
		}
	}
	if ok && len(names) == 0 {
		p.add(at, "must name at least one server")
		ok = false
	}
	return names, ok
}

func (p *parser) dbservice(n *yaml.Node, at string, isServer func(string) bool) (DBService, bool) {
	fields, ok := p.mapping(n, at, "engine", "attach", "max_connections")
	if !ok {
		return DBService{}, false
	}
	db := DBService{Attach: []string{}}
	good, hasEngine := true, false
	for _, f := range fields {
		fat := validate.Join(at, f.key)
		switch f.key {
		case "engine":
			hasEngine = true
			db.Engine, ok = p.oneOf(f.node, fat, EnginePostgres, EngineMariaDB)
			good = good && ok
		case "attach":
			if isNull(f.node) {
				continue
			}
			names, ok := p.names(f.node, fat)
			for i, name := range names {
				if !isServer(name) {
					p.add(fat+"["+strconv.Itoa(i)+"]", "%s is not a server of this spec", name)
					ok = false
				}
			}
			slices.Sort(names)
			db.Attach = names
			good = good && ok
		case "max_connections":
			db.MaxConnections, ok = p.integer(f.node, fat, 1, MaxMaxConnections)
			if db.MaxConnections == DefaultMaxConnections {
				db.MaxConnections = 0 // the default is normalized away
			}
			good = good && ok
		}
	}
	if !hasEngine {
		p.add(validate.Join(at, "engine"), "is required (postgres or mariadb)")
		good = false
	}
	return db, good
}

// references checks the references of the files' contents once every
// resource's name is known (owner: name → servers, proxies or
// dbservices): each must be well formed and name a dbservice, or a
// server (a proxy is made after the servers, which could not read its
// address), of this spec; and no two servers may reference each other's
// address, directly or through others (each needs the other made
// first). A server may reference its own.
func (p *parser) references(owner map[string]string) {
	type edge struct{ at, ref string }
	next := map[string][]string{} // server → the servers whose address it references
	first := map[[2]string]edge{} // (from, to) → where it is first referenced
	for _, t := range p.texts {
		text := t.node.Value
		_, self, _ := strings.Cut(t.owner, ".")
		for _, tk := range scan(text) {
			if tk.escape {
				continue
			}
			written := text[tk.start:tk.end]
			where := fmt.Sprintf("%s (line %d)", written, refLine(t.node, text, tk.start))
			if tk.bad != "" {
				p.add(t.at, "%s: %s", where, tk.bad)
				continue
			}
			r := tk.ref
			switch is := owner[r.Name]; {
			case r.Kind == RefDBService && is != "dbservices":
				p.add(t.at, "%s: this spec has no dbservice %s%s", where, r.Name, alsoIs(is))
			case r.Kind == RefServer && is == "proxies":
				p.add(t.at, "%s: %s is a proxy; only a server's address can be referenced (proxies are made after the servers)", where, r.Name)
			case r.Kind == RefServer && is != "servers":
				p.add(t.at, "%s: this spec has no server %s%s", where, r.Name, alsoIs(is))
			case r.Kind == RefServer && strings.HasPrefix(t.owner, "servers.") && r.Name != self:
				if _, seen := first[[2]string{self, r.Name}]; !seen {
					first[[2]string{self, r.Name}] = edge{t.at, written}
					next[self] = append(next[self], r.Name)
				}
			}
		}
	}
	// A cycle among the servers' references, reported once at the
	// reference that closes it.
	state := map[string]int{} // 1: on the path, 2: done
	var path []string
	var visit func(string) bool
	visit = func(s string) bool {
		state[s] = 1
		path = append(path, s)
		for _, n := range next[s] {
			switch state[n] {
			case 1:
				cycle := append(slices.Clone(path[slices.Index(path, n):]), n)
				e := first[[2]string{s, n}]
				p.add(e.at, "%s: the servers %s reference each other's address; one of them must be made before the other, so one reference must go", e.ref, strings.Join(cycle, " → "))
				return true
			case 0:
				if visit(n) {
					return true
				}
			}
		}
		path = path[:len(path)-1]
		state[s] = 2
		return false
	}
	for _, s := range slices.Sorted(maps.Keys(next)) {
		if state[s] == 0 && visit(s) {
			return
		}
	}
}

// alsoIs says what name is instead, when it is another kind of resource.
func alsoIs(kind string) string {
	switch kind {
	case "servers":
		return " (it is a server)"
	case "proxies":
		return " (it is a proxy)"
	case "dbservices":
		return " (it is a dbservice)"
	}
	return ""
}

// refLine is the line of the document where offset of n's text is: exact
// in a literal block (|), the line where the value starts otherwise (a
// folded or quoted scalar does not keep its lines).
func refLine(n *yaml.Node, text string, offset int) int {
	if n.Style&yaml.LiteralStyle != 0 {
		return n.Line + 1 + strings.Count(text[:offset], "\n")
	}
	return n.Line
}

// secretVars names the variables prof keeps secret ("none" when none).
func secretVars(prof catalog.Profile) string {
	var names []string
	for _, v := range prof.EnvironmentVariables {
		if v.Secret {
			names = append(names, v.Key)
		}
	}
	if len(names) == 0 {
		return "it has none"
	}
	return strings.Join(names, ", ")
}
