package nodes

import (
	"context"
	"log/slog"
	"time"

	"github.com/kilnhq/kiln/internal/cluster"
)

// Measure reports a node's memory, disk and busy ports.
type Measure func(context.Context) (cluster.Heartbeat, error)

// RunLocal reports the local node name (registered with RegisterLocal)
// at once and then every cluster.HeartbeatInterval(within), as an agent
// does, until ctx ends: it is reachable while its kiln serve runs. A
// failed report is logged and the next one tried.
func (s *Service) RunLocal(ctx context.Context, name string, within time.Duration, measure Measure, log *slog.Logger) {
	t := time.NewTicker(cluster.HeartbeatInterval(within))
	defer t.Stop()
	for {
		hb, err := measure(ctx)
		if err == nil {
			err = s.BeatLocal(ctx, name, hb, within)
		}
		if err != nil && ctx.Err() == nil {
			log.Warn("cannot report the local node", "node", name, "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
