package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"path/filepath"
	"strings"

	"github.com/kilnhq/kiln/internal/agent"
	"github.com/kilnhq/kiln/internal/blob"
	"github.com/kilnhq/kiln/internal/catalog"
	"github.com/kilnhq/kiln/internal/catalog/install"
	"github.com/kilnhq/kiln/internal/gameserver"
	"github.com/kilnhq/kiln/internal/netguard"
	"github.com/kilnhq/kiln/internal/node"
	"github.com/kilnhq/kiln/internal/runtime"
)

// kiln agent parses its flags here and runs internal/agent, which
// imports no database code (its imports are tested). It has no flag for
// a database or the secret key: a game host never holds them.

var agentCommand = command{
	synopsis: "kiln agent --server URL [--join-token TOKEN] --public-host HOST [flags]",
	about: `Run a game host of a Kiln cluster. On its first start it joins with the
join token (kiln admin node add NAME, on the control plane): it checks the
control plane against the token's CA fingerprint before sending the token,
then keeps its key, certificate and the cluster's CA in --data-dir (0600).
Later starts need no token. It connects out to the control plane
(kiln serve --cluster-addr), so it may sit behind NAT, reports its memory,
disk and free ports every few seconds, and reconnects with backoff. It
serves only once it finds, in the blob store of --blob-url, the marker the
control plane wrote into its own: every node must share that store.
It runs the game servers the control plane places on it (installs,
power, console), their records kept with the control plane.`,
}

// agentConfig is every setting of kiln agent.
type agentConfig struct {
	Server     string
	JoinToken  string
	DataDir    string
	PublicHost string
	PortRange  string
	SFTPAddr   string
	Runtime    string
	// The blob store every node shares, as kiln serve's --blob-url.
	BlobURL         string
	BlobAccessKeyID string
	BlobSecretKey   string
	Dev             bool
	UIDRange        string
	uidRange        gameserver.UIDRange
	LogLevel        string
	LogFormat       string
	NodeMemory      string
	NodeDisk        string
	ports           node.PortRange
	offer           node.Offer
}

func parseAgent(args []string, stdout, stderr io.Writer) (agentConfig, error) {
	var c agentConfig
	s := newSettings(agentCommand, stdout, stderr)
	s.fs.StringVar(&c.Server, "server", "", "the control plane's node endpoint, https://HOST:PORT (its kiln serve --cluster-addr; required)")
	s.fs.StringVar(&c.JoinToken, "join-token", "", "the join token of kiln admin node add, on the first start only (prefer KILN_JOIN_TOKEN: it stays out of ps)")
	s.fs.StringVar(&c.DataDir, "data-dir", "./kiln-agent", "this node's key, certificate and pinned CA")
	s.fs.StringVar(&c.PublicHost, "public-host", "", "host players and SFTP clients reach this node at (required)")
	s.fs.StringVar(&c.PortRange, "port-range", "25565-25664", "game ports this node hands out (FIRST-LAST)")
	s.fs.StringVar(&c.SFTPAddr, "sftp-addr", ":2022", "this node's SFTP listener (host:port)")
	s.fs.StringVar(&c.Runtime, "runtime", "process", "process or docker: how game servers run on this node")
	s.fs.StringVar(&c.BlobURL, "blob-url", "", "the blob store every node shares, as the control plane's kiln serve --blob-url: s3://bucket/prefix?endpoint=https://…&region=… or file:///dir each machine mounts (required)")
	s.fs.StringVar(&c.BlobAccessKeyID, "blob-access-key-id", "", "S3 access key id of --blob-url")
	s.fs.StringVar(&c.BlobSecretKey, "blob-secret-access-key", "", "S3 secret access key of --blob-url (prefer the environment variable KILN_BLOB_SECRET_ACCESS_KEY)")
	s.fs.BoolVar(&c.Dev, "dev", false, "development mode: the bundled test game server kiln-test may run here (give kiln serve --dev too)")
	s.fs.StringVar(&c.UIDRange, "uid-range", gameserver.DefaultUIDRange.String(), "user ids this node's game servers run as, one each, when kiln agent runs as root (FIRST-LAST, free of the host's users and groups), or off: every server runs as the agent's user (and can read its node key)")
	s.fs.StringVar(&c.LogLevel, "log-level", "info", "debug, info, warn or error")
	s.fs.StringVar(&c.LogFormat, "log-format", "text", "text or json")
	registerOfferFlags(s, &c.NodeMemory, &c.NodeDisk, "this node")
	pos, err := s.parse(args)
	if err != nil {
		return c, err
	}
	if len(pos) > 0 {
		return c, usageError{fmt.Sprintf("kiln agent takes no arguments, got %q", pos)}
	}
	u, err := url.Parse(c.Server)
	if c.Server == "" {
		return c, usageError{"--server is required: the control plane's https://HOST:PORT (kiln serve --cluster-addr)"}
	}
	if err != nil || u.Scheme != "https" || u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return c, usageError{fmt.Sprintf("--server %q: want https://HOST:PORT", c.Server)}
	}
	c.Server = "https://" + u.Host
	if c.DataDir == "" {
		return c, usageError{"--data-dir must not be empty"}
	}
	if strings.TrimSpace(c.PublicHost) == "" {
		return c, usageError{"--public-host is required: the host players reach this node at"}
	}
	if c.ports, err = node.ParsePortRange(c.PortRange); err != nil {
		return c, usageError{"--port-range: " + err.Error()}
	}
	if _, _, err := net.SplitHostPort(c.SFTPAddr); err != nil {
		return c, usageError{fmt.Sprintf("--sftp-addr %q: %v", c.SFTPAddr, err)}
	}
	if c.Runtime != "process" && c.Runtime != "docker" {
		return c, usageError{fmt.Sprintf("--runtime %q: want process or docker", c.Runtime)}
	}
	if c.offer, err = parseOffer(c.NodeMemory, c.NodeDisk); err != nil {
		return c, err
	}
	if c.uidRange, err = gameserver.ParseUIDRange(c.UIDRange); err != nil {
		return c, usageError{"--uid-range: " + err.Error()}
	}
	if c.BlobURL == "" {
		return c, usageError{"--blob-url is required: the blob store every node shares (the control plane's kiln serve --blob-url, an S3 bucket or a directory each machine mounts)"}
	}
	return c, nil
}

func agentMain(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := parseAgent(args, stdout, stderr)
	if err != nil {
		return err
	}
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(cfg.LogLevel)); err != nil {
		return usageError{fmt.Sprintf("--log-level %q: want debug, info, warn or error", cfg.LogLevel)}
	}
	var h slog.Handler
	switch cfg.LogFormat {
	case "text":
		h = slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: lv})
	case "json":
		h = slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: lv})
	default:
		return usageError{fmt.Sprintf("--log-format %q: want text or json", cfg.LogFormat)}
	}
	log := slog.New(h)
	ver := buildVersion()
	blobs, err := blob.Open(ctx, cfg.BlobURL, blob.Options{AccessKeyID: cfg.BlobAccessKeyID, SecretAccessKey: cfg.BlobSecretKey})
	if err != nil {
		return usageError{"--blob-url: " + err.Error()}
	}
	log.Info("kiln agent starting", "version", ver, "server", cfg.Server, "data_dir", cfg.DataDir, "public_host", cfg.PublicHost, "blob_store", blobs.String())
	games, closeGames, err := agentGames(ctx, cfg, blobs, ver, log)
	if err != nil {
		return err
	}
	defer closeGames()
	err = agent.Run(ctx, agent.Config{
		ServerURL: cfg.Server, JoinToken: cfg.JoinToken, DataDir: cfg.DataDir, PublicHost: cfg.PublicHost,
		Ports: cfg.ports, SFTPAddr: cfg.SFTPAddr, Runtime: cfg.Runtime, Version: ver, Offer: cfg.offer, Blobs: blobs,
		Host: games,
	}, log)
	if err != nil {
		return err
	}
	log.Info("kiln agent stopped")
	return nil
}

// agentGames makes what runs this node's game servers, as kiln serve
// does for its local node: the runtime (process servers under holders
// that outlive the agent, or docker), the catalog and its installers
// (their artifact cache in the shared blob store), the node's roots under
// DATA-DIR/servers. The Host itself is made once the node's name is
// known (agent.Config.Host). As root, each server runs as a user of its
// own (--uid-range), as kiln serve's do. Not here yet (decided for this
// phase, said in docs/operations.md): the egress rules of kiln serve's
// --server-egress, Kiln's temporary names (keyed by the secret key, which
// an agent does not hold: walks leave look-alikes alone), database
// credentials injected into a deployment's servers.
func agentGames(ctx context.Context, cfg agentConfig, blobs blob.Store, ver string, log *slog.Logger) (func(string, gameserver.Records) (*gameserver.Host, error), func(), error) {
	cat, err := catalog.Load(cfg.Dev)
	if err != nil {
		return nil, nil, err
	}
	stopGrace := gameserver.DefaultStopTimeout
	sc := serveConfig{Runtime: cfg.Runtime, Dev: cfg.Dev, storeConfig: storeConfig{DataDir: cfg.DataDir}, uidRange: cfg.uidRange}
	// As root, a user per game server, as kiln serve's: a game server
	// cannot read the node's key (0600, root's, in a data dir it can
	// only pass through), so it cannot act as the node.
	users, err := serverUsers(sc, log)
	if err != nil {
		return nil, nil, err
	}
	if err := secureDataDir(cfg.DataDir, !users.IsZero() && cfg.Runtime == "process"); err != nil {
		return nil, nil, err
	}
	rt, kilnBin, closeRT, err := openRuntime(ctx, sc, stopGrace, !users.IsZero(), log)
	if err != nil {
		return nil, nil, err
	}
	if !users.IsZero() && cfg.Dev && cfg.Runtime == "process" {
		// kiln-test runs this binary as the servers' users.
		if kilnBin, err = reachableBinary(kilnBin, cfg.DataDir); err != nil {
			closeRT()
			return nil, nil, fmt.Errorf("a copy of kiln the servers' users can run: %w", err)
		}
	}
	javas, err := runtime.NewJavas(nil, runtime.JavaDirs, true)
	if err != nil {
		closeRT()
		return nil, nil, err
	}
	forge, _ := cat.Get("forge")
	inst, err := install.New(install.Options{
		CacheDir: filepath.Join(cfg.DataDir, "cache", "artifacts"), Artifacts: blobs, UserAgent: install.UserAgent(ver), Log: log,
		UserURLs: netguard.NewPolicy(nil, nil),
		Runner: &runtime.InstallRunner{RT: rt, Javas: javas, JavaFor: forge.JavaFor,
			Image: func(major int) string { return forge.Image(major).Value }},
	})
	if err != nil {
		closeRT()
		return nil, nil, err
	}
	build := func(name string, records gameserver.Records) (*gameserver.Host, error) {
		n, err := node.NewLocal(name, filepath.Join(cfg.DataDir, "servers"), cfg.ports, rt)
		if err != nil {
			return nil, err
		}
		n.SetOffer(cfg.offer)
		return gameserver.New(records, n, cat, inst, gameserver.Options{
			KilnBinary: kilnBin, PublicHost: cfg.PublicHost, BindHost: bindHost(cfg.PublicHost, cfg.Runtime, log),
			Javas: javas, StopTimeout: stopGrace, Users: users,
		}, log), nil
	}
	return build, closeRT, nil
}
