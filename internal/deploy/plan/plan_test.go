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
	p, err := Make(parse(t, yaml), nil)
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
	p, err := Make(parse(t, network), nil)
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
	p, err := Make(parse(t, network), live)
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
	if p, err := Make(parse(t, network), live2); err != nil || p.Summary.Noop != 4 {
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
	p, err = Make(parse(t, changed), live)
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
	p, err = Make(parse(t, "version: 1\nservers:\n  lobby: {software: paper, memory: 2G}\n"), live)
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
		if _, err := Make(s, live); err == nil {
			t.Errorf("Make accepted live %+v", live)
		}
	}
}

func TestHash(t *testing.T) {
	s := parse(t, network)
	a, _ := Make(s, nil)
	b, _ := Make(s, nil)
	ha, err := a.Hash()
	hb, _ := b.Hash()
	if err != nil || ha != hb || !strings.HasPrefix(ha, "sha256:") {
		t.Fatalf("Hash = %q, %q, %v", ha, hb, err)
	}
	c, _ := Make(s, applied(t, network))
	if hc, _ := c.Hash(); hc == ha {
		t.Error("a plan of noops hashes like a plan of creates")
	}
}
