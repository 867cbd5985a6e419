package main

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/kilnhq/kiln/internal/nodes"
)

// Placement in kiln serve: the nodes its servers may be placed on (its
// local node until servers run on agents) and what they offer.

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
	return nodes.NewPlacer(p.svc, []string{cfg.NodeName}, nodes.DefaultOvercommit), nil
}
