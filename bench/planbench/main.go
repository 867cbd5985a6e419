// Command planbench times validating and planning a large deployment spec
// (issue 12's target: a 1,000-resource spec validated and planned in under
// 100 ms): it generates a spec of SERVERS servers, PROXIES proxies (each
// fronting 8 of the servers) and DBS dbservices (each attached to 4), then
// times spec.Parse (parse, check every rule, normalize) plus plan.Make
// against an empty live state (all creates) and against the live state of
// that same spec (all noops), RUNS times each, and prints the medians.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/kilnhq/kiln/internal/catalog"
	"github.com/kilnhq/kiln/internal/deploy/plan"
	"github.com/kilnhq/kiln/internal/deploy/spec"
)

func main() {
	servers := flag.Int("servers", 800, "servers in the spec")
	proxies := flag.Int("proxies", 100, "proxies, each with 8 backends")
	dbs := flag.Int("dbs", 100, "dbservices, each attached to 4 servers")
	runs := flag.Int("runs", 21, "timed runs of each case")
	flag.Parse()
	cat, err := catalog.Load(false)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	var b strings.Builder
	b.WriteString("version: 1\nservers:\n")
	for i := range *servers {
		fmt.Fprintf(&b, "  s%d:\n    software: paper\n    memory: 2G\n    disk: 10G\n    env: {MOTD: \"server %d\"}\n    properties: {pvp: \"false\"}\n", i, i)
	}
	b.WriteString("proxies:\n")
	for i := range *proxies {
		var names []string
		for j := range 8 {
			names = append(names, fmt.Sprintf("s%d", (i*8+j)%*servers))
		}
		fmt.Fprintf(&b, "  p%d:\n    software: velocity\n    memory: 1G\n    servers: [%s]\n    try: [%s]\n    forwarding: modern\n",
			i, strings.Join(names, ", "), names[0])
	}
	b.WriteString("dbservices:\n")
	for i := range *dbs {
		var names []string
		for j := range 4 {
			names = append(names, fmt.Sprintf("s%d", (i*4+j)%*servers))
		}
		fmt.Fprintf(&b, "  d%d:\n    engine: postgres\n    attach: [%s]\n", i, strings.Join(names, ", "))
	}
	yaml := []byte(b.String())
	sp, err := spec.Parse(yaml, cat)
	if err != nil {
		fmt.Fprintln(os.Stderr, "generated spec refused:", err)
		os.Exit(2)
	}
	first, err := plan.Make(sp, nil, nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	var live []plan.Live
	for _, st := range first.Steps {
		live = append(live, plan.Live{Key: st.Key, Applied: json.RawMessage(st.Desired)})
	}
	timeIt := func(withLive bool) time.Duration {
		var ds []time.Duration
		for range *runs {
			t0 := time.Now()
			sp, err := spec.Parse(yaml, cat)
			if err != nil {
				panic(err)
			}
			l := live
			if !withLive {
				l = nil
			}
			if _, err := plan.Make(sp, l, nil); err != nil {
				panic(err)
			}
			ds = append(ds, time.Since(t0))
		}
		slices.Sort(ds)
		return ds[len(ds)/2]
	}
	fmt.Printf("PLANBENCH resources=%d yaml_bytes=%d create_median_ms=%.1f noop_median_ms=%.1f\n",
		sp.ResourceCount(), len(yaml), float64(timeIt(false).Microseconds())/1000, float64(timeIt(true).Microseconds())/1000)
}
