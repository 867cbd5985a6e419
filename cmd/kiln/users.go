package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/kilnhq/kiln/internal/dbservice"
	"github.com/kilnhq/kiln/internal/node"
	"github.com/kilnhq/kiln/internal/runtime"
	"github.com/kilnhq/kiln/internal/runtime/docker"
	"github.com/kilnhq/kiln/internal/servers"
)

// serverUsers decides who servers run as (servers.Options.Users): when
// kiln runs as root, a user of their own each from --uid-range, once the
// range is checked against the host's users and groups; on the process
// runtime, also once the server roots are reachable by other users (a
// container has its root mounted and needs no path to it). Not root: one
// warning on the process runtime, and servers share kiln's user (docker:
// --docker-user, else kiln's). On docker, --docker-user is for when users
// are off: with both, kiln serve stops and says so.
func serverUsers(cfg serveConfig, log *slog.Logger) (servers.UIDRange, error) {
	rng := cfg.uidRange
	docker := cfg.Runtime == "docker"
	if rng.IsZero() {
		if !docker {
			log.Warn("--uid-range off: every game server runs as kiln's own user; one server's code can read the others' files and kiln's data dir")
		}
		return servers.UIDRange{}, nil
	}
	if os.Geteuid() != 0 {
		if !docker {
			log.Warn("kiln does not run as root: every game server runs as kiln's own user and is not isolated from the others (their files, their environment, kiln's data dir); run kiln as root to give each server a user of its own (--uid-range)",
				"euid", os.Geteuid())
		}
		return servers.UIDRange{}, nil
	}
	if docker && cfg.DockerUser != "" {
		return servers.UIDRange{}, usageError{fmt.Sprintf(
			"--docker-user %s: as root, each game container runs as its server's own user (--uid-range %s), so files kiln writes while it runs are its user's; pass --uid-range off to run every container as --docker-user instead",
			cfg.DockerUser, rng)}
	}
	if err := servers.CheckUIDRange(rng, "/etc/passwd", "/etc/group"); err != nil {
		return servers.UIDRange{}, usageError{"--uid-range: " + err.Error()}
	}
	roots, err := filepath.Abs(filepath.Join(cfg.DataDir, "servers"))
	if err != nil {
		return servers.UIDRange{}, err
	}
	if dir, mode, ok := unreachable(filepath.Dir(filepath.Dir(roots))); !ok && !docker {
		return servers.UIDRange{}, usageError{fmt.Sprintf(
			"--data-dir %s: servers run as users of their own (--uid-range %s) and must reach their roots below it, but %s (mode %04o) lets no other user through: run chmod o+x %s, choose a --data-dir other users can reach (e.g. /var/lib/kiln), or pass --uid-range off",
			cfg.DataDir, rng, dir, mode, dir)}
	}
	log.Info("game servers run as users of their own", "uid_range", rng.String())
	return rng, nil
}

// unreachable finds the first directory from / down to dir that other
// users cannot pass (no o+x); ok when there is none.
func unreachable(dir string) (string, os.FileMode, bool) {
	var chain []string
	for d := dir; ; d = filepath.Dir(d) {
		chain = append(chain, d)
		if d == "/" || d == "." {
			break
		}
	}
	for i := len(chain) - 1; i >= 0; i-- {
		fi, err := os.Stat(chain[i])
		if err != nil {
			continue // made later (the data dir on a first start)
		}
		if fi.Mode().Perm()&0o001 == 0 {
			return chain[i], fi.Mode().Perm(), false
		}
	}
	return "", 0, true
}

// secureDataDir closes the data dir to other users: the directory 0711
// (servers' users pass through to their roots, list nothing) or 0700, its
// servers directory likewise, every other directory in it 0700 and every
// file 0600 (the database and its WAL, keys, the bootstrap token). Below
// those, nothing is reachable by another user, so deeper modes do not
// matter. It runs at each start: files an older Kiln made 0644 are
// closed too.
func secureDataDir(dataDir string, users bool) error {
	pass := os.FileMode(0o700)
	if users {
		pass = 0o711
	}
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return fmt.Errorf("create the data dir: %w", err)
	}
	if err := os.Chmod(dataDir, pass); err != nil {
		return fmt.Errorf("close the data dir: %w", err)
	}
	entries, err := os.ReadDir(dataDir)
	if err != nil {
		return fmt.Errorf("close the data dir: %w", err)
	}
	for _, e := range entries {
		p := filepath.Join(dataDir, e.Name())
		mode := os.FileMode(0o600)
		switch {
		case e.Type()&os.ModeSymlink != 0:
			continue
		case (e.Name() == "servers" || e.Name() == "bin") && e.IsDir():
			mode = pass // bin: reachableBinary's copy
		case e.IsDir():
			mode = 0o700
		case !e.Type().IsRegular():
			continue
		}
		if err := os.Chmod(p, mode); err != nil && !os.IsNotExist(err) {
			return fmt.Errorf("close %s: %w", p, err)
		}
	}
	return nil
}

// reachableBinary returns a path of the kiln binary self that servers'
// users can run (kiln-test runs it): self if every directory above it
// lets them pass and it is executable by them, else a copy in
// <data-dir>/bin (0711; the copy 0755), made again at each start.
func reachableBinary(self, dataDir string) (string, error) {
	if fi, err := os.Stat(self); err == nil && fi.Mode().Perm()&0o001 != 0 {
		if _, _, ok := unreachable(filepath.Dir(self)); ok {
			return self, nil
		}
	}
	dir, err := filepath.Abs(filepath.Join(dataDir, "bin")) // run from the server's root
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o711); err != nil {
		return "", err
	}
	if err := os.Chmod(dir, 0o711); err != nil {
		return "", err
	}
	dst := filepath.Join(dir, "kiln")
	src, err := os.Open(self)
	if err != nil {
		return "", err
	}
	defer src.Close()
	tmp, err := os.CreateTemp(dir, ".kiln-*")
	if err != nil {
		return "", err
	}
	defer os.Remove(tmp.Name())
	if _, err := io.Copy(tmp, src); err != nil {
		tmp.Close()
		return "", err
	}
	if err := tmp.Chmod(0o755); err != nil {
		tmp.Close()
		return "", err
	}
	if err := tmp.Close(); err != nil {
		return "", err
	}
	if err := os.Rename(tmp.Name(), dst); err != nil {
		return "", err
	}
	return dst, nil
}

// serverWall loads the servers' network wall (node.Egress) and returns
// its keeper, or nil when there is none: --server-egress open, servers
// sharing kiln's user on the process runtime, or a docker runtime whose
// rules this host cannot hold (kiln not root, the engine's bridge not on
// this host), each said once in the log. The process runtime's rules
// judge the sockets of the servers' users, the docker runtime's the
// packets from its network's bridge.
func serverWall(ctx context.Context, cfg serveConfig, users servers.UIDRange, rt runtime.Runtime, ports node.PortRange,
	hosts func(ctx context.Context) ([]dbservice.Host, error), log *slog.Logger) (*egressKeeper, error) {
	open := "--server-egress open: game servers reach the host's services and private, loopback and link-local ranges"
	base := node.Egress{Ports: ports, Resolvers: node.Resolvers("/etc/resolv.conf"), Allow: cfg.serverAllow}
	switch d, isDocker := rt.(*docker.Docker); {
	case isDocker && cfg.ServerEgress == "open":
		log.Warn(open + "; game containers still do not reach each other (their network's inter-container traffic is off)")
		return nil, nil
	case isDocker && os.Geteuid() != 0:
		log.Warn("kiln does not run as root, so it cannot load the game containers' network rules (nftables): game code reaches the host's services and private, loopback and link-local ranges; run kiln as root, or load the rules yourself (docs/operations.md)",
			"euid", os.Geteuid())
		return nil, nil
	case isDocker:
		if _, err := net.InterfaceByName(d.Network()); err != nil {
			log.Warn("the game containers' bridge is not on this host (a remote engine?), so kiln cannot load their network rules here: game code reaches that host's services and private ranges",
				"bridge", d.Network(), "err", err)
			return nil, nil
		}
		base.Bridge = d.Network()
	case users.IsZero():
		return nil, nil
	case cfg.ServerEgress == "open":
		log.Warn(open)
		return nil, nil
	default:
		base.FirstUID, base.LastUID = users.First, users.Last
	}
	k := &egressKeeper{log: log, hosts: hosts, base: base}
	// Loaded before any server starts.
	if err := k.apply(ctx); err != nil {
		if errors.Is(err, node.ErrNoNft) {
			return nil, usageError{"--server-egress guarded: " + err.Error() + "; or pass --server-egress open (servers then reach the host's services and private ranges)"}
		}
		return nil, fmt.Errorf("load the servers' network rules: %w", err)
	}
	return k, nil
}

// egressKeeper keeps the servers' network wall (node.Egress) loaded: the
// node's game ports, the host's name servers, --server-allow, and the
// address of every database host (`kiln admin dbhost add`, maybe from
// another process: looked at again every egressRefresh).
type egressKeeper struct {
	base  node.Egress // without the database hosts
	hosts func(ctx context.Context) ([]dbservice.Host, error)
	log   *slog.Logger
	last  string // the ruleset loaded last
}

// egressRefresh is how often the database hosts are read again.
const egressRefresh = 30 * time.Second

// apply loads the rules when they changed.
func (k *egressKeeper) apply(ctx context.Context) error {
	e := k.base
	e.Allow = slices.Clone(e.Allow)
	hosts, err := k.hosts(ctx)
	if err != nil {
		return fmt.Errorf("the database hosts servers reach: %w", err)
	}
	for _, h := range hosts {
		host, port, err := net.SplitHostPort(h.Address)
		p, perr := strconv.Atoi(port)
		if err != nil || perr != nil || p < 1 || p > 65535 {
			k.log.Warn("database host address not understood; servers cannot reach it", "dbhost", h.Name, "address", h.Address)
			continue
		}
		ips, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		if err != nil {
			k.log.Warn("database host address does not resolve; servers cannot reach it", "dbhost", h.Name, "address", h.Address, "err", err)
			continue
		}
		for _, ip := range ips {
			ip = ip.Unmap()
			e.Allow = append(e.Allow, node.Allowed{Prefix: netip.PrefixFrom(ip, ip.BitLen()), Port: uint16(p)})
		}
	}
	rs := e.Ruleset()
	if rs == k.last {
		return nil
	}
	if err := node.ApplyEgress(ctx, e); err != nil {
		return err
	}
	k.last = rs
	k.log.Info("servers' network rules loaded", "table", e.TableName(), "game_ports", e.Ports.String(), "allowed", len(e.Allow))
	return nil
}

// run refreshes the rules until ctx ends; the rules stay loaded after
// (servers' users hold them, not this process).
func (k *egressKeeper) run(ctx context.Context) {
	every(ctx, egressRefresh, func(ctx context.Context) {
		if err := k.apply(ctx); err != nil && ctx.Err() == nil {
			k.log.Error("refresh the servers' network rules", "err", err)
		}
	})
}
