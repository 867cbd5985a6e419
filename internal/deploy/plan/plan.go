package plan

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/gowebpki/jcs"

	"github.com/kilnhq/kiln/internal/deploy/spec"
)

// Kind is a resource kind of a spec.
type Kind string

// Kinds, in the order their creations and updates run (deletions run in
// the reverse order).
const (
	DBService Kind = "dbservice"
	Server    Kind = "server"
	Proxy     Kind = "proxy"
)

var kindOrder = []Kind{DBService, Server, Proxy}

// Action is what a run does to one resource (deployment-spec.md §3).
type Action string

// Actions.
const (
	Create  Action = "create"
	Update  Action = "update"
	Replace Action = "replace"
	Delete  Action = "delete"
	Noop    Action = "noop"
)

// Key is a resource's key: "<kind>/<name>" (server/lobby, proxy/edge,
// dbservice/stats).
func Key(k Kind, name string) string { return string(k) + "/" + name }

// ParseKey splits a key into its kind and name.
func ParseKey(key string) (Kind, string, error) {
	k, name, ok := strings.Cut(key, "/")
	if !ok || !slices.Contains(kindOrder, Kind(k)) || name == "" {
		return "", "", fmt.Errorf("plan: bad resource key %q", key)
	}
	return Kind(k), name, nil
}

// Live is one object a configuration's runs made and that still exists:
// its key and the desired state the last run that created or changed it
// applied (the `after` of that run's resource).
type Live struct {
	Key     string
	Applied json.RawMessage
}

// Step is one resource of a plan.
type Step struct {
	Key    string
	Kind   Kind
	Name   string
	Action Action
	// Desired is the resource as the spec wants it (canonical JSON of its
	// part of spec.Spec); nil for a delete.
	Desired json.RawMessage
	// Before is what was applied to it last; nil for a create.
	Before json.RawMessage
	// Changes names the fields an update changes, sorted ("cpu", "env").
	Changes []string
}

// Summary counts a plan's actions.
type Summary struct {
	Create, Update, Replace, Delete, Noop int
}

// Plan is the steps of a run in execution order, grouped in tiers: the
// steps of one tier are independent and may run in parallel; a tier runs
// when the one before has finished.
type Plan struct {
	Steps   []Step
	Tiers   [][]int // indexes into Steps
	Summary Summary
}

// Make compares a version's spec with the configuration's live objects and
// gives every key one action: create (in the spec, not live), replace (the
// software of a server or proxy, or the engine of a dbservice, changed),
// update (anything else changed), noop (equal), delete (live, not in the
// spec). Creations, replacements and updates run first, dbservices then
// servers then proxies; deletions after them, proxies then servers then
// dbservices. Servers whose files reference another server's address run
// in a tier after it (a server referencing none in the first, and so on).
// Noops are steps too (a run reports every key), in no tier. references
// maps a server's or proxy's key to the digest of its references' values
// (nil: none has references), part of its desired state.
func Make(s *spec.Spec, live []Live, references map[string]string) (Plan, error) {
	applied := map[string]json.RawMessage{}
	for _, l := range live {
		if _, _, err := ParseKey(l.Key); err != nil {
			return Plan{}, err
		}
		if _, dup := applied[l.Key]; dup {
			return Plan{}, fmt.Errorf("plan: two live objects for %s", l.Key)
		}
		applied[l.Key] = l.Applied
	}
	desired, err := desiredOf(s, references)
	if err != nil {
		return Plan{}, err
	}
	levels, err := addressLevels(s)
	if err != nil {
		return Plan{}, err
	}
	var p Plan
	tiers := map[tierOf][]int{}
	for _, k := range kindOrder {
		for _, name := range slices.Sorted(maps.Keys(desired[k])) {
			key := Key(k, name)
			st := Step{Key: key, Kind: k, Name: name, Desired: desired[k][name]}
			before, isLive := applied[key]
			switch {
			case !isLive:
				st.Action = Create
			default:
				st.Before = before
				st.Action, st.Changes, err = compare(k, before, st.Desired)
				if err != nil {
					return Plan{}, fmt.Errorf("plan %s: %w", key, err)
				}
			}
			p.add(st, tierOf{k, levels[name]}, tiers)
		}
	}
	deletes := map[Kind][]string{}
	for key := range applied {
		k, name, _ := ParseKey(key)
		if _, wanted := desired[k][name]; !wanted {
			deletes[k] = append(deletes[k], name)
		}
	}
	for _, t := range slices.SortedFunc(maps.Keys(tiers), tierOf.compare) {
		p.Tiers = append(p.Tiers, tiers[t])
	}
	for _, k := range slices.Backward(kindOrder) {
		var tier []int
		slices.Sort(deletes[k])
		for _, name := range deletes[k] {
			key := Key(k, name)
			tier = append(tier, len(p.Steps))
			p.Steps = append(p.Steps, Step{Key: key, Kind: k, Name: name, Action: Delete, Before: applied[key]})
			p.Summary.Delete++
		}
		if len(tier) > 0 {
			p.Tiers = append(p.Tiers, tier)
		}
	}
	return p, nil
}

// tierOf is the tier a creating or changing step joins: its kind's, and
// for a server the level of its references to other servers' addresses.
type tierOf struct {
	kind  Kind
	level int
}

func (t tierOf) compare(u tierOf) int {
	if c := slices.Index(kindOrder, t.kind) - slices.Index(kindOrder, u.kind); c != 0 {
		return c
	}
	return t.level - u.level
}

// addressLevels gives each server of s that references another server's
// address (in its files) one level more than the highest of those: a
// server runs after the servers whose address it writes. spec.Parse
// refuses a circle; one here is an error.
func addressLevels(s *spec.Spec) (map[string]int, error) {
	levels := map[string]int{}
	const visiting = -1
	var level func(name string) (int, error)
	level = func(name string) (int, error) {
		switch l, seen := levels[name]; {
		case seen && l == visiting:
			return 0, fmt.Errorf("plan: the servers' references to each other's address go round in a circle through %s", name)
		case seen:
			return l, nil
		}
		levels[name] = visiting
		out := 0
		for _, r := range s.Servers[name].References() {
			if _, isServer := s.Servers[r.Name]; r.Kind != spec.RefServer || r.Name == name || !isServer {
				continue
			}
			l, err := level(r.Name)
			if err != nil {
				return 0, err
			}
			out = max(out, l+1)
		}
		levels[name] = out
		return out, nil
	}
	for _, name := range slices.Sorted(maps.Keys(s.Servers)) {
		if _, err := level(name); err != nil {
			return nil, err
		}
	}
	return levels, nil
}

// add appends a creating, changing or noop step; all but noops join
// their tier.
func (p *Plan) add(st Step, t tierOf, tiers map[tierOf][]int) {
	switch st.Action {
	case Create:
		p.Summary.Create++
	case Update:
		p.Summary.Update++
	case Replace:
		p.Summary.Replace++
	case Noop:
		p.Summary.Noop++
		p.Steps = append(p.Steps, st)
		return
	}
	tiers[t] = append(tiers[t], len(p.Steps))
	p.Steps = append(p.Steps, st)
}

// ServerState is a server's desired (and applied) state: the spec's
// server, the dbservices attached to it, by name, and the digest of its
// references' values (each omitted when none, so servers without them
// keep the JSON of the spec's server).
type ServerState struct {
	spec.Server
	Databases  []string `json:"databases,omitempty"`
	References string   `json:"references,omitempty"`
}

// ProxyState is a proxy's desired (and applied) state: the spec's proxy
// and the digest of its references' values (omitted when none).
type ProxyState struct {
	spec.Proxy
	References string `json:"references,omitempty"`
}

// desiredOf is every resource of the spec as canonical JSON, by kind and
// name.
func desiredOf(s *spec.Spec, references map[string]string) (map[Kind]map[string]json.RawMessage, error) {
	out := map[Kind]map[string]json.RawMessage{DBService: {}, Server: {}, Proxy: {}}
	put := func(k Kind, name string, v any) error {
		raw, err := canonical(v)
		out[k][name] = raw
		return err
	}
	// A server's desired state names the dbservices attached to it: an
	// attachment made or undone changes the server (its environment), so
	// it is updated — and restarted if it runs — after the dbservices.
	databases := map[string][]string{}
	for _, name := range slices.Sorted(maps.Keys(s.DBServices)) {
		for _, srv := range s.DBServices[name].Attach {
			databases[srv] = append(databases[srv], name)
		}
	}
	for name, v := range s.Servers {
		if err := put(Server, name, ServerState{Server: v, Databases: databases[name], References: references[Key(Server, name)]}); err != nil {
			return nil, err
		}
	}
	for name, v := range s.Proxies {
		if err := put(Proxy, name, ProxyState{Proxy: v, References: references[Key(Proxy, name)]}); err != nil {
			return nil, err
		}
	}
	for name, v := range s.DBServices {
		if err := put(DBService, name, v); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func canonical(v any) (json.RawMessage, error) {
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return jcs.Transform(raw)
}

// WithReferences is a desired state with the digest of its references'
// values set to digest ("" removes it), canonical: what a step records
// once it knows the values it wrote.
func WithReferences(desired json.RawMessage, digest string) (json.RawMessage, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(desired, &m); err != nil {
		return nil, fmt.Errorf("plan: the desired state is not an object: %w", err)
	}
	delete(m, "references")
	if digest != "" {
		raw, _ := json.Marshal(digest)
		m["references"] = raw
	}
	return canonical(m)
}

// replacing names the field whose change replaces a resource of each kind.
var replacing = map[Kind]string{Server: "software", Proxy: "software", DBService: "engine"}

// compare decides between noop, update and replace for a live resource.
func compare(k Kind, before, desired json.RawMessage) (Action, []string, error) {
	canonBefore, err := jcs.Transform(before)
	if err != nil {
		return "", nil, fmt.Errorf("the applied state is not JSON: %w", err)
	}
	if bytes.Equal(canonBefore, desired) {
		return Noop, nil, nil
	}
	var b, d map[string]json.RawMessage
	if err := json.Unmarshal(canonBefore, &b); err != nil {
		return "", nil, fmt.Errorf("the applied state is not an object: %w", err)
	}
	if err := json.Unmarshal(desired, &d); err != nil {
		return "", nil, err
	}
	var changes []string
	for f := range d {
		if !bytes.Equal(b[f], d[f]) {
			changes = append(changes, f)
		}
	}
	for f := range b {
		if _, ok := d[f]; !ok {
			changes = append(changes, f)
		}
	}
	slices.Sort(changes)
	if slices.Contains(changes, replacing[k]) {
		return Replace, changes, nil
	}
	return Update, changes, nil
}

// Hash is "sha256:" and the hex SHA-256 of the plan's keys, actions and
// desired states in order: a run's checkpoint stores it, so a resumed run
// can tell it resumes the same plan.
func (p Plan) Hash() (string, error) {
	type item struct {
		Key     string          `json:"key"`
		Action  Action          `json:"action"`
		Desired json.RawMessage `json:"desired"`
	}
	items := make([]item, len(p.Steps))
	for i, st := range p.Steps {
		items[i] = item{st.Key, st.Action, st.Desired}
	}
	raw, err := canonical(items)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(raw)
	return "sha256:" + hex.EncodeToString(sum[:]), nil
}
