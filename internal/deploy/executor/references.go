package executor

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
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

// values reads what refs resolve to now, for the configuration's objects:
// a dbservice's credentials, a server's address. A reference to an object
// not made yet, or to one the plan makes anew (fresh, by key), is left
// out. The error is one reading them.
func (e *Executor) values(ctx context.Context, teamID, configurationID string, refs []spec.Ref, fresh map[string]bool) (map[spec.Ref]string, error) {
	out := map[spec.Ref]string{}
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
		w.server.Files[i].Content = spec.Expand(f.Content, func(r spec.Ref) string {
			if v, ok := vals[r]; ok {
				return v
			}
			// Not known yet: the digest says so, and differs from any
			// recorded one.
			return "\x00unresolved " + r.String()
		})
		wired = append(wired, w.server.Files[i])
	}
	for _, r := range refs {
		if _, ok := vals[r]; !ok {
			w.missing = append(w.missing, r)
		}
	}
	raw, _ := json.Marshal(struct {
		Files []spec.File `json:"files"`
	}{wired})
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

// wire resolves the references of want, the server sv's spec, as they
// are now, for writing its files; applied is desired with the digest of
// the values written (what the step records). A reference whose object
// does not exist fails the step: the plan orders every object before the
// ones referencing it.
func (x *exec) wire(ctx context.Context, want spec.Server, desired json.RawMessage) (wiring, json.RawMessage, *stepError) {
	refs := want.References()
	if len(refs) == 0 {
		return wire(want, nil, nil), desired, nil
	}
	vals, err := x.e.values(ctx, x.run.TeamID, x.run.ConfigurationID, refs, nil)
	if err != nil {
		return wiring{}, nil, classify(err)
	}
	w := wire(want, vals, x.e.opts.DigestKey)
	if len(w.missing) > 0 {
		names := make([]string, len(w.missing))
		for i, r := range w.missing {
			names[i] = r.String()
		}
		return wiring{}, nil, fail(runs.FailInternal, "%s: what it references does not exist (yet); nothing was written", strings.Join(names, ", "))
	}
	applied, err := plan.WithReferences(desired, w.digest)
	if err != nil {
		return wiring{}, nil, fail(runs.FailInternal, "the desired state cannot be read: %v", err)
	}
	return w, applied, nil
}
