package main

import (
	"context"
	"fmt"
	"log/slog"
	"math"

	"github.com/kilnhq/kiln/internal/deploy/spec"
	"github.com/kilnhq/kiln/internal/node"
	"github.com/kilnhq/kiln/internal/nodes"
)

// Placement in kiln serve: what its local node offers (--node-memory,
// --node-disk, also flags of kiln agent), how far memory may be
// overcommitted (--memory-overcommit), and the nodes its new servers are
// placed on (its local node, and the agents connected to it). Sizes are
// written as a deployment spec's: a whole number and M, G or T (binary:
// 16G = 16384M).

// registerPlacementFlags adds kiln serve's placement flags.
func registerPlacementFlags(s *settings, c *serveConfig) {
	s.fs.Float64Var(&c.MemoryOvercommit, "memory-overcommit", nodes.DefaultOvercommit, "placement: the memory_mb of a node's servers may add up to its memory times this (more than 0, at most 100; 1.5 lets 12G of servers onto 8G)")
	registerOfferFlags(s, &c.NodeMemory, &c.NodeDisk, "this machine's local node")
}

// registerOfferFlags adds --node-memory and --node-disk.
func registerOfferFlags(s *settings, memory, disk *string, what string) {
	s.fs.StringVar(memory, "node-memory", "", "memory "+what+" offers game servers, e.g. 16G or 16384M (default: the machine's)")
	s.fs.StringVar(disk, "node-disk", "", "disk "+what+" offers game servers, e.g. 500G or 2T (default: the size of the data dir's file system)")
}

// validatePlacement checks kiln serve's placement flags.
func validatePlacement(c *serveConfig) error {
	if math.IsNaN(c.MemoryOvercommit) || c.MemoryOvercommit <= 0 || c.MemoryOvercommit > nodes.MaxOvercommit {
		return usageError{fmt.Sprintf("--memory-overcommit %v: want more than 0, at most %v", c.MemoryOvercommit, nodes.MaxOvercommit)}
	}
	o, err := parseOffer(c.NodeMemory, c.NodeDisk)
	c.nodeOffer = o
	return err
}

// parseOffer reads --node-memory and --node-disk ("" = the machine's).
func parseOffer(memory, disk string) (node.Offer, error) {
	var o node.Offer
	for _, f := range []struct {
		name, v string
		min     int64
		to      *int64
	}{{"node-memory", memory, 256 << 20, &o.MemoryBytes}, {"node-disk", disk, 1 << 30, &o.DiskBytes}} {
		if f.v == "" {
			continue
		}
		n, err := spec.ParseSize(f.v)
		if err == nil && n < f.min {
			err = fmt.Errorf("must be at least %s", spec.FormatSize(f.min))
		}
		if err != nil {
			return node.Offer{}, usageError{fmt.Sprintf("--%s %q: %v", f.name, f.v, err)}
		}
		*f.to = n
	}
	return o, nil
}

// startPlacement reports the local node once before anything is served
// (placement reads its row: a node that never reported is unreachable)
// and returns the placement of this kiln serve's new servers. A first
// report that fails is logged; the next ones are tried as usual.
func startPlacement(ctx context.Context, cfg serveConfig, p *clusterParts, log *slog.Logger) (*nodes.Placer, error) {
	hb, err := p.measure(ctx)
	if err != nil {
		log.Warn("cannot measure the local node; no server can be placed on it until it reports", "node", p.local, "err", err)
	} else if err := p.svc.BeatLocal(ctx, p.local, hb, p.within); err != nil {
		return nil, fmt.Errorf("report the local node: %w", err)
	}
	pl := nodes.NewPlacer(p.svc, []string{cfg.NodeName}, cfg.MemoryOvercommit)
	if p.endpoint != nil {
		pl.AlsoCandidates(p.endpoint.Connected) // the agents whose channel reaches this kiln serve
	}
	return pl, nil
}
