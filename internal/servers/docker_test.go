package servers_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"

	"github.com/kilnhq/kiln/internal/runtime"
	"github.com/kilnhq/kiln/internal/runtime/docker"
	"github.com/kilnhq/kiln/internal/servers"
	"github.com/kilnhq/kiln/internal/servers/serverstest"
	"github.com/kilnhq/kiln/internal/slp"
	"github.com/kilnhq/kiln/internal/store/storetest"
)

// dockerRuntime connects to the engine the test command started, or skips
// with one loud line (fails under KILN_REQUIRE_DOCKER=1), and makes sure the
// kiln-test image holds this build of kiln.
func dockerRuntime(t *testing.T) *docker.Docker {
	t.Helper()
	user := ""
	if os.Getuid() == 0 {
		user = "10001:10001" // never run a game server as root
	}
	d, err := docker.New(t.Context(), docker.Options{User: user, Network: testNetwork(t, ""), Log: slog.New(slog.DiscardHandler)})
	if errors.Is(err, docker.ErrUnreachable) && os.Getenv("KILN_REQUIRE_DOCKER") != "1" {
		t.Skipf("SKIP DOCKER SUITE: %v (set KILN_REQUIRE_DOCKER=1 to fail instead)", err)
	}
	if err != nil {
		t.Fatalf("docker.New = %v", err)
	}
	t.Cleanup(func() { d.Close() })
	if err := d.EnsureKilnImage(t.Context(), docker.KilnTestImage, serverstest.KilnBinary(t)); err != nil {
		t.Fatalf("EnsureKilnImage = %v", err)
	}
	return d
}

// testNetwork names a network of the test's own for the runtime to make
// on the engine at host (empty: the default one), and removes it when the
// test ends (after its containers, whose cleanups come later and so run
// first).
func testNetwork(t *testing.T, host string) string {
	t.Helper()
	name := fmt.Sprintf("kt%08x", rand.Uint32())
	t.Cleanup(func() {
		opt := client.FromEnv
		if host != "" {
			opt = client.WithHost(host)
		}
		cli, err := client.New(opt)
		if err != nil {
			return
		}
		defer cli.Close()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := cli.NetworkRemove(ctx, name, client.NetworkRemoveOptions{}); err != nil && !cerrdefs.IsNotFound(err) && !client.IsErrConnectionFailed(err) {
			t.Errorf("remove network %s: %v", name, err)
		}
	})
	return name
}

// runningInDocker makes a kiln-test server of the team on the docker
// runtime d, removed from the engine when the test ends, starts it and
// waits for it to run.
func runningInDocker(t *testing.T, svc *servers.Service, d *docker.Docker, teamID string) servers.Server {
	t.Helper()
	sv := newTestServer(t, svc, teamID)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = d.Remove(ctx, sv.ID)
	})
	if err := svc.Power(t.Context(), teamID, sv.ID, "start"); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, svc, teamID, sv.ID, servers.StatusRunning)
	return sv
}

// TestDockerLifecycle runs a kiln-test server as a container: install,
// start → running (the status ping answers through the published port),
// command, stop, start again, kill, delete (the container goes with it).
func TestDockerLifecycle(t *testing.T) {
	d := dockerRuntime(t)
	db := storetest.SQLite(t)
	teamID := team(t, db)
	env := serverstest.New(t, db, serverstest.Options{Runtime: d, KilnBin: docker.KilnImageBinary})
	svc := env.Service
	sv := runningInDocker(t, svc, d, teamID)
	ref := runtimeRef(t, db, sv.ID)
	if len(ref) != 64 {
		t.Errorf("runtime_ref = %q, want a container id", ref)
	}
	if _, err := slp.Ping(t.Context(), sv.Address); err != nil {
		t.Fatalf("ping %s: %v", sv.Address, err)
	}
	// Inside the container HOME is where the root is mounted, and nothing
	// the server is told names a path of the host.
	cli, err := client.New(client.FromEnv)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	res, err := cli.ContainerInspect(t.Context(), ref, client.ContainerInspectOptions{})
	if err != nil {
		t.Fatalf("ContainerInspect = %v", err)
	}
	if !slices.Contains(res.Container.Config.Env, "HOME=/data") {
		t.Errorf("container env = %q, want HOME=/data", res.Container.Config.Env)
	}
	for _, kv := range slices.Concat(res.Container.Config.Env, res.Container.Config.Cmd, res.Container.Config.Entrypoint) {
		if strings.Contains(kv, env.DataDir) {
			t.Errorf("container env or command %q names the host data dir %s", kv, env.DataDir)
		}
	}
	if err := svc.Command(t.Context(), teamID, sv.ID, "say from docker"); err != nil {
		t.Fatal(err)
	}
	waitConsole(t, svc, teamID, sv.ID, "[Server] from docker", 1)

	// Live figures come from the engine.
	got := waitFor(t, svc, teamID, sv.ID, "sampled", func(s servers.Server) bool { return s.Resources.UptimeMS > 0 })
	if got.Resources.UptimeMS <= 0 {
		t.Errorf("resources = %+v", got.Resources)
	}

	if err := svc.Power(t.Context(), teamID, sv.ID, "stop"); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, svc, teamID, sv.ID, servers.StatusOffline)
	waitConsole(t, svc, teamID, sv.ID, "[kiln] server stopped (exit code 0)", 1)
	if err := svc.Power(t.Context(), teamID, sv.ID, "start"); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, svc, teamID, sv.ID, servers.StatusRunning)
	if err := svc.Power(t.Context(), teamID, sv.ID, "kill"); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, svc, teamID, sv.ID, servers.StatusOffline)
	waitConsole(t, svc, teamID, sv.ID, "killed", 1)

	if err := svc.Delete(t.Context(), teamID, sv.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(env.Node.Root(sv.ID)); !os.IsNotExist(err) {
		t.Errorf("root after delete: %v", err)
	}
	// The container is gone: adopting it fails.
	if _, err := d.Adopt(t.Context(), runtime.Spec{ServerID: sv.ID}, ref, func(string) {}); !errors.Is(err, runtime.ErrNotAdoptable) {
		t.Errorf("Adopt after delete = %v, want ErrNotAdoptable (no container left)", err)
	}
}

// TestDockerEngineGone: the engine goes away after Kiln connected to it (a
// socket that no longer exists). A start waits for it (EngineWait), then
// the server waits offline, its desired state running, for the engine to
// come back (not crashed: TestDockerEngineAwayLong brings it back), and
// the team's console says so in sentences that name neither the socket
// nor the engine's address; the detail is the log's.
func TestDockerEngineGone(t *testing.T) {
	host, gone := vanishingEngine(t)
	var logged strings.Builder
	var mu sync.Mutex
	log := slog.New(slog.NewTextHandler(writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return logged.Write(p)
	}), nil))
	d, err := docker.New(t.Context(), docker.Options{Host: host, Network: testNetwork(t, ""), EngineWait: time.Second, Log: log})
	if err != nil {
		t.Fatalf("docker.New(%s) = %v", host, err)
	}
	t.Cleanup(func() { d.Close() })
	db := storetest.SQLite(t)
	teamID := team(t, db)
	env := serverstest.New(t, db, serverstest.Options{Runtime: d, KilnBin: docker.KilnImageBinary, Log: log})
	sv := newTestServer(t, env.Service, teamID)
	sock := gone()

	if err := env.Service.Power(t.Context(), teamID, sv.ID, "start"); err != nil {
		t.Fatal(err)
	}
	want := "[kiln] the container engine is away; the server starts once it is back"
	waitConsole(t, env.Service, teamID, sv.ID, want, 1)
	if got, err := env.Service.Get(t.Context(), teamID, sv.ID); err != nil || got.Status != servers.StatusOffline || got.DesiredState != "running" {
		t.Errorf("while the engine is gone: %+v, %v; want offline, desired running", got, err)
	}
	lines, err := env.Service.Console(t.Context(), teamID, sv.ID, 2000)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(lines, "[kiln] waiting for the container engine") || slices.ContainsFunc(lines, func(l string) bool { return strings.Contains(l, "failed to start") }) {
		t.Errorf("console = %q, want the start waiting, then the line %q, and no failed start", lines, want)
	}
	for _, l := range lines {
		if strings.Contains(l, sock) || strings.Contains(l, "unix://") || strings.Contains(strings.ToLower(l), "docker") {
			t.Errorf("console line %q names the engine (its socket is %s)", l, sock)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if !strings.Contains(logged.String(), sock) {
		t.Errorf("the log does not name the socket %s; it has:\n%s", sock, logged.String())
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// vanishingEngine is a unix socket in a directory of the test that passes
// every connection on to the engine the test command started (or skips,
// as dockerRuntime does). gone closes it and every connection through it,
// removes the socket and returns its path: from then on, the engine Kiln
// was given no longer exists.
func vanishingEngine(t *testing.T) (host string, gone func() string) {
	t.Helper()
	cli, err := client.New(client.FromEnv)
	if err != nil {
		t.Fatal(err)
	}
	upstream := cli.DaemonHost()
	cli.Close()
	network, addr, ok := strings.Cut(upstream, "://")
	if !ok {
		t.Fatalf("engine address %q", upstream)
	}
	if c, err := net.Dial(network, addr); err != nil {
		if os.Getenv("KILN_REQUIRE_DOCKER") != "1" {
			t.Skipf("SKIP DOCKER SUITE: %v (set KILN_REQUIRE_DOCKER=1 to fail instead)", err)
		}
		t.Fatalf("the engine at %s: %v", upstream, err)
	} else {
		c.Close()
	}
	sock := filepath.Join(t.TempDir(), "engine.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	var wg sync.WaitGroup
	track := func(c net.Conn) bool {
		mu.Lock()
		defer mu.Unlock()
		if conns == nil {
			c.Close()
			return false
		}
		conns = append(conns, c)
		return true
	}
	conns = []net.Conn{}
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial(network, addr)
			if err != nil {
				c.Close()
				continue
			}
			if !track(c) || !track(up) {
				c.Close()
				up.Close()
				continue
			}
			wg.Go(func() { _, _ = io.Copy(up, c); up.Close() })
			wg.Go(func() { _, _ = io.Copy(c, up); c.Close() })
		}
	})
	var once sync.Once
	gone = func() string {
		once.Do(func() {
			ln.Close() // removes the socket
			mu.Lock()
			for _, c := range conns {
				c.Close()
			}
			conns = nil
			mu.Unlock()
			wg.Wait()
		})
		if _, err := os.Stat(sock); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("the socket %s is still there: %v", sock, err)
		}
		return sock
	}
	t.Cleanup(func() { gone() })
	return "unix://" + sock, gone
}
