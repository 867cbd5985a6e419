package docker

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/api/types/network"
	"github.com/moby/moby/client"

	"github.com/kilnhq/kiln/internal/runtime"
)

// DefaultPidsLimit caps the processes and threads of one container when
// Options.PidsLimit is zero: a JVM game server uses a few hundred threads,
// a fork bomb would use them all (the Wings advisory CVE-2021-32699).
const DefaultPidsLimit = 512

// Labels put on every container Kiln creates. Kiln only ever removes or
// re-attaches to containers that carry both, with the server's id.
const (
	LabelManaged = "kiln.managed"
	LabelServer  = "kiln.server"
)

const (
	dataDir    = "/data"                                   // where the server root is mounted
	tmpfsOpts  = "rw,exec,nosuid,nodev,size=64m,mode=1777" // exec: JVMs load native libraries from /tmp
	logMaxSize = "5m"
	apiTimeout = 30 * time.Second // Stop, Kill and the exit inspection have no caller ctx
)

// DefaultEngineWait is Options.EngineWait's default: an engine restart
// or upgrade takes seconds, a host reboot a few minutes.
const DefaultEngineWait = 5 * time.Minute

// ErrUnreachable means the Docker Engine did not answer; New wraps it with
// the address and the cause.
var ErrUnreachable = errors.New("docker engine unreachable")

// Options configure the docker runtime.
type Options struct {
	// Host is the engine address (unix:///var/run/docker.sock,
	// tcp://host:2376). Empty uses DOCKER_HOST (with DOCKER_TLS_VERIFY and
	// DOCKER_CERT_PATH) when set, else the platform default socket.
	Host string
	Log  *slog.Logger
	// User is the numeric "uid:gid" that game servers run as when their
	// Spec has no User of its own. Empty means kiln's own uid:gid, so the
	// files a server writes in its root belong to the user that runs kiln
	// (see doc.go).
	User string
	// ServerUsers says that every server's Spec carries a user of its own
	// (servers.Options.Users): User then runs only what has none (the
	// installers), and kiln running as root is no reason to warn.
	ServerUsers bool
	// PidsLimit caps processes+threads per container; 0 means
	// DefaultPidsLimit.
	PidsLimit int64
	// StopTimeout is the container's stop timeout: how long the engine
	// waits after SIGTERM before it kills the container when it stops it
	// itself (docker stop, the engine shutting down). kiln serve passes
	// the servers' stop grace (servers.Options.StopTimeout), so a server
	// has as long to save whoever stops it. Zero leaves the engine's
	// default (10 s); it is rounded up to whole seconds.
	StopTimeout time.Duration
	// EngineWait is how long Kiln waits for an engine that stopped
	// answering (a restart, an upgrade) before it gives up on a container
	// it watches or a start it was asked for; zero means
	// DefaultEngineWait (doc.go, "The engine going away").
	EngineWait time.Duration
	// Network is the bridge network game containers join, and the name of
	// its bridge interface (at most 15 characters: a lower-case letter,
	// then letters, digits, - and _); empty means DefaultNetwork. New
	// creates it when missing (doc.go, "Network").
	Network string
}

// Docker is the docker runtime: one container per game server.
type Docker struct {
	cli       *client.Client
	log       *slog.Logger
	user      string
	pidsLimit int64
	stopAfter *int   // whole seconds; nil: the engine's default
	network   string // the game containers' network and bridge
	wait      time.Duration

	mu   sync.Mutex
	live map[*Container]struct{} // attached instances, detached by Close
}

var _ runtime.Runtime = (*Docker)(nil)

// New connects to the engine, negotiating the API version (1.40 or later),
// makes sure the game containers' network exists (creating it when
// missing) and returns the runtime. It returns an error wrapping
// ErrUnreachable when the engine does not answer within ctx and 10
// seconds, and a plain error for an invalid Options.User or
// Options.Network, an engine that is not a Linux one, or a network of
// that name that is not Kiln's or lacks its options.
func New(ctx context.Context, o Options) (*Docker, error) {
	log := o.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	user, err := parseUser(o.User)
	if err != nil {
		return nil, err
	}
	if strings.HasPrefix(user, "0:") && !o.ServerUsers {
		log.Warn("docker game servers will run as root (uid 0, no capabilities); set a non-root uid:gid that owns the server roots", "user", user)
	}
	netName := o.Network
	if netName == "" {
		netName = DefaultNetwork
	}
	if !networkName.MatchString(netName) {
		return nil, fmt.Errorf("docker network %q: want 1 to 15 characters, a lower-case letter then letters, digits, - or _ (it names the bridge interface too)", netName)
	}
	pids := o.PidsLimit
	if pids <= 0 {
		pids = DefaultPidsLimit
	}
	opt := client.FromEnv
	if o.Host != "" {
		opt = client.WithHost(o.Host)
	}
	cli, err := client.New(opt)
	if err != nil {
		return nil, fmt.Errorf("docker client for %q: %w", o.Host, err)
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	ping, err := cli.Ping(pctx, client.PingOptions{NegotiateAPIVersion: true})
	if err != nil {
		cli.Close()
		if ping.APIVersion != "" { // it answered, but we cannot talk to it
			return nil, fmt.Errorf("docker engine at %s: %w", cli.DaemonHost(), err)
		}
		return nil, fmt.Errorf("%w at %s: %w", ErrUnreachable, cli.DaemonHost(), err)
	}
	if ping.OSType != "" && ping.OSType != "linux" {
		cli.Close()
		return nil, fmt.Errorf("docker engine at %s runs %s containers, kiln needs linux", cli.DaemonHost(), ping.OSType)
	}
	var stopAfter *int
	if o.StopTimeout > 0 {
		secs := int((o.StopTimeout + time.Second - 1) / time.Second)
		stopAfter = &secs
	}
	wait := o.EngineWait
	if wait <= 0 {
		wait = DefaultEngineWait
	}
	d := &Docker{cli: cli, log: log, user: user, pidsLimit: pids, stopAfter: stopAfter, network: netName, wait: wait, live: map[*Container]struct{}{}}
	if err := d.ensureNetwork(pctx); err != nil {
		cli.Close()
		return nil, err
	}
	log.Info("docker engine connected", "host", cli.DaemonHost(), "api_version", cli.ClientVersion(), "user", user, "server_users", o.ServerUsers, "pids_limit", pids,
		"stop_timeout", o.StopTimeout, "network", netName)
	return d, nil
}

// parseUser checks a numeric uid:gid; empty means the current process's.
// A bare uid is refused: without an /etc/passwd in the image the group
// would silently be 0.
func parseUser(u string) (string, error) {
	if u == "" {
		return strconv.Itoa(os.Getuid()) + ":" + strconv.Itoa(os.Getgid()), nil
	}
	uid, gid, ok := strings.Cut(u, ":")
	_, err1 := strconv.ParseUint(uid, 10, 32)
	_, err2 := strconv.ParseUint(gid, 10, 32)
	if !ok || err1 != nil || err2 != nil {
		return "", fmt.Errorf("docker user %q: want numeric uid:gid", u)
	}
	return u, nil
}

// Name implements runtime.Runtime.
func (d *Docker) Name() string { return "docker" }

// Close detaches every instance still attached (their containers keep
// running) and releases the client. The runtime is unusable afterwards.
func (d *Docker) Close() error {
	d.mu.Lock()
	live := make([]*Container, 0, len(d.live))
	for c := range d.live {
		live = append(live, c)
	}
	d.mu.Unlock()
	for _, c := range live {
		c.Detach()
	}
	return d.cli.Close()
}

// ContainerName is the name of a server's container.
func ContainerName(serverID string) string { return "kiln-" + serverID }

// Start implements runtime.Runtime: it removes a container left by a
// previous run of the server, creates the container, attaches the console
// and only then starts it, so no early line is lost. It never pulls: a
// missing image is an error that says so. An engine that does not answer
// is waited for (Options.EngineWait, within ctx), then asked once more.
func (d *Docker) Start(ctx context.Context, spec runtime.Spec, console func(string)) (runtime.Instance, error) {
	opts, err := d.createOptions(spec)
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", spec.ServerID, err)
	}
	if console == nil {
		console = func(string) {}
	}
	inst, err := d.start(ctx, spec, opts, console)
	if err == nil || !client.IsErrConnectionFailed(err) {
		return inst, err
	}
	d.log.WarnContext(ctx, "the container engine does not answer; waiting for it before starting", "server_id", spec.ServerID, "err", err)
	console("[kiln] waiting for the container engine")
	if werr := d.awaitEngine(ctx); werr != nil {
		return nil, err
	}
	return d.start(ctx, spec, opts, console)
}

func (d *Docker) start(ctx context.Context, spec runtime.Spec, opts client.ContainerCreateOptions, console func(string)) (runtime.Instance, error) {
	if err := d.removeStale(ctx, spec.ServerID); err != nil {
		return nil, fmt.Errorf("start %s: %w", spec.ServerID, err)
	}
	if spec.User == nil { // a user of its own owns its root already (servers.runAs)
		if err := d.handOver(spec.Root); err != nil {
			return nil, fmt.Errorf("start %s: %w", spec.ServerID, &runtime.Error{Reason: "the server's files could not be handed to the user its container runs as", Err: err})
		}
	}
	res, err := d.cli.ContainerCreate(ctx, opts)
	if err != nil {
		if cerrdefs.IsNotFound(err) {
			return nil, fmt.Errorf("start %s: %w", spec.ServerID, &runtime.Error{
				Reason: fmt.Sprintf("the image %s is not on the container host (Kiln never pulls one; the operator loads or builds it)", spec.Image),
				Err:    err})
		}
		return nil, fmt.Errorf("start %s: %w", spec.ServerID, engineErr(err, "create the server's container"))
	}
	for _, w := range res.Warnings {
		d.log.Warn("docker create warning", "server_id", spec.ServerID, "warning", w)
	}
	c, err := d.attach(ctx, res.ID, console, container.WaitConditionNextExit)
	if err != nil {
		d.discard(res.ID)
		return nil, fmt.Errorf("start %s: %w", spec.ServerID, engineErr(err, "attach the server's console"))
	}
	if _, err := d.cli.ContainerStart(ctx, res.ID, client.ContainerStartOptions{}); err != nil {
		c.Detach()
		d.discard(res.ID)
		return nil, fmt.Errorf("start %s: %w", spec.ServerID, engineErr(err, "start the server's container"))
	}
	return c, nil
}

// awaitEngine returns once the engine answers (answers), trying again
// after 100 ms, then twice as long each time up to 5 s; an error when ctx
// ends or Options.EngineWait passes first.
func (d *Docker) awaitEngine(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, d.wait)
	defer cancel()
	backoff := 100 * time.Millisecond
	for {
		err := d.answers(ctx)
		if err == nil {
			return nil
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%w: it did not answer within %s: %w", runtime.ErrEngineAway, d.wait, err)
		case <-t.C:
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// AwaitEngine returns once the engine answers, or with ctx's error: it
// waits as long as ctx lets it, unlike the runtime's own waits
// (Options.EngineWait). servers waits so for the engine before it starts
// again a server whose start failed with runtime.ErrEngineAway.
func (d *Docker) AwaitEngine(ctx context.Context) error {
	backoff := 100 * time.Millisecond
	for {
		if err := d.answers(ctx); err == nil {
			return nil
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// answers pings the engine on a connection of its own, never one the
// client keeps alive: an engine that is shutting down closes its listener
// first, then stops its containers, and still answers on the connections
// already open (the waits of those containers among them), so only a new
// connection tells that it is going away.
func (d *Docker) answers(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	conn, err := d.cli.Dialer()(ctx)
	if err != nil {
		return fmt.Errorf("connect to the engine: %w", err)
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://docker/_ping", nil)
	if err != nil {
		return err
	}
	req.Close = true
	if err := req.Write(conn); err != nil {
		return fmt.Errorf("ping the engine: %w", err)
	}
	res, err := http.ReadResponse(bufio.NewReader(conn), req)
	if err != nil {
		return fmt.Errorf("ping the engine: %w", err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("ping the engine: %s", res.Status)
	}
	return nil
}

// createOptions is the whole container definition; doc.go says why each
// hardening item is there.
func (d *Docker) createOptions(spec runtime.Spec) (client.ContainerCreateOptions, error) {
	var none client.ContainerCreateOptions
	switch {
	case spec.ServerID == "":
		return none, errors.New("no server id")
	case spec.Image == "":
		return none, errors.New("no container image")
	case len(spec.Argv) == 0:
		return none, errors.New("empty command")
	case !filepath.IsAbs(spec.Root):
		return none, fmt.Errorf("server root %q is not an absolute path", spec.Root)
	case spec.Port < 0 || spec.Port > 65535:
		return none, fmt.Errorf("port %d out of range", spec.Port)
	case spec.MemoryMB < 0 || spec.CPUPercent < 0:
		return none, errors.New("negative resource limit")
	}
	hostIP, err := bindAddr(spec.BindHost)
	if err != nil {
		return none, err
	}
	// Port 0 publishes nothing (an installer run: InstallRunner).
	var exposed network.PortSet
	var published network.PortMap
	if spec.Port != 0 {
		tcp, _ := network.PortFrom(uint16(spec.Port), network.TCP)
		udp, _ := network.PortFrom(uint16(spec.Port), network.UDP)
		binding := []network.PortBinding{{HostIP: hostIP, HostPort: strconv.Itoa(spec.Port)}}
		exposed = network.PortSet{tcp: {}, udp: {}}
		published = network.PortMap{tcp: binding, udp: binding}
	}

	res := container.Resources{PidsLimit: &d.pidsLimit}
	if spec.MemoryMB > 0 {
		res.Memory = int64(spec.MemoryMB) << 20
		res.MemorySwap = res.Memory // memory+swap = memory: no swap
	}
	if spec.CPUPercent > 0 {
		res.CPUPeriod = 100_000
		res.CPUQuota = int64(spec.CPUPercent) * 1000
	}
	user := d.user
	if u := spec.User; u != nil {
		user = strconv.FormatUint(uint64(u.UID), 10) + ":" + strconv.FormatUint(uint64(u.GID), 10)
	}
	init := true
	return client.ContainerCreateOptions{
		Name: ContainerName(spec.ServerID),
		Config: &container.Config{
			Image:        spec.Image,
			Entrypoint:   []string{}, // empty, not nil: clears the image's entrypoint
			Cmd:          spec.Argv,
			Env:          runtime.WithHome(spec.Env, dataDir),
			WorkingDir:   dataDir,
			User:         user,
			AttachStdin:  true,
			AttachStdout: true,
			AttachStderr: true,
			OpenStdin:    true,
			Tty:          false,
			ExposedPorts: exposed,
			Labels:       map[string]string{LabelManaged: "true", LabelServer: spec.ServerID},
			StopTimeout:  d.stopAfter,
		},
		HostConfig: &container.HostConfig{
			Mounts: []mount.Mount{{
				Type:        mount.TypeBind,
				Source:      spec.Root,
				Target:      dataDir,
				BindOptions: &mount.BindOptions{Propagation: mount.PropagationRPrivate},
			}},
			PortBindings:   published,
			NetworkMode:    container.NetworkMode(d.network),
			LogConfig:      container.LogConfig{Type: "json-file", Config: map[string]string{"max-size": logMaxSize, "max-file": "1"}},
			RestartPolicy:  container.RestartPolicy{Name: container.RestartPolicyDisabled},
			Privileged:     false,
			CapDrop:        []string{"ALL"},
			SecurityOpt:    []string{"no-new-privileges:true"},
			ReadonlyRootfs: true,
			Tmpfs:          map[string]string{"/tmp": tmpfsOpts},
			Init:           &init,
			Resources:      res,
		},
	}, nil
}

// bindAddr is the host address a game port is published on: empty means
// every interface. Docker needs an address, so a host name other than
// localhost is refused rather than resolved to an address that may not be
// local (a public name behind NAT).
func bindAddr(h string) (netip.Addr, error) {
	switch h {
	case "", "*":
		return netip.Addr{}, nil
	case "localhost":
		return netip.AddrFrom4([4]byte{127, 0, 0, 1}), nil
	}
	a, err := netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(h, "["), "]"))
	if err != nil {
		return netip.Addr{}, fmt.Errorf("bind host %q is not an IP address", h)
	}
	return a.Unmap(), nil
}

// owned tells whether Kiln created c for serverID.
func owned(c container.InspectResponse, serverID string) bool {
	if c.Config == nil {
		return false
	}
	return c.Config.Labels[LabelManaged] == "true" && c.Config.Labels[LabelServer] == serverID
}

// inspectOwned returns the server's container found by ref, or nil when
// there is none that Kiln made for serverID. A container of that name that
// Kiln did not make is an error: it is never touched.
func (d *Docker) inspectOwned(ctx context.Context, serverID, ref string) (*container.InspectResponse, error) {
	res, err := d.cli.ContainerInspect(ctx, ref, client.ContainerInspectOptions{})
	if cerrdefs.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, engineErr(fmt.Errorf("inspect container %s: %w", ref, err), "look up the server's container")
	}
	if !owned(res.Container, serverID) {
		if ref == ContainerName(serverID) {
			return nil, &runtime.Error{Reason: "a container of the server's name that Kiln did not make is in the way (the operator removes or renames it)",
				Err: fmt.Errorf("container %s was not created by kiln for this server; remove or rename it", ref)}
		}
		return nil, nil
	}
	return &res.Container, nil
}

// removeStale force-removes the server's container left by a previous run.
func (d *Docker) removeStale(ctx context.Context, serverID string) error {
	c, err := d.inspectOwned(ctx, serverID, ContainerName(serverID))
	if err != nil || c == nil {
		return err
	}
	if c.State != nil && c.State.Running {
		d.log.WarnContext(ctx, "removing a running container of this server that kiln no longer holds", "server_id", serverID, "container_id", c.ID)
	}
	return d.remove(ctx, c.ID)
}

// RemoveEndedInstallers removes the installer containers (server id
// "install-…", runtime.InstallRunner) that have ended but are still there:
// what a kiln killed during an installer run leaves. A running one is
// left alone: it may be another kiln's on the same engine, or the crashed
// one's still finishing (the next start removes it). It returns how many
// it removed.
func (d *Docker) RemoveEndedInstallers(ctx context.Context) (int, error) {
	list, err := d.cli.ContainerList(ctx, client.ContainerListOptions{All: true,
		Filters: client.Filters{}.Add("label", LabelManaged+"=true")})
	if err != nil {
		return 0, fmt.Errorf("list installer containers: %w", err)
	}
	n := 0
	for _, c := range list.Items {
		if !strings.HasPrefix(c.Labels[LabelServer], "install-") || c.State == container.StateRunning {
			continue
		}
		if err := d.remove(ctx, c.ID); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

func (d *Docker) remove(ctx context.Context, id string) error {
	_, err := d.cli.ContainerRemove(ctx, id, client.ContainerRemoveOptions{Force: true})
	if err != nil && !cerrdefs.IsNotFound(err) {
		return engineErr(fmt.Errorf("remove container %s: %w", id, err), "remove the server's container")
	}
	return nil
}

// engineErr is err, an error of the engine while Kiln tried to do
// something (a phrase: "start the server's container"), with a sentence a
// team may read (runtime.Error): the engine's own message names its
// address or socket, host paths, other containers. The caller's ctx
// ending is left as it is.
func engineErr(err error, doing string) error {
	switch {
	case errors.Is(err, context.Canceled):
		return err
	case client.IsErrConnectionFailed(err):
		return &runtime.Error{Reason: "the container engine is unavailable", Err: fmt.Errorf("%w: %w", runtime.ErrEngineAway, err)}
	case errors.Is(err, context.DeadlineExceeded):
		return &runtime.Error{Reason: "the container engine did not answer in time", Err: err}
	}
	return &runtime.Error{Reason: "the container engine failed to " + doing, Err: err}
}

// discard removes a container that failed to start; the start error is the
// one worth reporting, so a failure here is only logged.
func (d *Docker) discard(id string) {
	ctx, cancel := context.WithTimeout(context.Background(), apiTimeout)
	defer cancel()
	if err := d.remove(ctx, id); err != nil {
		d.log.Warn("remove a container that failed to start", "container_id", id, "err", err)
	}
}

// Adopt implements runtime.Runtime: it re-attaches to the server's running
// container found by ref (its id) or, failing that, by name. The console
// first receives the last replayLines lines the container logged before
// (from the engine's json-file log, so a restart of kiln does not empty a
// server's console), then its output from now on. A line logged during the
// few milliseconds the attach takes may be missing; none is delivered
// twice. A container that exists but no longer runs is removed and, like a
// missing one, reported as runtime.ErrNotAdoptable.
func (d *Docker) Adopt(ctx context.Context, spec runtime.Spec, ref string, console func(string)) (runtime.Instance, error) {
	var c *container.InspectResponse
	var err error
	if ref != "" {
		if c, err = d.inspectOwned(ctx, spec.ServerID, ref); err != nil {
			return nil, fmt.Errorf("adopt %s: %w", spec.ServerID, err)
		}
	}
	if c == nil {
		if c, err = d.inspectOwned(ctx, spec.ServerID, ContainerName(spec.ServerID)); err != nil {
			return nil, fmt.Errorf("adopt %s: %w", spec.ServerID, err)
		}
	}
	if c == nil {
		return nil, runtime.ErrNotAdoptable
	}
	if c.State == nil || !c.State.Running {
		if err := d.remove(ctx, c.ID); err != nil {
			return nil, fmt.Errorf("adopt %s: %w", spec.ServerID, err)
		}
		return nil, runtime.ErrNotAdoptable
	}
	if console == nil {
		console = func(string) {}
	}
	// Live lines wait behind the gate until the replay is delivered, so
	// the console stays in order.
	gate := &replayGate{console: console}
	until := time.Now()
	inst, err := d.attach(ctx, c.ID, gate.live, container.WaitConditionNotRunning)
	if err != nil {
		return nil, fmt.Errorf("adopt %s: %w", spec.ServerID, err)
	}
	if err := d.replay(ctx, c.ID, until, console); err != nil {
		d.log.WarnContext(ctx, "replay a re-attached container's console", "server_id", spec.ServerID, "err", err)
	}
	gate.open()
	d.log.InfoContext(ctx, "re-attached to a running container", "server_id", spec.ServerID, "container_id", c.ID)
	return inst, nil
}

// replayLines is how many earlier lines Adopt replays: the console's size
// (api.md §3, servers.consoleLines).
const replayLines = 2000

// replay delivers to console the last replayLines lines container id
// logged before until.
func (d *Docker) replay(ctx context.Context, id string, until time.Time, console func(string)) error {
	rc, err := d.cli.ContainerLogs(ctx, id, client.ContainerLogsOptions{
		ShowStdout: true, ShowStderr: true,
		Tail:  strconv.Itoa(replayLines),
		Until: strconv.FormatFloat(float64(until.UnixNano())/1e9, 'f', 9, 64),
	})
	if err != nil {
		return fmt.Errorf("container logs: %w", err)
	}
	defer rc.Close()
	out, errOut := newLineWriter(console), newLineWriter(console)
	_, err = stdcopy.StdCopy(out, errOut, rc)
	out.Flush()
	errOut.Flush()
	return err
}

// replayGate holds live console lines until open, then passes them on.
type replayGate struct {
	console func(string)
	mu      sync.Mutex
	opened  bool
	held    []string
}

func (g *replayGate) live(line string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.opened {
		g.held = append(g.held, line)
		return
	}
	g.console(line)
}

// open delivers the held lines, in order, and lets the next ones through.
func (g *replayGate) open() {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, l := range g.held {
		g.console(l)
	}
	g.held, g.opened = nil, true
}

// Remove implements runtime.Runtime: it force-removes the server's
// container if there is one (killing it if it runs). Removing twice is not
// an error.
func (d *Docker) Remove(ctx context.Context, serverID string) error {
	c, err := d.inspectOwned(ctx, serverID, ContainerName(serverID))
	if err != nil {
		return fmt.Errorf("remove %s: %w", serverID, err)
	}
	if c == nil {
		return nil
	}
	if err := d.remove(ctx, c.ID); err != nil {
		return fmt.Errorf("remove %s: %w", serverID, err)
	}
	return nil
}

func (d *Docker) track(c *Container) {
	d.mu.Lock()
	d.live[c] = struct{}{}
	d.mu.Unlock()
}

func (d *Docker) forget(c *Container) {
	d.mu.Lock()
	delete(d.live, c)
	d.mu.Unlock()
}
