package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/kilnhq/kiln/internal/api"
	"github.com/kilnhq/kiln/internal/auth"
	"github.com/kilnhq/kiln/internal/blob"
	"github.com/kilnhq/kiln/internal/catalog"
	"github.com/kilnhq/kiln/internal/catalog/install"
	"github.com/kilnhq/kiln/internal/cluster"
	"github.com/kilnhq/kiln/internal/connlimit"
	"github.com/kilnhq/kiln/internal/dbservice"
	"github.com/kilnhq/kiln/internal/deploy"
	"github.com/kilnhq/kiln/internal/deploy/executor"
	"github.com/kilnhq/kiln/internal/deploy/runs"
	"github.com/kilnhq/kiln/internal/files"
	"github.com/kilnhq/kiln/internal/files/archive"
	"github.com/kilnhq/kiln/internal/instance"
	"github.com/kilnhq/kiln/internal/metrics"
	"github.com/kilnhq/kiln/internal/modcatalog"
	"github.com/kilnhq/kiln/internal/netguard"
	"github.com/kilnhq/kiln/internal/node"
	"github.com/kilnhq/kiln/internal/pull"
	"github.com/kilnhq/kiln/internal/quota"
	"github.com/kilnhq/kiln/internal/ratelimit"
	"github.com/kilnhq/kiln/internal/runtime"
	"github.com/kilnhq/kiln/internal/runtime/docker"
	"github.com/kilnhq/kiln/internal/secretbox"
	"github.com/kilnhq/kiln/internal/secrets"
	"github.com/kilnhq/kiln/internal/servers"
	"github.com/kilnhq/kiln/internal/sftp"
	"github.com/kilnhq/kiln/internal/snapshot"
	"github.com/kilnhq/kiln/internal/snapshot/engine"
	"github.com/kilnhq/kiln/internal/store"
)

// storeConfig names the database; serve and admin share it.
type storeConfig struct {
	DataDir     string
	DatabaseURL string
}

func (c *storeConfig) register(s *settings) {
	s.fs.StringVar(&c.DataDir, "data-dir", "./kiln-data", "database (SQLite), server roots, blobs, keys, bootstrap token")
	s.fs.StringVar(&c.DatabaseURL, "database-url", "", "postgres://… for PostgreSQL; empty = SQLite in the data dir")
}

func (c storeConfig) validate() error {
	if c.DataDir == "" {
		return usageError{"--data-dir must not be empty"}
	}
	if c.DatabaseURL != "" && !store.IsPostgresURL(c.DatabaseURL) {
		return usageError{"--database-url must start with postgres:// or postgresql://"}
	}
	return nil
}

func (c storeConfig) open(ctx context.Context) (*store.DB, error) {
	return store.Open(ctx, store.Options{URL: c.DatabaseURL, DataDir: c.DataDir})
}

// defaultNodeName names the one node of this process (this machine) in
// the servers and instances tables when --node-name is not given: "local"
// with SQLite (one process owns the data), the host's name with
// PostgreSQL, where replicas on several hosts share the tables and each
// must recover only the servers of its own node.
func defaultNodeName(databaseURL string) string {
	if databaseURL == "" {
		return "local"
	}
	if h, err := os.Hostname(); err == nil && h != "" {
		return h
	}
	return "local"
}

// serveConfig is every setting of kiln serve (api.md §9).
type serveConfig struct {
	storeConfig
	Addr       string
	Dev        bool
	RateLimit  int
	PublicHost string
	LogLevel   string
	LogFormat  string

	Runtime            string
	DockerHost         string
	DockerUser         string
	DockerNetwork      string
	PortRange          string
	InstallerMirrorURL string
	PullAllowCIDR      listFlag
	pullAllow          []netip.Prefix
	JavaHome           listFlag
	javaHomes          map[int]string
	NodeName           string
	SecretKey          string
	SFTPAddr           string
	MaxConns           int
	MaxConnsPerAddr    int
	SFTPMaxUnauth      int
	SFTPMaxUnauthAddr  int
	CurseForgeAPIKey   string
	CurseForgeAPIURL   string
	ModrinthAPIURL     string
	CatalogContact     string
	BlobURL            string
	BlobAccessKeyID    string
	BlobSecretKey      string
	SnapshotCompress   string
	snapshotCompress   engine.Compression
	SnapshotDedup      string
	snapshotDedup      snapshot.Dedup
	RestoreWriterWait  time.Duration
	UIDRange           string
	uidRange           servers.UIDRange
	ServerAllow        listFlag
	serverAllow        []node.Allowed
	ServerEgress       string
	StopServersOnExit  bool
	// The cluster (cluster.go).
	ClusterAddr          string
	NodeUnreachableAfter time.Duration
	// Placement (placement.go).
	MemoryOvercommit float64
	NodeMemory       string
	NodeDisk         string
	nodeOffer        node.Offer
}

var serveCommand = command{
	synopsis: "kiln serve [flags]",
	about: `Run the service: the HTTP API, the game servers of this machine, remote
downloads. One kiln serve per data dir; SIGINT or SIGTERM stops it, and
the game servers keep running for the next kiln serve to re-attach to
(unless --stop-servers-on-exit).
On the very first start it creates team "default" and prints its first
token once (also written to <data-dir>/bootstrap-token).`,
}

func parseServe(args []string, stdout, stderr io.Writer) (serveConfig, error) {
	var c serveConfig
	s := newSettings(serveCommand, stdout, stderr)
	c.storeConfig.register(s)
	s.fs.StringVar(&c.Addr, "addr", "127.0.0.1:8080", "API listener")
	s.fs.BoolVar(&c.Dev, "dev", false, "development mode: adds the kiln-test software profile to the catalog")
	s.fs.IntVar(&c.RateLimit, "rate-limit", 100, "requests per minute per token, 1 to 2147483647 (the per-route limits scale with it)")
	s.fs.StringVar(&c.PublicHost, "public-host", "127.0.0.1", "host named in server addresses and SFTP credentials")
	s.fs.StringVar(&c.LogLevel, "log-level", "info", "debug, info, warn or error")
	s.fs.StringVar(&c.LogFormat, "log-format", "text", "text or json")
	s.fs.StringVar(&c.Runtime, "runtime", "process", "process or docker: how game servers run")
	s.fs.StringVar(&c.DockerHost, "docker-host", "", "Docker Engine endpoint (default: DOCKER_HOST, else the local socket)")
	s.fs.StringVar(&c.DockerUser, "docker-user", "", "numeric uid:gid every game container runs as when servers have no user of their own (kiln not root, or --uid-range off; default: kiln's own)")
	s.fs.StringVar(&c.DockerNetwork, "docker-network", docker.DefaultNetwork, "the bridge network game containers join, made by kiln when missing (inter-container traffic off), and its bridge interface's name (at most 15 characters)")
	s.fs.StringVar(&c.PortRange, "port-range", "25565-25664", "game ports the node hands out (FIRST-LAST)")
	s.fs.StringVar(&c.InstallerMirrorURL, "installer-mirror-url", "", "one base URL replacing every installer upstream (offline sites, tests)")
	s.fs.StringVar(&c.NodeName, "node-name", "", `this machine's node name, stored on its servers (default "local" with SQLite, the host name with PostgreSQL: replicas sharing a database need distinct names)`)
	s.fs.StringVar(&c.SecretKey, "secret-key", "", "base64 of the 32-byte key that seals stored secrets (default: <data-dir>/secret.key, made on first start; replicas sharing a database need the same key)")
	s.fs.StringVar(&c.CurseForgeAPIKey, "curseforge-api-key", "", "CurseForge Core API key (prefer KILN_CURSEFORGE_API_KEY); without it the CurseForge routes answer 503 CATALOG_NOT_CONFIGURED")
	s.fs.StringVar(&c.CurseForgeAPIURL, "curseforge-api-url", modcatalog.DefaultCurseForgeURL, "CurseForge API base URL")
	s.fs.StringVar(&c.ModrinthAPIURL, "modrinth-api-url", modcatalog.DefaultModrinthURL, "Modrinth API base URL")
	s.fs.StringVar(&c.CatalogContact, "catalog-contact", "https://github.com/kilnhq/kiln", "contact named in the User-Agent sent to the mod catalogs (Modrinth asks for one)")
	s.fs.StringVar(&c.SFTPAddr, "sftp-addr", "127.0.0.1:2022", "SFTP listener (host:port); empty turns SFTP off")
	s.fs.IntVar(&c.MaxConns, "max-conns", 4096, "API connections open at once, from every address (at most half the file descriptor limit); more are closed at once")
	s.fs.IntVar(&c.MaxConnsPerAddr, "max-conns-per-addr", 256, "API connections open at once from one address (an IPv6 /64); more are closed at once")
	s.fs.IntVar(&c.SFTPMaxUnauth, "sftp-max-unauthenticated", 256, "SFTP connections not logged in yet, from every address; more are closed at once")
	s.fs.IntVar(&c.SFTPMaxUnauthAddr, "sftp-max-unauthenticated-per-addr", 16, "SFTP connections not logged in yet from one address (an IPv6 /64); more are closed at once")
	s.fs.StringVar(&c.BlobURL, "blob-url", "", "snapshot and artifact-cache storage: file:///abs/dir or s3://bucket/prefix?endpoint=https://…&region=… (default: file://<data-dir>/blobs)")
	s.fs.StringVar(&c.BlobAccessKeyID, "blob-access-key-id", "", "S3 access key id of --blob-url")
	s.fs.StringVar(&c.BlobSecretKey, "blob-secret-access-key", "", "S3 secret access key of --blob-url (prefer the environment variable KILN_BLOB_SECRET_ACCESS_KEY)")
	s.fs.StringVar(&c.SnapshotCompress, "snapshot-compression", "fastest", "how hard snapshots compress: fastest (the quickest; a world as small as zstd -1 makes it), default (about 1.2 CPU-seconds more a GB; text-like files such as logs and plugin databases about 8 % smaller) or better (2.5 CPU-seconds more a GB than fastest; text smaller still)")
	s.fs.StringVar(&c.SnapshotDedup, "snapshot-dedup", "team", "which snapshots share the chunks they hold in common: team (each team stores its own, so no team learns what another holds) or global (every snapshot in the blob store: less space, but a snapshot's stored_bytes tell its team whether content is in the store already, anyone's)")
	s.fs.DurationVar(&c.RestoreWriterWait, "restore-writer-wait", snapshot.DefaultWriterWait, "how long a snapshot restore waits, the server stopped, for the uploads, downloads and mod installs already writing into it to end before it fails (1s to 1h)")
	s.fs.StringVar(&c.UIDRange, "uid-range", servers.DefaultUIDRange.String(), "user ids game servers (processes and containers) run as, one each, when kiln runs as root (FIRST-LAST, free of the host's users and groups), or off: every server runs as kiln's user")
	s.fs.Var(&c.ServerAllow, "server-allow", "ADDR[/BITS][:PORT] game servers with users of their own, and game containers, may connect to despite the network rules (a private mod mirror, a service on the host; database hosts are allowed by themselves); repeatable, or comma-separated")
	s.fs.StringVar(&c.ServerEgress, "server-egress", "guarded", "guarded: game servers with users of their own, and game containers, reach the internet and the node's game ports, not the host's other services nor private, loopback or link-local ranges (nftables); open: no rules")
	s.fs.BoolVar(&c.StopServersOnExit, "stop-servers-on-exit", false, "on SIGINT or SIGTERM, stop every game server (its stop command, up to 30 s) before exiting; by default they keep running and the next kiln serve re-attaches to them (kiln admin node stop-all stops them later)")
	s.fs.Var(&c.JavaHome, "java-home", "MAJOR=JAVA_HOME of a Java installation process-runtime servers and installers of that Java major use, e.g. 17=/usr/lib/jvm/java-17-openjdk-amd64 (repeatable; added to those found under /usr/lib/jvm and on PATH)")
	s.fs.Var(&c.PullAllowCIDR, "pull-allow-cidr", "address range remote downloads, mod catalogs and custom jar URLs may reach despite the SSRF rules (repeatable, or comma-separated)")
	registerClusterFlags(s, &c)
	registerPlacementFlags(s, &c)
	pos, err := s.parse(args)
	if err != nil {
		return c, err
	}
	if len(pos) > 0 {
		return c, usageError{fmt.Sprintf("kiln serve takes no arguments, got %q", pos)}
	}
	if err := validateCluster(c); err != nil {
		return c, err
	}
	if err := validatePlacement(&c); err != nil {
		return c, err
	}
	if err := c.storeConfig.validate(); err != nil {
		return c, err
	}
	if c.RateLimit < 1 {
		return c, usageError{"--rate-limit must be at least 1"}
	}
	if c.NodeName == "" {
		c.NodeName = defaultNodeName(c.DatabaseURL)
	}
	if err := cluster.ValidName(c.NodeName); err != nil {
		return c, usageError{"--node-name: " + err.Error()}
	}
	// internal/ratelimit is tested up to 2^31-1 per minute (35 million a
	// second per token, no limit in practice); far above it the per-route
	// scaling in internal/api and the limiter's nanosecond times overflow.
	if c.RateLimit > ratelimit.MaxLimit {
		return c, usageError{fmt.Sprintf("--rate-limit must be at most %d", ratelimit.MaxLimit)}
	}
	if c.PublicHost == "" {
		return c, usageError{"--public-host must not be empty"}
	}
	if _, _, err := net.SplitHostPort(c.Addr); err != nil {
		return c, usageError{fmt.Sprintf("--addr %q: %v", c.Addr, err)}
	}
	if c.SFTPAddr != "" {
		if _, _, err := net.SplitHostPort(c.SFTPAddr); err != nil {
			return c, usageError{fmt.Sprintf("--sftp-addr %q: %v", c.SFTPAddr, err)}
		}
	}
	for _, f := range []struct {
		name string
		v    int
	}{
		{"max-conns", c.MaxConns}, {"max-conns-per-addr", c.MaxConnsPerAddr},
		{"sftp-max-unauthenticated", c.SFTPMaxUnauth}, {"sftp-max-unauthenticated-per-addr", c.SFTPMaxUnauthAddr},
	} {
		if f.v < 1 {
			return c, usageError{fmt.Sprintf("--%s %d: want at least 1", f.name, f.v)}
		}
	}
	if c.Runtime != "process" && c.Runtime != "docker" {
		return c, usageError{fmt.Sprintf("--runtime %q: want process or docker", c.Runtime)}
	}
	if c.snapshotCompress, err = engine.ParseCompression(c.SnapshotCompress); err != nil {
		return c, usageError{"--snapshot-compression: " + err.Error()}
	}
	if c.snapshotDedup, err = snapshot.ParseDedup(c.SnapshotDedup); err != nil {
		return c, usageError{"--snapshot-dedup: " + err.Error()}
	}
	if c.RestoreWriterWait < time.Second || c.RestoreWriterWait > time.Hour {
		return c, usageError{fmt.Sprintf("--restore-writer-wait %s: want 1s to 1h", c.RestoreWriterWait)}
	}
	if _, err := node.ParsePortRange(c.PortRange); err != nil {
		return c, usageError{"--port-range: " + err.Error()}
	}
	if c.uidRange, err = servers.ParseUIDRange(c.UIDRange); err != nil {
		return c, usageError{"--uid-range " + err.Error()}
	}
	for _, a := range c.ServerAllow {
		al, err := node.ParseAllowed(a)
		if err != nil {
			return c, usageError{"--server-allow " + err.Error()}
		}
		c.serverAllow = append(c.serverAllow, al)
	}
	if c.ServerEgress != "guarded" && c.ServerEgress != "open" {
		return c, usageError{fmt.Sprintf("--server-egress %q: want guarded or open", c.ServerEgress)}
	}
	c.javaHomes = map[int]string{}
	for _, jh := range c.JavaHome {
		m, home, ok := strings.Cut(jh, "=")
		major, err := strconv.Atoi(m)
		if !ok || err != nil || major < 8 || major > 99 || !filepath.IsAbs(home) {
			return c, usageError{fmt.Sprintf("--java-home %q: want MAJOR=/absolute/java/home, e.g. 17=/usr/lib/jvm/java-17-openjdk-amd64", jh)}
		}
		if _, dup := c.javaHomes[major]; dup {
			return c, usageError{fmt.Sprintf("--java-home: Java %d given twice", major)}
		}
		c.javaHomes[major] = filepath.Clean(home)
	}
	if c.pullAllow, err = netguard.ParseAllowList(c.PullAllowCIDR); err != nil {
		return c, usageError{"--pull-allow-cidr: " + err.Error()}
	}
	if m := c.InstallerMirrorURL; m != "" {
		u, err := url.Parse(m)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
			return c, usageError{fmt.Sprintf("--installer-mirror-url %q: want an absolute http(s) URL without query or fragment", m)}
		}
	}
	return c, nil
}

// bindHost is where process-runtime game servers listen: --public-host
// when it is an address of this machine (so a server is reachable only
// where Kiln says it is), else every interface — a name, or the public
// address of a NAT in front of the host, cannot be bound.
func bindHost(public, runtime string, log *slog.Logger) string {
	if runtime != "process" {
		return ""
	}
	ip := net.ParseIP(public)
	if ip == nil {
		log.Info("game servers listen on every interface: --public-host is a name, not an address of this machine", "public_host", public)
		return ""
	}
	switch {
	case ip.IsUnspecified():
		return ""
	case ip.IsLoopback():
		return public
	}
	addrs, err := net.InterfaceAddrs()
	if err == nil {
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && n.IP.Equal(ip) {
				return public
			}
		}
	}
	log.Info("game servers listen on every interface: --public-host is not an address of this machine", "public_host", public)
	return ""
}

// newLogger builds serve's logger on a buffered w (logwriter.go); the
// caller closes the buffer when serve ends.
func newLogger(level, format string, w io.Writer) (*slog.Logger, *bufferedLog, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, nil, usageError{fmt.Sprintf("--log-level %q: want debug, info, warn or error", level)}
	}
	opts := &slog.HandlerOptions{Level: lv}
	buf := newBufferedLog(w)
	var h slog.Handler
	switch format {
	case "text":
		h = slog.NewTextHandler(buf, opts)
	case "json":
		h = slog.NewJSONHandler(buf, opts)
	default:
		return nil, nil, usageError{fmt.Sprintf("--log-format %q: want text or json", format)}
	}
	return slog.New(api.WithRequestID(flushingHandler{h, buf})), buf, nil
}

func serve(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	started := time.Now()
	cfg, err := parseServe(args, stdout, stderr)
	if err != nil {
		return err
	}
	ver := buildVersion()
	log, logBuf, err := newLogger(cfg.LogLevel, cfg.LogFormat, stderr)
	if err != nil {
		return err
	}
	defer logBuf.Close() // after everything else has logged its last line
	// Twice as many Ps as cores (node/procs.go): Ps blocked on the disk
	// in a system call leave cores idle.
	cores, procs := node.TuneProcs(os.Getenv)
	log.Info("go scheduler", "cores", cores, "gomaxprocs", procs)
	nofile := raiseNoFile(log)
	// Who servers run as is settled before anything is made: a refusal
	// (a range holding a host user, roots other users cannot reach) comes
	// before a bootstrap token is printed to nobody.
	users, err := serverUsers(cfg, log)
	if err != nil {
		return err
	}
	lock, err := instance.LockDir(cfg.DataDir, os.Getpid())
	if err != nil {
		if inUse, ok := errors.AsType[*instance.InUseError](err); ok {
			return fmt.Errorf("%w; stop it or pass another --data-dir", inUse)
		}
		return err
	}
	defer lock.Close() // after the store has closed
	// Bind before the database is created or migrated and before the
	// bootstrap token is made: a taken port must fail before a token that
	// is shown only once has been printed to nobody.
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", cfg.Addr, err)
	}
	defer ln.Close() // when serve fails before it serves; Serve closes it otherwise
	var sshLn net.Listener
	sftpPort := sftp.DefaultPort
	if cfg.SFTPAddr != "" {
		if sshLn, err = net.Listen("tcp", cfg.SFTPAddr); err != nil {
			return fmt.Errorf("listen on %s (--sftp-addr): %w", cfg.SFTPAddr, err)
		}
		defer sshLn.Close()
		sftpPort = sshLn.Addr().(*net.TCPAddr).Port
	}
	clusterLn, err := listenCluster(cfg, log)
	if err != nil {
		return err
	}
	if clusterLn != nil {
		defer clusterLn.Close()
	}
	db, err := cfg.open(ctx)
	if err != nil {
		return err
	}
	defer db.Close() // last: after the HTTP server has drained
	log.Info("database ready", "store", store.Options{URL: cfg.DatabaseURL, DataDir: cfg.DataDir})
	hostname, _ := os.Hostname()
	reg, err := instance.Register(ctx, db, instance.Options{NodeID: cfg.NodeName, Hostname: hostname, PID: os.Getpid(), Log: log})
	if err != nil {
		return err
	}
	// Unregistered after everything this process owns has stopped, even
	// when ctx ended with a signal.
	defer func() {
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := reg.Close(uctx); err != nil {
			log.Warn("instance row left behind", "err", err)
		}
	}()
	self := reg.Instance()
	log.Info("instance registered", "instance_id", self.ID, "node_id", self.NodeID, "hostname", self.Hostname, "pid", self.PID)

	authSvc, err := auth.NewService(ctx, db)
	if err != nil {
		return err
	}
	defer authSvc.Close()
	if err := bootstrap(ctx, authSvc, cfg.DataDir, stdout, log); err != nil {
		return err
	}

	var limiter ratelimit.Limiter
	var pgLimiter *ratelimit.Postgres
	if db.Dialect() == store.Postgres {
		pgLimiter = ratelimit.NewPostgres(db.Write())
		limiter = pgLimiter
	} else {
		limiter = ratelimit.NewMemory(time.Now)
	}
	m := metrics.New()

	cat, err := catalog.Load(cfg.Dev)
	if err != nil {
		return err
	}
	// One blob store keeps snapshots and the installers' artifact cache
	// (under artifacts/), so replicas sharing an S3 bucket share both.
	blobs, err := openBlobs(ctx, cfg, started)
	if err != nil {
		return err
	}
	// One stop grace for both: Kiln's own stop (stop command, then kill)
	// and the engine's when it stops a container itself.
	stopGrace := servers.DefaultStopTimeout
	rt, kilnBin, closeRT, err := openRuntime(ctx, cfg, stopGrace, !users.IsZero(), log)
	if err != nil {
		return err
	}
	defer closeRT()
	javas, err := runtime.NewJavas(cfg.javaHomes, runtime.JavaDirs, true)
	if err != nil {
		return usageError{"--java-home: " + err.Error()}
	}
	if cfg.Runtime == "process" {
		log.Info("java installations", "majors", javas.Majors())
	}
	// The Forge and NeoForge installers run with the Java of their game
	// version, on this host or in that Java's image, as the server will.
	forge, _ := cat.Get("forge")
	inst, err := install.New(install.Options{
		MirrorURL: cfg.InstallerMirrorURL, CacheDir: filepath.Join(cfg.DataDir, "cache", "artifacts"),
		Artifacts: blobs, UserAgent: install.UserAgent(ver), Log: log,
		// A custom jar's URL is the user's: the guard of remote downloads.
		UserURLs: netguard.NewPolicy(cfg.pullAllow, nil),
		Runner: &runtime.InstallRunner{RT: rt, Javas: javas, JavaFor: forge.JavaFor,
			Image: func(major int) string { return forge.Image(major).Value }},
	})
	if err != nil {
		return usageError{"--installer-mirror-url: " + err.Error()}
	}
	ports, _ := node.ParsePortRange(cfg.PortRange)
	localNode, err := node.NewLocal(cfg.NodeName, filepath.Join(cfg.DataDir, "servers"), ports, rt)
	if err != nil {
		return err
	}
	localNode.SetOffer(cfg.nodeOffer)
	// Containers have their roots mounted: only process-runtime servers'
	// users pass through the data dir.
	if err := secureDataDir(cfg.DataDir, !users.IsZero() && cfg.Runtime == "process"); err != nil {
		return err
	}
	if !users.IsZero() && cfg.Dev && cfg.Runtime == "process" {
		// kiln-test runs this binary as the servers' users.
		if kilnBin, err = reachableBinary(kilnBin, cfg.DataDir); err != nil {
			return fmt.Errorf("a copy of kiln the servers' users can run: %w", err)
		}
	}
	box, err := secretbox.Load(cfg.DataDir, cfg.SecretKey)
	if err != nil && cfg.SecretKey != "" {
		return usageError{"--secret-key: " + err.Error()}
	}
	if err != nil {
		return fmt.Errorf("the key for stored secrets: %w", err)
	}
	clusterSvc, err := startCluster(ctx, cfg, db, box, blobs, filepath.Join(cfg.DataDir, "servers"), ports, sshLn, rt.Name(), ver, log)
	if err != nil {
		return err
	}
	placement, err := startPlacement(ctx, cfg, clusterSvc, log)
	if err != nil {
		return err
	}
	// Databases of dbservices: their credentials are sealed with box and
	// given to the servers attached to them at each start.
	dbs := dbservice.NewService(db, box, log)
	egress, err := serverWall(ctx, cfg, users, rt, ports, dbs.Hosts, log)
	if err != nil {
		return err
	}
	tempNames := quota.NewTempNames(box.Derive(servers.TempNamesPurpose))
	// Restores a crash cut short are finished or undone before any server
	// starts and before the disk ledger's first walk.
	finishedRestores := snapshot.RecoverRoots(ctx, filepath.Join(cfg.DataDir, "servers"), tempNames, log)
	var serverSvc *servers.Service
	serverSvc = servers.NewService(db, localNode, cat, inst, servers.Options{
		KilnBinary: kilnBin, PublicHost: cfg.PublicHost, BindHost: bindHost(cfg.PublicHost, cfg.Runtime, log),
		Injected: dbs, Javas: javas, Secrets: box, TempNames: tempNames, Users: users, StopTimeout: stopGrace,
		StopServersOnExit: cfg.StopServersOnExit, Placement: placement,
		NodeStatuses: clusterSvc.nodeStatuses,
		// The servers of agents: driven over their channels.
		Remote: func(node string) servers.Driver {
			return clusterSvc.remote(ctx, node, func(ctx context.Context) ([]string, error) { return serverSvc.IDsOn(ctx, node) })
		},
	}, log)
	clusterSvc.serveRecords(serverSvc)
	// Snapshots: taken, restored and deleted in the background; the
	// executor takes one before a replace or delete.
	snaps := snapshot.New(db, blobs, serverSvc, cat, snapshot.Options{Owner: self.ID, Node: cfg.NodeName,
		Compression: cfg.snapshotCompress, Dedup: cfg.snapshotDedup, WriterWait: cfg.RestoreWriterWait}, log)
	snaps.RootsRecovered(finishedRestores)
	// The first of a delete's hooks, as it may refuse the delete (a
	// snapshot of the server being taken) before any other ended
	// anything; else the server's restore stops before its root goes.
	serverSvc.OnDelete(snaps.ServerDeleting)
	serverSvc.OnDeleteEnded(snaps.DeleteEnded)
	pulls := pull.NewManager(db, serverSvc, netguard.NewPolicy(cfg.pullAllow, nil),
		pull.Options{UserAgent: install.UserAgent(ver)}, log)
	// A deleted server's downloads end first (and their partial files go
	// with the root), and its SFTP sessions.
	serverSvc.OnDelete(pulls.CancelServer)
	sftpSvc := sftp.NewService(db, box, serverSvc, sftp.ServiceOptions{PublicHost: cfg.PublicHost, Port: sftpPort}, log)
	serverSvc.OnDelete(sftpSvc.RevokeServer)
	serverSvc.OnDeleteEnded(sftpSvc.DeleteEnded)
	serverSvc.OnHold(sftpSvc.ServerHeld)
	// Mod catalogs: their requests obey the remote downloads' SSRF rules.
	catalogs, err := modcatalog.New(netguard.NewPolicy(cfg.pullAllow, nil), modcatalog.Options{
		CurseForgeKey: cfg.CurseForgeAPIKey, CurseForgeURL: cfg.CurseForgeAPIURL, ModrinthURL: cfg.ModrinthAPIURL,
		UserAgent: "kilnhq/kiln/" + ver + " (" + cfg.CatalogContact + ")",
		Metrics:   m.Catalog(),
	})
	if err != nil {
		return usageError{err.Error()}
	}
	defer catalogs.Close()
	mods := modcatalog.NewInstaller(catalogs, serverSvc, cat, pulls)
	packs, err := modcatalog.NewModpacks(catalogs, serverSvc, modcatalog.ModpackOptions{}, log)
	if err != nil {
		return err
	}
	defer packs.Close() // before catalogs.Close (deferred earlier, runs later)

	deploySvc := deploy.New(db, cat, ports)
	// Deployment runs: queued by the API, executed here under this
	// process's instance id (another replica takes a run over when this
	// one dies mid-run and its lease expires).
	runQueue := runs.New(db, runs.Options{})
	// Team secrets: sealed with box, read by runs only.
	teamSecrets := secrets.New(db, box)
	exe := executor.New(runQueue, deploySvc, serverSvc, cat, executor.Options{Owner: self.ID, Secrets: box, Databases: dbs,
		TeamSecrets: teamSecrets, DigestKey: box.Derive(executor.DigestPurpose), Snapshots: snaps, Log: log})

	handler, err := api.New(api.Config{RateLimit: cfg.RateLimit}, api.Deps{
		Log: log, Auth: authSvc, Limiter: limiter, Servers: serverSvc, Catalog: cat, Files: files.NewService(serverSvc),
		Pulls: pulls, Archives: archive.NewService(serverSvc), Deploy: deploySvc, Runs: runQueue, RunQueued: exe.Wake, Planner: exe, Secrets: teamSecrets,
		Snapshots: snaps, SFTP: sftpSvc, Catalogs: catalogs, Mods: mods, Modpacks: packs, Metrics: m, Ready: db.Ping,
	})
	if err != nil {
		return err
	}
	// Event streams end when shutdown begins (streams.go); Shutdown would
	// wait for them forever.
	strm := newStreams()
	srv := &http.Server{
		Handler:           strm.wrap(handler),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	srv.RegisterOnShutdown(strm.end)
	// Every API connection counts against the caps from its accept to its
	// close: an idle or silent client holds a descriptor until
	// ReadHeaderTimeout or IdleTimeout ends it, so a flood from one address
	// stops at its cap and leaves the descriptors to everything else.
	apiConns := connlimit.New(apiConnLimits(cfg, nofile, log), connlimit.Options{Log: log.With("component", "api")})
	defer apiConns.Close()
	m.RegisterCounts("kiln_api_connections", "API connections open; accepted, and refused by --max-conns or --max-conns-per-addr, since the start", "state",
		func(context.Context) (map[string]int, error) {
			st := apiConns.Stats()
			return map[string]int{"open": st.Open, "accepted": int(st.Accepted), "refused": int(st.Refused)}, nil
		}, log)

	// Everything runs in one errgroup: the first error (a failed recovery
	// included) stops the rest and is what serve returns; a signal stops
	// everything and serve returns nil.
	g, gctx := errgroup.WithContext(ctx)
	// The servers service (recovery, then sampling and supervision) and the
	// downloads outlive the HTTP server, so that a request in flight never
	// meets a stopped service: their contexts end only once Shutdown has
	// returned, the downloads' first (they write into servers).
	svcCtx, stopSvc := context.WithCancel(context.WithoutCancel(ctx))
	defer stopSvc()
	pullCtx, stopPulls := context.WithCancel(context.WithoutCancel(ctx))
	defer stopPulls()
	pullsDone := make(chan struct{})
	// The executor drives servers: it starts once they are recovered and
	// stops before them (a run in progress keeps its lease and is resumed
	// at the next start).
	exeCtx, stopExe := context.WithCancel(context.WithoutCancel(ctx))
	defer stopExe()
	exeDone := make(chan struct{})
	// Snapshots read and write servers: they start once servers are
	// recovered and stop after the executor (which waits for them) and
	// before servers.
	snapCtx, stopSnaps := context.WithCancel(context.WithoutCancel(ctx))
	defer stopSnaps()
	snapsDone := make(chan struct{})
	g.Go(func() error {
		defer close(snapsDone)
		select {
		case <-serverSvc.Recovered():
		case <-snapCtx.Done():
			snaps.Close()
			return nil
		}
		if serverSvc.RecoveryFailed() {
			snaps.Close()
			return nil
		}
		return snaps.Run(snapCtx)
	})
	g.Go(func() error {
		defer close(exeDone)
		select {
		case <-serverSvc.Recovered():
		case <-exeCtx.Done():
			return nil
		}
		if serverSvc.RecoveryFailed() {
			return nil
		}
		return exe.Run(exeCtx)
	})
	g.Go(func() error {
		if err := serverSvc.Run(svcCtx); err != nil {
			return fmt.Errorf("servers: %w", err)
		}
		return nil
	})
	g.Go(func() error {
		defer close(pullsDone)
		if err := pulls.Run(pullCtx); err != nil {
			return fmt.Errorf("remote downloads: %w", err)
		}
		return nil
	})
	g.Go(func() error {
		// No request is answered before recovery has made every stored
		// status true again (a killed kiln leaves "running" behind, and
		// downloads that were in flight); until then connections wait in
		// the listener's queue.
		for _, ready := range []<-chan struct{}{serverSvc.Recovered(), pulls.Recovered()} {
			select {
			case <-ready:
			case <-gctx.Done():
				return nil
			}
		}
		// A failed recovery also closes its channel; its Run returns the
		// error, which ends the group: never serve meanwhile.
		if serverSvc.RecoveryFailed() || pulls.RecoveryFailed() {
			return nil
		}
		log.Info("kiln serving", "addr", ln.Addr().String(), "instance_id", self.ID, "version", ver, "dev", cfg.Dev,
			"rate_limit", cfg.RateLimit, "runtime", rt.Name(), "port_range", ports.String(), "snapshot_compression", string(cfg.snapshotCompress),
			"snapshot_dedup", string(cfg.snapshotDedup), "max_conns", apiConns.Limits().Total, "max_conns_per_addr", apiConns.Limits().PerAddr)
		if err := srv.Serve(apiConns.Listener(ln)); err != nil && !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("serve http: %w", err)
		}
		return nil
	})
	g.Go(func() error {
		<-gctx.Done()
		log.Info("shutting down")
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		err := srv.Shutdown(sctx)
		stopExe()
		<-exeDone
		stopSnaps()
		<-snapsDone
		stopPulls()
		<-pullsDone
		stopSvc()
		if err != nil {
			return fmt.Errorf("shut down http: %w", err)
		}
		return nil
	})
	if pgLimiter != nil {
		g.Go(func() error { sweepLoop(gctx, pgLimiter, log); return nil })
	}
	if egress != nil {
		g.Go(func() error { egress.run(gctx); return nil })
	}
	if sshLn != nil {
		sftpSrv, err := sftp.NewServer(sftpSvc, sftp.Config{DataDir: cfg.DataDir,
			MaxUnauthenticated: cfg.SFTPMaxUnauth, MaxUnauthenticatedPerAddr: cfg.SFTPMaxUnauthAddr}, log)
		if err != nil {
			return err
		}
		m.RegisterCounts("kiln_sftp", "SFTP logins, failed logins, lockouts, sessions cut and sessions open", "event", sftpSrv.Counts, log)
		g.Go(func() error {
			// Sessions need recovered servers (their roots and ledgers).
			select {
			case <-serverSvc.Recovered():
			case <-gctx.Done():
				return nil
			}
			if serverSvc.RecoveryFailed() {
				return nil
			}
			log.Info("sftp serving", "addr", sshLn.Addr().String(), "max_unauthenticated", cfg.SFTPMaxUnauth,
				"max_unauthenticated_per_addr", cfg.SFTPMaxUnauthAddr)
			if err := sftpSrv.Serve(gctx, sshLn); err != nil {
				return fmt.Errorf("sftp: %w", err)
			}
			return nil
		})
	}
	g.Go(func() error { return reg.Run(gctx) })
	g.Go(func() error { return clusterSvc.run(gctx, clusterLn, log) })
	err = g.Wait()
	log.Info("stopped")
	return err
}

// apiConnLimits are the API listener's caps: --max-conns, lowered to half
// the file descriptor limit when it is above (the other half is for the
// database, server roots, game servers' pipes and SFTP), and
// --max-conns-per-addr.
func apiConnLimits(cfg serveConfig, nofile uint64, log *slog.Logger) connlimit.Limits {
	total := cfg.MaxConns
	if half := nofile / 2; nofile > 0 && uint64(total) > half {
		total = int(max(half, 1))
		log.Info("api connection cap lowered to half the file descriptor limit", "max_conns", cfg.MaxConns, "lowered_to", total)
	}
	return connlimit.Limits{Total: total, PerAddr: cfg.MaxConnsPerAddr}
}

// openBlobs opens the snapshot store of --blob-url (default: the data
// dir's blobs directory), removing what writes a crash cut short before
// started left there.
func openBlobs(ctx context.Context, cfg serveConfig, started time.Time) (blob.Store, error) {
	u := cfg.BlobURL
	if u == "" {
		dir, err := filepath.Abs(filepath.Join(cfg.DataDir, "blobs"))
		if err != nil {
			return nil, err
		}
		u = "file://" + dir
	}
	st, err := blob.Open(ctx, u, blob.Options{AccessKeyID: cfg.BlobAccessKeyID, SecretAccessKey: cfg.BlobSecretKey, CleanBefore: started})
	if err != nil {
		return nil, usageError{"--blob-url: " + err.Error()}
	}
	return st, nil
}

// sweepLoop forgets rate-limit keys whose quota is full again.
func sweepLoop(ctx context.Context, p *ratelimit.Postgres, log *slog.Logger) {
	every(ctx, 10*time.Minute, func(ctx context.Context) {
		if err := p.Sweep(ctx); err != nil && ctx.Err() == nil {
			log.Warn("rate limit sweep failed", "err", err)
		}
	})
}

// every calls fn each period until ctx ends.
func every(ctx context.Context, period time.Duration, fn func(context.Context)) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			fn(ctx)
		}
	}
}

// bootstrap creates team default and its first token on the very first
// start, prints the token once and leaves it in <data-dir>/bootstrap-token.
func bootstrap(ctx context.Context, a *auth.Service, dataDir string, stdout io.Writer, log *slog.Logger) error {
	token, created, err := a.Bootstrap(ctx)
	if err != nil || !created {
		return err
	}
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return fmt.Errorf("create data directory: %w", err)
	}
	path := filepath.Join(dataDir, "bootstrap-token")
	if err := writeSecretFile(path, string(token)+"\n"); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s\nCreated team %q and its first token (shown once; also in %s):\n\n    %s\n\n%s\n",
		strings.Repeat("=", 72), auth.BootstrapTeam, path, token, strings.Repeat("=", 72))
	log.Info("bootstrap team created", "team", auth.BootstrapTeam, "token_file", path)
	return nil
}

// writeSecretFile writes data readable by the owner only, replacing any
// older file atomically.
func writeSecretFile(path, data string) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Chmod(0o600); err == nil {
		_, err = f.WriteString(data)
		if err == nil {
			err = f.Sync()
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err == nil {
			err = os.Rename(tmp, path)
		}
		if err != nil {
			os.Remove(tmp)
			return fmt.Errorf("write %s: %w", path, err)
		}
		return nil
	} else {
		f.Close()
		os.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, err)
	}
}

// openRuntime connects the runtime of --runtime. It returns the path of the
// kiln binary as that runtime sees it (for the kiln-test profile) and a
// function that releases the runtime (game servers keep running: process
// ones under their holders, `kiln shim` of this very binary with its state
// in <data-dir>/run; docker containers). stopGrace becomes the
// containers' stop timeout; users says that servers run as users of their
// own (serverUsers).
func openRuntime(ctx context.Context, cfg serveConfig, stopGrace time.Duration, users bool, log *slog.Logger) (runtime.Runtime, string, func(), error) {
	self, err := os.Executable()
	if err != nil {
		return nil, "", nil, fmt.Errorf("find the kiln binary: %w", err)
	}
	if cfg.Runtime == "process" {
		p := runtime.NewProcessWith(log, runtime.ProcessOptions{
			Holder: []string{"/proc/self/exe", "shim"}, StateDir: filepath.Join(cfg.DataDir, "run"),
			Sandbox: []string{"/proc/self/exe", "sandbox-exec"},
		})
		return p, self, func() { p.Close() }, nil
	}
	d, err := docker.New(ctx, docker.Options{Host: cfg.DockerHost, User: cfg.DockerUser, ServerUsers: users, Network: cfg.DockerNetwork, Log: log, StopTimeout: stopGrace})
	if err != nil {
		return nil, "", nil, err
	}
	// A kiln killed while an installer ran in a container left it there.
	if n, err := d.RemoveEndedInstallers(ctx); err != nil {
		log.Warn("remove ended installer containers", "err", err)
	} else if n > 0 {
		log.Info("removed installer containers a previous kiln left", "count", n)
	}
	if cfg.Dev {
		// kiln-test runs this very binary inside an image built FROM scratch
		// around it; build that image when it is missing (nothing is pulled).
		if err := d.EnsureKilnImage(ctx, docker.KilnTestImage, self); err != nil {
			log.Warn("the kiln-test image is not available; kiln-test servers cannot start on docker", "err", err)
		}
	}
	return d, docker.KilnImageBinary, func() { d.Close() }, nil
}
