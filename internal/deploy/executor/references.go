package executor

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/kilnhq/kiln/internal/dbservice"
	"github.com/kilnhq/kiln/internal/deploy/plan"
	"github.com/kilnhq/kiln/internal/deploy/runs"
	"github.com/kilnhq/kiln/internal/deploy/spec"
	"github.com/kilnhq/kiln/internal/servers"
)

// DigestPurpose names the key of the references' digests
// (secretbox.Box.Derive(DigestPurpose) is Options.DigestKey).
const DigestPurpose = "kiln deploy references v1"

// values reads what refs resolve to now, for the configuration's objects
// and the team's secrets: a dbservice's credentials, a server's address,
// a secret's value. A reference to an object not made yet, or to one the
// plan makes anew (fresh, by key), or to a secret the team has not, is
// left out. The error is one reading them.
func (e *Executor) values(ctx context.Context, teamID, configurationID string, refs []spec.Ref, fresh map[string]bool) (map[spec.Ref]string, error) {
	out := map[spec.Ref]string{}
	var names []string // of the secrets referenced
	for _, r := range refs {
		if r.Kind == spec.RefSecret && !slices.Contains(names, r.Name) {
			names = append(names, r.Name)
		}
	}
	if len(names) > 0 && e.opts.TeamSecrets != nil {
		vals, err := e.opts.TeamSecrets.Values(ctx, teamID, names)
		if err != nil {
			return nil, err
		}
		for name, v := range vals {
			out[spec.Ref{Kind: spec.RefSecret, Name: name}] = v
		}
	}
	creds := map[string]*dbservice.Credentials{} // by dbservice name; nil: not made
	addrs := map[string]*string{}                // by server name; nil: not made
	for _, r := range refs {
		switch r.Kind {
		case spec.RefDBService:
			key := plan.Key(plan.DBService, r.Name)
			c, seen := creds[r.Name]
			if !seen && !fresh[key] && e.opts.Databases != nil {
				got, err := e.opts.Databases.Credentials(ctx, teamID, dbservice.Owner{ConfigurationID: configurationID, ResourceKey: key})
				switch {
				case err == nil:
					c = &got
				case !errors.Is(err, dbservice.ErrNotFound):
					return nil, err
				}
				creds[r.Name] = c
			}
			if c != nil {
				out[r] = credentialField(*c, r.Field)
			}
		case spec.RefServer:
			key := plan.Key(plan.Server, r.Name)
			a, seen := addrs[r.Name]
			if !seen && !fresh[key] {
				sv, err := e.servers.FindOwned(ctx, teamID, servers.Owner{ConfigurationID: configurationID, ResourceKey: key})
				switch {
				case err == nil:
					a = &sv.Address
				case !errors.Is(err, servers.ErrNotFound):
					return nil, err
				}
				addrs[r.Name] = a
			}
			if a != nil {
				out[r] = *a
			}
		}
	}
	return out, nil
}

// credentialField is the value of a dbservice's reference field.
func credentialField(c dbservice.Credentials, field string) string {
	switch field {
	case "host":
		return c.Host
	case "port":
		return c.Port
	case "name":
		return c.Name
	case "user":
		return c.User
	case "password":
		return c.Password
	case "jdbc_url":
		return c.JDBCURL
	}
	return ""
}

// wiring is a server's (or proxy's) spec with its references resolved.
type wiring struct {
	// server is the spec's server with the values written into its
	// files; never stored, only written into the server's root.
	server spec.Server
	// private are the paths of the files holding a password (written
	// 0600).
	private map[string]bool
	// digest is an HMAC of the files written with values ("" when the
	// server has no reference), what its applied state records instead
	// of them: a value that changes changes it, and so the plan.
	digest string
	// missing are the references no value was given for; the digest then
	// stands for values not known yet (a plan made before their objects
	// are).
	missing []spec.Ref
}

// wire resolves want's references with vals, the digest keyed by key.
func wire(want spec.Server, vals map[spec.Ref]string, key []byte) wiring {
	w := wiring{server: want, private: map[string]bool{}}
	refs := want.References()
	if len(refs) == 0 {
		return w
	}
	value := func(r spec.Ref) string {
		if v, ok := vals[r]; ok {
			return v
		}
		// Not known yet: the digest says so, and differs from any
		// recorded one.
		return "\x00unresolved " + r.String()
	}
	w.server.Env = maps.Clone(want.Env)
	env := map[string]string{} // the variables with references, as written
	for k, v := range want.Env {
		if len(spec.Refs(v)) > 0 {
			w.server.Env[k] = spec.Expand(v, value)
			env[k] = w.server.Env[k]
		}
	}
	w.server.Files = slices.Clone(want.Files)
	var wired []spec.File // the files with references, as written
	for i, f := range want.Files {
		fr := spec.Refs(f.Content)
		if len(fr) == 0 {
			continue
		}
		if slices.ContainsFunc(fr, spec.Ref.Password) {
			w.private[f.Path] = true
		}
		w.server.Files[i].Content = spec.Expand(f.Content, value)
		wired = append(wired, w.server.Files[i])
	}
	for _, r := range refs {
		if _, ok := vals[r]; !ok {
			w.missing = append(w.missing, r)
		}
	}
	raw, _ := json.Marshal(struct {
		Env   map[string]string `json:"env,omitempty"`
		Files []spec.File       `json:"files"`
	}{env, wired})
	mac := hmac.New(sha256.New, key)
	mac.Write(raw)
	w.digest = "hmac-sha256:" + hex.EncodeToString(mac.Sum(nil))
	return w
}

// digests are the references' digests of sp's servers and proxies that
// have references, by key, as a plan made now sees them: the objects the
// plan makes anew (fresh) are not known yet, so a resource referencing
// one is updated after it.
func (e *Executor) digests(ctx context.Context, teamID, configurationID string, sp *spec.Spec, fresh map[string]bool) (map[string]string, error) {
	wants := map[string]spec.Server{}
	for name, sv := range sp.Servers {
		wants[plan.Key(plan.Server, name)] = sv
	}
	for name, px := range sp.Proxies {
		wants[plan.Key(plan.Proxy, name)] = px.Server
	}
	var refs []spec.Ref
	for _, key := range slices.Sorted(maps.Keys(wants)) {
		refs = append(refs, wants[key].References()...)
	}
	if len(refs) == 0 {
		return nil, nil
	}
	vals, err := e.values(ctx, teamID, configurationID, refs, fresh)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for key, want := range wants {
		if d := wire(want, vals, e.opts.DigestKey).digest; d != "" {
			out[key] = d
		}
	}
	return out, nil
}

// wire resolves the references of want, a server's spec (or a part of
// it: its env alone before the server is made), as they are now. A
// reference to an object that does not exist fails the step (internal:
// the plan orders every object before what references it), one to a
// secret the team has not fails it (validation), and so does a secret
// that cannot be a variable's value.
func (x *exec) wire(ctx context.Context, want spec.Server) (wiring, *stepError) {
	refs := want.References()
	if len(refs) == 0 {
		return wire(want, nil, nil), nil
	}
	vals, err := x.e.values(ctx, x.run.TeamID, x.run.ConfigurationID, refs, nil)
	if err != nil {
		return wiring{}, classify(err)
	}
	w := wire(want, vals, x.e.opts.DigestKey)
	for _, r := range w.missing {
		if r.Kind == spec.RefSecret {
			return wiring{}, fail(runs.FailValidation, "%s names no secret of the team; store it with PUT /secrets/%s (nothing was written)", r, r.Name)
		}
	}
	if len(w.missing) > 0 {
		names := make([]string, len(w.missing))
		for i, r := range w.missing {
			names[i] = r.String()
		}
		return wiring{}, fail(runs.FailInternal, "%s: what it references does not exist (yet); nothing was written", strings.Join(names, ", "))
	}
	for _, k := range slices.Sorted(maps.Keys(want.Env)) {
		if v := w.server.Env[k]; v != want.Env[k] && (strings.ContainsAny(v, "\x00\r\n") || len(v) > maxEnvValue) {
			return wiring{}, fail(runs.FailValidation, "env.%s: a variable's value is one line of at most %d bytes, and the secrets it references make it another (nothing was written)", k, maxEnvValue)
		}
	}
	return w, nil
}

// maxEnvValue is the most bytes of a variable's value (as a spec's).
const maxEnvValue = 4096

// appliedOf is desired with the digest of the values w wrote: what the
// step records as applied.
func appliedOf(desired json.RawMessage, w wiring) (json.RawMessage, *stepError) {
	if w.digest == "" {
		return desired, nil
	}
	applied, err := plan.WithReferences(desired, w.digest)
	if err != nil {
		return nil, fail(runs.FailInternal, "the desired state cannot be read: %v", err)
	}
	return applied, nil
}

// unknownSecrets is the sentence a run fails with at planning when sp
// references a secret the team has not (the first, by where it is), ""
// when every one exists. A secret is checked here, not when the spec is
// saved: it may be stored after the spec, and deleted after it too.
func (e *Executor) unknownSecrets(ctx context.Context, teamID string, sp *spec.Spec) (string, runs.FailureClass, error) {
	type use struct {
		where string
		ref   spec.Ref
	}
	var uses []use
	var names []string
	look := func(at string, sv spec.Server) {
		for _, k := range slices.Sorted(maps.Keys(sv.Env)) {
			for _, r := range spec.Refs(sv.Env[k]) {
				uses = append(uses, use{at + ".env." + k, r})
			}
		}
		for _, f := range sv.Files {
			for _, r := range spec.Refs(f.Content) {
				uses = append(uses, use{at + ".files (" + f.Path + ")", r})
			}
		}
	}
	for _, name := range slices.Sorted(maps.Keys(sp.Servers)) {
		look("servers."+name, sp.Servers[name])
	}
	for _, name := range slices.Sorted(maps.Keys(sp.Proxies)) {
		look("proxies."+name, sp.Proxies[name].Server)
	}
	uses = slices.DeleteFunc(uses, func(u use) bool { return u.ref.Kind != spec.RefSecret })
	for _, u := range uses {
		if !slices.Contains(names, u.ref.Name) {
			names = append(names, u.ref.Name)
		}
	}
	if len(names) == 0 {
		return "", "", nil
	}
	if e.opts.TeamSecrets == nil {
		return "This Kiln process was started without team secrets: the spec's ${secrets.…} cannot be applied; nothing was changed.", runs.FailInternal, nil
	}
	have, err := e.opts.TeamSecrets.Values(ctx, teamID, names)
	if err != nil {
		return "", "", err
	}
	for _, u := range uses {
		if _, ok := have[u.ref.Name]; !ok {
			return fmt.Sprintf("%s: %s names no secret of the team; store it with PUT /secrets/%s (a run reads it when it applies the spec). Nothing was changed.", u.where, u.ref, u.ref.Name), runs.FailValidation, nil
		}
	}
	return "", "", nil
}
