package executor

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/kilnhq/kiln/internal/catalog"
	"github.com/kilnhq/kiln/internal/catalog/install"
	"github.com/kilnhq/kiln/internal/deploy/plan"
	"github.com/kilnhq/kiln/internal/deploy/runs"
	"github.com/kilnhq/kiln/internal/deploy/spec"
	"github.com/kilnhq/kiln/internal/files"
	"github.com/kilnhq/kiln/internal/quota"
	"github.com/kilnhq/kiln/internal/servers"
)

// forwardingSecret is the name of a configuration's modern forwarding
// secret (deploy.Service.Secret).
const forwardingSecret = "forwarding"

// wireProxy writes a proxy's configuration — its backends (the servers of
// this configuration it names, at the addresses Kiln gave them), the try
// order, the forwarding mode and, for modern forwarding, the
// configuration's secret — and each backend's side of the forwarding;
// a backend whose files changed and that runs is restarted.
func (x *exec) wireProxy(ctx context.Context, want spec.Proxy, sv servers.Server) *stepError {
	r := x.run
	prof, ok := x.e.cat.Get(want.Software)
	if !ok {
		return fail(runs.FailValidation, "unknown software %q", want.Software)
	}
	var backends []install.Backend
	var backendServers []servers.Server
	for _, name := range want.Backends {
		b, err := x.e.servers.FindOwned(ctx, r.TeamID, servers.Owner{ConfigurationID: r.ConfigurationID, ResourceKey: plan.Key(plan.Server, name)})
		if errors.Is(err, servers.ErrNotFound) {
			return fail(runs.FailInternal, "its backend %s does not exist", plan.Key(plan.Server, name))
		}
		if err != nil {
			return classify(err)
		}
		backends = append(backends, install.Backend{Name: name, Addr: b.Address})
		backendServers = append(backendServers, b)
	}
	fw := install.Forwarding(want.Forwarding)
	var secret install.Secret
	if fw == install.ForwardingModern {
		if x.e.opts.Secrets == nil {
			return fail(runs.FailInternal, "modern forwarding needs a secret store, and none is configured")
		}
		s, err := x.e.deploy.Secret(ctx, r.TeamID, r.ConfigurationID, forwardingSecret, x.e.opts.Secrets,
			func() string { return install.NewSecret().Reveal() })
		if err != nil {
			return classify(err)
		}
		if secret, err = install.ParseSecret(s); err != nil {
			return fail(runs.FailInternal, "the stored forwarding secret is not valid: %v", err)
		}
	}
	w := install.ProxyWiring{Bind: sv.Address, Backends: backends, Try: want.Try, Forwarding: fw, Secret: secret}
	if len(w.Try) == 0 {
		w.Try = []string{want.Backends[0]}
	}
	var name string
	var wire func([]byte, install.ProxyWiring) ([]byte, error)
	switch prof.Listen {
	case catalog.ListenVelocity:
		name, wire = install.VelocityConfig, install.WireVelocity
	case catalog.ListenBungeeCord:
		name, wire = install.BungeeConfig, install.WireBungee
	default:
		return fail(runs.FailValidation, "%s is not a proxy Kiln can wire", want.Software)
	}
	root, err := x.e.servers.Root(ctx, r.TeamID, sv.ID)
	if err != nil {
		return classify(err)
	}
	old, err := install.ReadConfigs(root, name)
	if err != nil {
		return fail(runs.FailValidation, "%v", err)
	}
	out, err := wire(old[name], w)
	if err != nil {
		return fail(runs.FailValidation, "%v", err)
	}
	write := map[string][]byte{name: out}
	if fw == install.ForwardingModern && name == install.VelocityConfig {
		write[install.VelocitySecretFile] = secret.File()
	}
	if serr := x.writeConfigs(ctx, sv, write, old); serr != nil {
		return serr
	}
	for _, b := range backendServers {
		if serr := x.wireBackend(ctx, b, install.BackendWiring{Forwarding: fw, Secret: secret}); serr != nil {
			return serr
		}
	}
	return nil
}

// wireBackend writes a backend's side of the forwarding and restarts it
// when that changed something and it runs.
func (x *exec) wireBackend(ctx context.Context, b servers.Server, w install.BackendWiring) *stepError {
	root, err := x.e.servers.Root(ctx, x.run.TeamID, b.ID)
	if err != nil {
		return classify(err)
	}
	old, err := install.ReadConfigs(root, install.BackendFiles()...)
	if err != nil {
		return fail(runs.FailValidation, "backend %s: %v", b.Name, err)
	}
	changed, err := install.WireBackend(old, w)
	if err != nil {
		return fail(runs.FailValidation, "backend %s: %v", b.Name, err)
	}
	if len(changed) == 0 {
		return nil
	}
	if serr := x.writeConfigs(ctx, b, changed, old); serr != nil {
		return serr
	}
	if b.DesiredState != "running" {
		return nil
	}
	if err := x.e.servers.Power(ctx, x.run.TeamID, b.ID, "restart"); err != nil {
		return classify(err)
	}
	o := servers.Owner{ConfigurationID: x.run.ConfigurationID, ResourceKey: plan.Key(plan.Server, b.Name)}
	_, err = x.waitFor(ctx, o, x.e.opts.HealthTimeout, func(s servers.Server) (bool, error) {
		return s.Status == servers.StatusRunning, nil
	}, errHealth)
	return classify(err)
}

// writeConfigs writes the files that differ from old into a server's root
// through its disk ledger; the ones holding the secret are made 0600.
func (x *exec) writeConfigs(ctx context.Context, sv servers.Server, write, old map[string][]byte) *stepError {
	a, err := x.e.servers.Access(ctx, x.run.TeamID, sv.ID, true)
	if err != nil {
		return classify(err)
	}
	err = files.Writing(a, func(r *files.Root, res *quota.Reservation) error {
		for _, name := range slices.Sorted(maps.Keys(write)) {
			if prev, ok := old[name]; ok && bytes.Equal(prev, write[name]) {
				continue
			}
			if _, err := r.WriteFile(name, bytes.NewReader(write[name]), res); err != nil {
				return fmt.Errorf("write %s: %w", name, err)
			}
			if name == install.VelocitySecretFile || name == install.PaperGlobalConfig {
				if err := r.Chmod(name, 0o600); err != nil {
					return fmt.Errorf("chmod %s: %w", name, err)
				}
			}
		}
		return nil
	})
	return classify(err)
}
