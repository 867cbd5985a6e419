package deploy

import (
	"maps"
	"slices"

	yaml "go.yaml.in/yaml/v4"

	"github.com/kilnhq/kiln/internal/deploy/spec"
	"github.com/kilnhq/kiln/internal/node"
	"github.com/kilnhq/kiln/internal/validate"
)

// checkPorts adds an issue at proxies.<name>.port for each proxy whose
// requested public port (0: none) is outside the node's game ports, or
// asked for by another proxy of the spec too (the first by name keeps
// it), and reports whether there was none; the zero range checks nothing.
func (s *Service) checkPorts(c *validate.Collector, ports map[string]int) bool {
	r := s.ports
	if r == (node.PortRange{}) {
		return true
	}
	ok := true
	asked := map[int]string{} // port → the first proxy (by name) asking for it
	for _, name := range slices.Sorted(maps.Keys(ports)) {
		p := ports[name]
		switch {
		case p == 0:
		case p < r.First || p > r.Last:
			c.Add(validate.Join("proxies", name, "port"), "must be within the node's port range %d-%d", r.First, r.Last)
			ok = false
		case asked[p] != "":
			c.Add(validate.Join("proxies", name, "port"), "%d is already asked for by proxy %s; each proxy needs a port of its own", p, asked[p])
			ok = false
		default:
			asked[p] = name
		}
	}
	return ok
}

// specPorts is the requested port of each proxy of sp.
func specPorts(sp *spec.Spec) map[string]int {
	out := make(map[string]int, len(sp.Proxies))
	for name, p := range sp.Proxies {
		out[name] = p.Port
	}
	return out
}

// yamlPorts is the requested port of each proxy of a stored YAML (valid
// when it was stored). Only the ports are read, not spec.Parse, whose
// check against today's catalog is not push's to make.
func yamlPorts(text string) map[string]int {
	var top struct {
		Proxies map[string]struct {
			Port int `yaml:"port"`
		} `yaml:"proxies"`
	}
	if err := yaml.Unmarshal([]byte(text), &top); err != nil {
		return nil
	}
	out := make(map[string]int, len(top.Proxies))
	for name, p := range top.Proxies {
		out[name] = p.Port
	}
	return out
}
