package deploy

import (
	"context"
	"fmt"
	"maps"
	"slices"

	yaml "go.yaml.in/yaml/v4"

	"github.com/kilnhq/kiln/internal/deploy/spec"
	"github.com/kilnhq/kiln/internal/node"
	"github.com/kilnhq/kiln/internal/nodes"
	"github.com/kilnhq/kiln/internal/validate"
)

// proxyPort is what a proxy asks of its node: a public port (0: any),
// on the node it names ("" for the local node).
type proxyPort struct {
	Port int
	Node string
}

// checkPorts adds an issue at proxies.<name>.port for each proxy whose
// requested public port (0: none) is outside its node's game ports (the
// node the proxy names, as known gives its range, or the local node's),
// or asked for on the same node by another proxy of the spec too (the
// first by name keeps it), and reports whether there was none; a zero
// range (a node that has not said its ports yet) checks nothing.
func (s *Service) checkPorts(c *validate.Collector, ports map[string]proxyPort, known map[string]node.PortRange) bool {
	ok := true
	type onNode struct {
		node string
		port int
	}
	asked := map[onNode]string{} // port of a node → the first proxy (by name) asking for it
	for _, name := range slices.Sorted(maps.Keys(ports)) {
		pp := ports[name]
		r := s.ports
		if pp.Node != "" {
			r = known[pp.Node]
		}
		p, at := pp.Port, onNode{pp.Node, pp.Port}
		switch {
		case p == 0 || r == (node.PortRange{}):
		case p < r.First || p > r.Last:
			c.Add(validate.Join("proxies", name, "port"), "must be within the node's port range %d-%d", r.First, r.Last)
			ok = false
		case asked[at] != "":
			c.Add(validate.Join("proxies", name, "port"), "%d is already asked for by proxy %s; each proxy needs a port of its own", p, asked[at])
			ok = false
		default:
			asked[at] = name
		}
	}
	return ok
}

// checkNodes adds an issue at <kind>.<name>.node for each server or proxy
// of sp that names a node the cluster does not have, and reports whether
// there was none, with the game ports of the cluster's nodes (nil when sp
// names no node: nothing is read).
func (s *Service) checkNodes(ctx context.Context, c *validate.Collector, sp *spec.Spec) (map[string]node.PortRange, bool, error) {
	named := map[string]string{} // path → node
	for name, sv := range sp.Servers {
		if sv.Node != "" {
			named[validate.Join("servers", name, "node")] = sv.Node
		}
	}
	for name, px := range sp.Proxies {
		if px.Node != "" {
			named[validate.Join("proxies", name, "node")] = px.Node
		}
	}
	if len(named) == 0 {
		return nil, true, nil
	}
	known, err := nodes.Known(ctx, s.db)
	if err != nil {
		return nil, false, fmt.Errorf("check the spec's nodes: %w", err)
	}
	ok := true
	for _, at := range slices.Sorted(maps.Keys(named)) {
		if _, exists := known[named[at]]; !exists {
			c.Add(at, "no node is named %q (kiln admin node list shows the cluster's nodes)", named[at])
			ok = false
		}
	}
	return known, ok, nil
}

// nodesOf reads the game ports of the cluster's nodes when a proxy of
// ports names one (nil otherwise: nothing is read).
func (s *Service) nodesOf(ctx context.Context, ports map[string]proxyPort) (map[string]node.PortRange, error) {
	for _, p := range ports {
		if p.Node != "" {
			return nodes.Known(ctx, s.db)
		}
	}
	return nil, nil
}

// specPorts is what each proxy of sp asks of its node.
func specPorts(sp *spec.Spec) map[string]proxyPort {
	out := make(map[string]proxyPort, len(sp.Proxies))
	for name, p := range sp.Proxies {
		out[name] = proxyPort{Port: p.Port, Node: p.Node}
	}
	return out
}

// yamlPorts is what each proxy of a stored YAML (valid when it was
// stored) asks of its node. Only those fields are read, not spec.Parse,
// whose check against today's catalog is not push's to make.
func yamlPorts(text string) map[string]proxyPort {
	var top struct {
		Proxies map[string]struct {
			Port int    `yaml:"port"`
			Node string `yaml:"node"`
		} `yaml:"proxies"`
	}
	if err := yaml.Unmarshal([]byte(text), &top); err != nil {
		return nil
	}
	out := make(map[string]proxyPort, len(top.Proxies))
	for name, p := range top.Proxies {
		out[name] = proxyPort{Port: p.Port, Node: p.Node}
	}
	return out
}
