package plan

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/kilnhq/kiln/internal/catalog"
	"github.com/kilnhq/kiln/internal/deploy/spec"
)

const network = `version: 1
servers:
  lobby: {software: paper, memory: 2G}
  survival: {software: paper, memory: 4G}
proxies:
  edge: {software: velocity, memory: 1G, servers: [lobby, survival]}
dbservices:
  stats: {engine: postgres, attach: [lobby]}
`

func parse(t *testing.T, yaml string) *spec.Spec {
	t.Helper()
	cat, err := catalog.Load(false)
	if err != nil {
		t.Fatal(err)
	}
	s, err := spec.Parse([]byte(yaml), cat)
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return s
}

// applied is what a run would have recorded after applying yaml.
func applied(t *testing.T, yaml string) []Live {
	t.Helper()
	p, err := Make(parse(t, yaml), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	var out []Live
	for _, st := range p.Steps {
		out = append(out, Live{Key: st.Key, Applied: st.Desired})
	}
	return out
}

// describe writes a plan as "tier: key action [changes]" lines.
func describe(p Plan) []string {
	var out []string
	for ti, tier := range p.Tiers {
		for _, i := range tier {
			st := p.Steps[i]
			line := string(rune('0'+ti)) + ": " + st.Key + " " + string(st.Action)
			if len(st.Changes) > 0 {
				line += " " + strings.Join(st.Changes, ",")
			}
			out = append(out, line)
		}
	}
	for _, st := range p.Steps {
		if st.Action == Noop {
			out = append(out, "-: "+st.Key+" noop")
		}
	}
	return out
}

func wantPlan(t *testing.T, p Plan, want []string) {
	t.Helper()
	if got := describe(p); !slices.Equal(got, want) {
		t.Fatalf("plan:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestMakeFromNothing(t *testing.T) {
	p, err := Make(parse(t, network), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"0: dbservice/stats create",
		"1: server/lobby create",
		"1: server/survival create",
		"2: proxy/edge create",
	}
	wantPlan(t, p, want)
	if p.Summary != (Summary{Create: 4}) {
		t.Errorf("Summary = %+v", p.Summary)
	}
	var lobby map[string]any
	if err := json.Unmarshal(p.Steps[1].Desired, &lobby); err != nil || lobby["memory"] != float64(2<<30) || p.Steps[1].Before != nil {
		t.Errorf("lobby's desired = %s (%v), before %s", p.Steps[1].Desired, err, p.Steps[1].Before)
	}
}

func TestMakeAgainstLive(t *testing.T) {
	live := applied(t, network)
	p, err := Make(parse(t, network), live, nil)
	if err != nil {
		t.Fatal(err)
	}
	if p.Summary != (Summary{Noop: 4}) || len(p.Tiers) != 0 {
		t.Fatalf("the same spec again: %+v, tiers %v", p.Summary, p.Tiers)
	}

	// A stored state in another key order and spelling is still equal.
	var m map[string]any
	_ = json.Unmarshal(live[1].Applied, &m)
	pretty, _ := json.MarshalIndent(m, "", "   ")
	live2 := slices.Clone(live)
	live2[1].Applied = pretty
	if p, err := Make(parse(t, network), live2, nil); err != nil || p.Summary.Noop != 4 {
		t.Fatalf("an equal state written differently: %+v, %v", p.Summary, err)
	}

	changed := `version: 1
servers:
  lobby: {software: purpur, memory: 2G}
  survival: {software: paper, memory: 8G, cpu: 200}
  creative: {software: paper, memory: 2G}
proxies:
  edge: {software: velocity, memory: 1G, servers: [lobby, creative]}
dbservices:
  stats: {engine: mariadb, attach: [lobby]}
`
	p, err = Make(parse(t, changed), live, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"0: dbservice/stats replace engine",
		"1: server/creative create",
		"1: server/lobby replace software",
		"1: server/survival update cpu,memory",
		"2: proxy/edge update servers",
	}
	wantPlan(t, p, want)
	if p.Summary != (Summary{Create: 1, Update: 2, Replace: 2}) {
		t.Errorf("Summary = %+v", p.Summary)
	}

	// Removed from the spec: deleted after everything else, proxies
	// first, then servers, then databases. lobby loses its database
	// (stats was attached to it): an update, before the deletes.
	p, err = Make(parse(t, "version: 1\nservers:\n  lobby: {software: paper, memory: 2G}\n"), live, nil)
	if err != nil {
		t.Fatal(err)
	}
	want = []string{
		"0: server/lobby update databases",
		"1: proxy/edge delete",
		"2: server/survival delete",
		"3: dbservice/stats delete",
	}
	wantPlan(t, p, want)
	for _, st := range p.Steps {
		if st.Action == Delete && (st.Desired != nil || st.Before == nil) {
			t.Errorf("delete of %s: desired %s, before %s", st.Key, st.Desired, st.Before)
		}
	}
}

func TestMakeRefusesBadLive(t *testing.T) {
	s := parse(t, network)
	for _, live := range [][]Live{
		{{Key: "vm/lobby", Applied: json.RawMessage(`{}`)}},
		{{Key: "server/", Applied: json.RawMessage(`{}`)}},
		{{Key: "server/lobby", Applied: json.RawMessage(`{}`)}, {Key: "server/lobby", Applied: json.RawMessage(`{}`)}},
		{{Key: "server/lobby", Applied: json.RawMessage(`not json`)}},
	} {
		if _, err := Make(s, live, nil); err == nil {
			t.Errorf("Make accepted live %+v", live)
		}
	}
}

func TestHash(t *testing.T) {
	s := parse(t, network)
	a, _ := Make(s, nil, nil)
	b, _ := Make(s, nil, nil)
	ha, err := a.Hash()
	hb, _ := b.Hash()
	if err != nil || ha != hb || !strings.HasPrefix(ha, "sha256:") {
		t.Fatalf("Hash = %q, %q, %v", ha, hb, err)
	}
	c, _ := Make(s, applied(t, network), nil)
	if hc, _ := c.Hash(); hc == ha {
		t.Error("a plan of noops hashes like a plan of creates")
	}
}

// TestMakeReferences: a server or proxy whose files reference values
// carries their digest in its desired state (a resource without one keeps
// the JSON it had, so nothing applied before is planned as changed); a
// digest that differs updates it ("references"), and a server runs in a
// tier after the servers whose address it writes.
func TestMakeReferences(t *testing.T) {
	const wired = `version: 1
servers:
  lobby: {software: paper, memory: 2G, files: [{path: a.yml, content: "db: ${dbservices.stats.password}"}]}
  hub: {software: paper, memory: 2G, files: [{path: a.yml, content: "lobby: ${servers.lobby.address} me: ${servers.hub.address}"}]}
  top: {software: paper, memory: 2G, files: [{path: a.yml, content: "hub: ${servers.hub.address}"}]}
  plain: {software: paper, memory: 2G}
proxies:
  edge: {software: velocity, memory: 1G, servers: [lobby], files: [{path: m.txt, content: "${servers.top.address}"}]}
dbservices:
  stats: {engine: postgres}
`
	s := parse(t, wired)
	digests := map[string]string{"server/lobby": "hmac-sha256:1", "server/hub": "hmac-sha256:2", "server/top": "hmac-sha256:3", "proxy/edge": "hmac-sha256:4"}
	p, err := Make(s, nil, digests)
	if err != nil {
		t.Fatal(err)
	}
	wantPlan(t, p, []string{
		"0: dbservice/stats create",
		"1: server/lobby create",
		"1: server/plain create",
		"2: server/hub create",
		"3: server/top create",
		"4: proxy/edge create",
	})
	for _, st := range p.Steps {
		var m map[string]any
		_ = json.Unmarshal(st.Desired, &m)
		if want, has := digests[st.Key]; m["references"] != nil != has || has && m["references"] != want {
			t.Errorf("%s's desired state = %s, want references %q", st.Key, st.Desired, want)
		}
	}
	plain, _ := Make(parse(t, "version: 1\nservers:\n  plain: {software: paper, memory: 2G}\n"), nil, nil)
	if string(p.Steps[3].Desired) != string(plain.Steps[0].Desired) {
		t.Errorf("plain's desired state = %s, want %s as without references", p.Steps[3].Desired, plain.Steps[0].Desired)
	}

	var live []Live
	for _, st := range p.Steps {
		live = append(live, Live{Key: st.Key, Applied: st.Desired})
	}
	again, err := Make(s, live, digests)
	if err != nil || again.Summary != (Summary{Noop: 6}) {
		t.Fatalf("the same values again: %+v, %v; want 6 unchanged", again.Summary, err)
	}
	// The dbservice's password changed: lobby's digest did.
	digests["server/lobby"] = "hmac-sha256:5"
	changed, err := Make(s, live, digests)
	if err != nil {
		t.Fatal(err)
	}
	wantPlan(t, changed, []string{"0: server/lobby update references",
		"-: dbservice/stats noop", "-: server/hub noop", "-: server/plain noop", "-: server/top noop", "-: proxy/edge noop"})

	// What a step records once it knows the values.
	rec, err := WithReferences(changed.Steps[2].Desired, "hmac-sha256:6")
	if err != nil {
		t.Fatal(err)
	}
	want, _ := WithReferences(json.RawMessage(strings.Replace(string(changed.Steps[2].Desired), "hmac-sha256:5", "hmac-sha256:6", 1)), "hmac-sha256:6")
	if string(rec) != string(want) || !strings.Contains(string(rec), `"references":"hmac-sha256:6"`) {
		t.Errorf("WithReferences = %s", rec)
	}
	if none, _ := WithReferences(changed.Steps[2].Desired, ""); strings.Contains(string(none), "references") {
		t.Errorf("WithReferences(\"\") = %s, want no digest", none)
	}
}
