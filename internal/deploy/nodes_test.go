package deploy

import (
	"slices"
	"testing"
	"time"

	"github.com/kilnhq/kiln/internal/cluster"
	"github.com/kilnhq/kiln/internal/nodes"
	"github.com/kilnhq/kiln/internal/store/storetest"
)

// TestSpecNodes: a spec may name only nodes the cluster has (an issue at
// the resource's node otherwise), a proxy's port is checked against the
// range of the node it names, and two proxies on different nodes may
// ask for the same port.
func TestSpecNodes(t *testing.T) {
	db := storetest.SQLite(t)
	s := newService(t, db)
	ctx := t.Context()
	ns := nodes.New(db, time.Now)
	for _, n := range []string{"game-1", "game-2"} {
		if err := ns.RegisterLocal(ctx, n, cluster.Hello{PortFirst: 30000, PortLast: 30009, Runtime: "process"}); err != nil {
			t.Fatal(err)
		}
	}
	const lobby = "version: 1\nservers:\n  lobby: {software: paper, memory: 1G, node: game-1}\n"
	if _, err := s.Create(ctx, "team_a", "ok", "", lobby+
		"proxies:\n  a: {software: velocity, memory: 1G, port: 30000, servers: [lobby], node: game-1}\n"+
		"  b: {software: velocity, memory: 1G, port: 30000, servers: [lobby], node: game-2}\n"); err != nil {
		t.Errorf("two proxies asking for one port on two nodes: %v", err)
	}
	for _, c := range []struct {
		name, yaml string
		want       []string
	}{
		{"unknown nodes", "version: 1\nservers:\n  lobby: {software: paper, memory: 1G, node: game-9}\n" +
			"proxies:\n  edge: {software: velocity, memory: 1G, servers: [lobby], node: nope}\n",
			[]string{`proxies.edge.node: no node is named "nope" (kiln admin node list shows the cluster's nodes)`,
				`servers.lobby.node: no node is named "game-9" (kiln admin node list shows the cluster's nodes)`}},
		{"outside the named node's range", lobby + "proxies:\n  edge: {software: velocity, memory: 1G, port: 25600, servers: [lobby], node: game-1}\n",
			[]string{"proxies.edge.port: must be within the node's port range 30000-30009"}},
		{"one port twice on one node", lobby +
			"proxies:\n  a: {software: velocity, memory: 1G, port: 30001, servers: [lobby], node: game-2}\n" +
			"  b: {software: velocity, memory: 1G, port: 30001, servers: [lobby], node: game-2}\n",
			[]string{"proxies.b.port: 30001 is already asked for by proxy a; each proxy needs a port of its own"}},
	} {
		if _, err := s.Create(ctx, "team_a", c.name, "", c.yaml); !slices.Equal(issuesOf(err), c.want) {
			t.Errorf("%s: Create = %v\nwant the issues %q", c.name, err, c.want)
		}
	}
	// The local node's range still checks a proxy that names no node.
	if _, err := s.Create(ctx, "team_a", "local", "", "version: 1\nservers:\n  lobby: {software: paper, memory: 1G}\n"+
		"proxies:\n  edge: {software: velocity, memory: 1G, port: 30000, servers: [lobby]}\n"); !slices.Equal(issuesOf(err),
		[]string{"proxies.edge.port: must be within the node's port range 25565-25664"}) {
		t.Errorf("a proxy naming no node, outside the local range: %v", err)
	}
}
