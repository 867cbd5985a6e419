package spec

import (
	"maps"
	"regexp"
	"slices"
	"strings"

	"github.com/kilnhq/kiln/internal/validate"
)

// Kinds of reference: what ${KIND.…} names.
const (
	RefDBService = "dbservices" // ${dbservices.NAME.FIELD}
	RefServer    = "servers"    // ${servers.NAME.address}
	RefSecret    = "secrets"    // ${secrets.NAME}, a team secret (internal/secrets)
)

// dbServiceFields are the fields of a dbservice a reference may name.
var dbServiceFields = []string{"host", "port", "name", "user", "password", "jdbc_url"}

// maxRef bounds the text between "${" and "}" of a reference.
const maxRef = 200

var (
	refNameRE    = regexp.MustCompile(`^[a-z][a-z0-9-]{0,62}$`)
	secretNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,63}$`) // internal/secrets.ValidName
)

// Ref is a reference in a spec's text, resolved when a run applies the
// spec: ${dbservices.NAME.FIELD} (host, port, name, user, password,
// jdbc_url), ${servers.NAME.address} or ${secrets.NAME}.
type Ref struct {
	Kind  string // RefDBService, RefServer, RefSecret
	Name  string // the resource's or the secret's name
	Field string // "" for a secret
}

// String is the reference as written.
func (r Ref) String() string {
	if r.Kind == RefSecret {
		return "${" + r.Kind + "." + r.Name + "}"
	}
	return "${" + r.Kind + "." + r.Name + "." + r.Field + "}"
}

// Password reports whether the value r resolves to is a password (a
// dbservice's, or any secret): a file holding one is written readable by
// its owner only.
func (r Ref) Password() bool {
	return r.Kind == RefSecret || r.Kind == RefDBService && r.Field == "password"
}

// token is one reference of a text, or an escaped "$${", or something
// that starts like a reference and is not one (bad says why).
type token struct {
	start, end int // text[start:end] is what is replaced
	ref        Ref
	escape     bool // "$${kind." stands for "${kind."
	bad        string
}

// scan finds the references of text: "${" followed by a kind of
// reference and a dot; any other "${" is text. "$${" followed by a kind
// and a dot is an escape, written as "${".
func scan(text string) []token {
	var out []token
	for i := 0; i < len(text); {
		j := strings.Index(text[i:], "${")
		if j < 0 {
			break
		}
		at := i + j
		kind := refKind(text[at+2:])
		switch {
		case kind == "":
			i = at + 2
			continue
		case at > 0 && text[at-1] == '$':
			out = append(out, token{start: at - 1, end: at + 2, escape: true})
			i = at + 2
			continue
		}
		end := strings.IndexAny(text[at+2:min(len(text), at+2+maxRef+1)], "}\n")
		if end < 0 || text[at+2+end] != '}' {
			out = append(out, token{start: at, end: at + 2 + len(kind), bad: "is not closed with } on its line"})
			i = at + 2
			continue
		}
		tk := token{start: at, end: at + 2 + end + 1}
		tk.ref, tk.bad = parseRef(kind, text[at+2+len(kind)+1:at+2+end])
		out = append(out, tk)
		i = tk.end
	}
	return out
}

// refKind is the kind of reference s starts with ("dbservices." …), or "".
func refKind(s string) string {
	for _, k := range []string{RefDBService, RefServer, RefSecret} {
		if strings.HasPrefix(s, k+".") {
			return k
		}
	}
	return ""
}

// parseRef reads the part of a reference after "KIND.".
func parseRef(kind, rest string) (Ref, string) {
	if kind == RefSecret {
		if !secretNameRE.MatchString(rest) {
			return Ref{Kind: kind, Name: rest}, "does not name a secret (a letter or _, then letters, digits or _, at most 64)"
		}
		return Ref{Kind: kind, Name: rest}, ""
	}
	name, field, _ := strings.Cut(rest, ".")
	r := Ref{Kind: kind, Name: name, Field: field}
	if !refNameRE.MatchString(name) {
		return r, "does not name a " + strings.TrimSuffix(kind, "s") + " (a name is a lowercase letter then lowercase letters, digits or dashes)"
	}
	switch kind {
	case RefDBService:
		if !slices.Contains(dbServiceFields, field) {
			return r, "a dbservice's field is one of " + strings.Join(dbServiceFields, ", ")
		}
	case RefServer:
		if field != "address" {
			return r, "a server's field is address"
		}
	}
	return r, ""
}

// Refs returns the references text makes, each once, in order of first
// appearance (malformed ones, which Parse refuses, are left out).
func Refs(text string) []Ref {
	var out []Ref
	for _, tk := range scan(text) {
		if !tk.escape && tk.bad == "" && !slices.Contains(out, tk.ref) {
			out = append(out, tk.ref)
		}
	}
	return out
}

// Expand returns text with each reference replaced by value(ref), and
// each "$${" escaping a reference written as "${".
func Expand(text string, value func(Ref) string) string {
	tokens := scan(text)
	if len(tokens) == 0 {
		return text
	}
	var b strings.Builder
	last := 0
	for _, tk := range tokens {
		b.WriteString(text[last:tk.start])
		switch {
		case tk.escape:
			b.WriteString("${")
		case tk.bad != "":
			b.WriteString(text[tk.start:tk.end])
		default:
			b.WriteString(value(tk.ref))
		}
		last = tk.end
	}
	b.WriteString(text[last:])
	return b.String()
}

// References returns the references of a server's (or proxy's)
// variables (by name) and files, each once.
func (s Server) References() []Ref {
	var out []Ref
	add := func(text string) {
		for _, r := range Refs(text) {
			if !slices.Contains(out, r) {
				out = append(out, r)
			}
		}
	}
	for _, k := range slices.Sorted(maps.Keys(s.Env)) {
		add(s.Env[k])
	}
	for _, f := range s.Files {
		add(f.Content)
	}
	return out
}

// LiteralSecrets refuses a value written literally in a variable the
// software keeps secret (RCON_PASSWORD): a spec is kept in clear in every
// version of its configuration, so such a value belongs in a team secret,
// referenced as ${secrets.NAME}. It is the check of a spec being saved,
// not of one saved before it existed, which its runs still apply.
// Errors: *validate.Error, an issue at each such variable.
func LiteralSecrets(s *Spec, cat Catalog) error {
	var c validate.Collector
	check := func(at string, sv Server) {
		prof, ok := cat.Get(sv.Software)
		if !ok {
			return
		}
		for _, k := range slices.Sorted(maps.Keys(sv.Env)) {
			v := sv.Env[k]
			if !prof.SecretVar(k) || v == "" || slices.ContainsFunc(Refs(v), func(r Ref) bool { return r.Kind == RefSecret }) {
				continue
			}
			c.Add(validate.Join(at, "env", k), "%s is a secret, and a spec is kept in clear in every version of its configuration: store the value as a team secret (PUT /secrets/NAME {\"value\": …}) and write ${secrets.NAME} here", k)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(s.Servers)) {
		check(validate.Join("servers", name), s.Servers[name])
	}
	for _, name := range slices.Sorted(maps.Keys(s.Proxies)) {
		check(validate.Join("proxies", name), s.Proxies[name].Server)
	}
	return c.Err()
}
