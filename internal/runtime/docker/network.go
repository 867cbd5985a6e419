package docker

import (
	"context"
	"fmt"
	"net/netip"
	"regexp"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/network"
	"github.com/moby/moby/client"
)

// DefaultNetwork is the network game containers join when
// Options.Network is empty; its bridge interface has the same name.
const DefaultNetwork = "kiln0"

// Bridge driver options of the network (doc.go, "Network").
const (
	optBridgeName = "com.docker.network.bridge.name"
	optICC        = "com.docker.network.bridge.enable_icc"
)

// networkName is a name that is both a Docker network's and a Linux
// interface's (at most 15 bytes) and needs no quoting in nft.
var networkName = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,14}$`)

// ensureNetwork creates the game containers' network unless it exists,
// and checks an existing one is Kiln's and has its options: a bridge of
// the network's name with inter-container communication off.
func (d *Docker) ensureNetwork(ctx context.Context) error {
	for attempt := 0; ; attempt++ {
		res, err := d.cli.NetworkInspect(ctx, d.network, client.NetworkInspectOptions{})
		if err == nil && res.Network.Name == d.network {
			return checkNetwork(res.Network.Network, d.network)
		}
		if err != nil && !cerrdefs.IsNotFound(err) {
			return fmt.Errorf("inspect network %s: %w", d.network, err)
		}
		if attempt > 0 {
			return fmt.Errorf("network %s: created, then not found", d.network)
		}
		_, err = d.cli.NetworkCreate(ctx, d.network, client.NetworkCreateOptions{
			Driver:  "bridge",
			Options: map[string]string{optBridgeName: d.network, optICC: "false"},
			Labels:  map[string]string{LabelManaged: "true"},
		})
		if err == nil {
			d.log.Info("created the game containers' network", "network", d.network)
			return nil
		}
		// Another kiln (or test) may have made it meanwhile: look again.
		d.log.Debug("create network", "network", d.network, "err", err)
	}
}

// checkNetwork refuses a network of Kiln's name that Kiln did not make or
// whose options would let containers meet or the rules miss them.
func checkNetwork(n network.Network, name string) error {
	switch {
	case n.Labels[LabelManaged] != "true":
		return fmt.Errorf("a network named %s that kiln did not create is in the way; remove it or choose another --docker-network", name)
	case n.Driver != "bridge" || n.Options[optBridgeName] != name || n.Options[optICC] != "false":
		return fmt.Errorf("network %s: want a bridge named %s with inter-container communication off, the engine has driver %s, options %v; remove the network (its containers first)",
			name, name, n.Driver, n.Options)
	}
	return nil
}

// Network is the name of the game containers' network and of its bridge
// interface on the engine's host.
func (d *Docker) Network() string { return d.network }

// Gateway is the host's address on the game containers' network: where a
// container reaches the published ports of the others.
func (d *Docker) Gateway(ctx context.Context) (netip.Addr, error) {
	res, err := d.cli.NetworkInspect(ctx, d.network, client.NetworkInspectOptions{})
	if err != nil {
		return netip.Addr{}, fmt.Errorf("inspect network %s: %w", d.network, err)
	}
	for _, c := range res.Network.IPAM.Config {
		if c.Gateway.Is4() {
			return c.Gateway, nil
		}
	}
	return netip.Addr{}, fmt.Errorf("network %s has no IPv4 gateway", d.network)
}
