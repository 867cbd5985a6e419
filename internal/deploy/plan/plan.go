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
// dbservices. Noops are steps too (a run reports every key), in no tier.
func Make(s *spec.Spec, live []Live) (Plan, error) {
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
	desired, err := desiredOf(s)
	if err != nil {
		return Plan{}, err
	}
	var p Plan
	tiers := map[Kind][]int{}
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
			p.add(st, tiers)
		}
	}
	deletes := map[Kind][]string{}
	for key := range applied {
		k, name, _ := ParseKey(key)
		if _, wanted := desired[k][name]; !wanted {
			deletes[k] = append(deletes[k], name)
		}
	}
	for _, k := range kindOrder {
		if len(tiers[k]) > 0 {
			p.Tiers = append(p.Tiers, tiers[k])
		}
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

// add appends a creating, changing or noop step; all but noops join the
// tier of their kind.
func (p *Plan) add(st Step, tiers map[Kind][]int) {
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
	tiers[st.Kind] = append(tiers[st.Kind], len(p.Steps))
	p.Steps = append(p.Steps, st)
}

// ServerState is a server's desired (and applied) state: the spec's
// server and the dbservices attached to it, by name (omitted when none,
// so servers without databases keep the JSON of the spec's server).
type ServerState struct {
	spec.Server
	Databases []string `json:"databases,omitempty"`
}

// desiredOf is every resource of the spec as canonical JSON, by kind and
// name.
func desiredOf(s *spec.Spec) (map[Kind]map[string]json.RawMessage, error) {
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
		if err := put(Server, name, ServerState{Server: v, Databases: databases[name]}); err != nil {
			return nil, err
		}
	}
	for name, v := range s.Proxies {
		if err := put(Proxy, name, v); err != nil {
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
