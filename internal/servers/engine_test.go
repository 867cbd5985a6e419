package servers_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kilnhq/kiln/internal/runtime/docker"
	"github.com/kilnhq/kiln/internal/servers"
	"github.com/kilnhq/kiln/internal/servers/serverstest"
	"github.com/kilnhq/kiln/internal/slp"
	"github.com/kilnhq/kiln/internal/store/storetest"
)

// TestDockerEngineRestart restarts the Docker Engine (one of the test's
// own) under a running server, as an upgrade or `systemctl restart docker`
// does (SIGTERM: the engine stops the container as it goes), or after it
// was killed (SIGKILL: the container outlives it, and the engine ends it
// when it comes back, without live-restore). Once the engine is back, the
// server runs again in a new container, restarted once (not a crash
// loop), and its status did not stay crashed: Kiln waited for the engine
// rather than trying a start while it was away and giving up.
func TestDockerEngineRestart(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		t.Run(sig.String(), func(t *testing.T) { engineRestart(t, sig) })
	}
}

func engineRestart(t *testing.T, sig syscall.Signal) {
	eng := privateEngine(t)
	user := ""
	if os.Getuid() == 0 {
		user = "10001:10001"
	}
	d, err := docker.New(t.Context(), docker.Options{Host: eng.host, User: user, Network: testNetwork(t, eng.host),
		Log: slog.New(slog.NewTextHandler(t.Output(), nil))})
	if err != nil {
		t.Fatalf("docker.New(%s) = %v", eng.host, err)
	}
	t.Cleanup(func() { d.Close() })
	if err := d.EnsureKilnImage(t.Context(), docker.KilnTestImage, serverstest.KilnBinary(t)); err != nil {
		t.Fatalf("EnsureKilnImage = %v", err)
	}
	db := storetest.SQLite(t)
	teamID := team(t, db)
	// A restart is tried 50 ms after a crash: long before the engine is
	// back, were it tried while the engine is away.
	env := serverstest.New(t, db, serverstest.Options{Runtime: d, KilnBin: docker.KilnImageBinary,
		Servers: servers.Options{RestartBackoff: 50 * time.Millisecond}})
	svc := env.Service
	sv := runningInDocker(t, svc, d, teamID)
	before := runtimeRef(t, db, sv.ID)
	events, stop, err := svc.Stream(t.Context(), teamID, sv.ID)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()

	eng.restart(t, sig)

	// Running again, in a new container, with every status it went
	// through on the way.
	var statuses []string
	deadline := time.After(3 * time.Minute)
	for running := false; !running; {
		select {
		case ev, ok := <-events:
			if !ok {
				t.Fatalf("the console stream ended; statuses so far %q", statuses)
			}
			if ev.Kind == "status" {
				statuses = append(statuses, ev.Data)
				running = ev.Data == servers.StatusRunning
			}
		case <-deadline:
			cur, _ := svc.Get(t.Context(), teamID, sv.ID)
			lines, _ := svc.Console(t.Context(), teamID, sv.ID, 2000)
			t.Fatalf("the server is %s 3 minutes after the engine restarted (statuses %q); console:\n%s", cur.Status, statuses, strings.Join(lines, "\n"))
		}
	}
	if after := runtimeRef(t, db, sv.ID); after == "" || after == before {
		t.Errorf("runtime_ref after the engine restart = %q, want a new container (was %q)", after, before)
	}
	if _, err := slp.Ping(t.Context(), sv.Address); err != nil {
		t.Errorf("ping %s after the engine restart: %v", sv.Address, err)
	}
	// One crash, one restart, one start: crashed only on the way.
	if want := []string{servers.StatusCrashed, servers.StatusStarting, servers.StatusRunning}; !slices.Equal(statuses, want) {
		t.Errorf("statuses after the engine restart = %q, want %q", statuses, want)
	}
	lines, err := svc.Console(t.Context(), teamID, sv.ID, 2000)
	if err != nil {
		t.Fatal(err)
	}
	count := func(sub string) int {
		n := 0
		for _, l := range lines {
			if strings.Contains(l, sub) {
				n++
			}
		}
		return n
	}
	if count("[kiln] restarting in") != 1 || count("[kiln] failed to start") != 0 {
		t.Errorf("console after the engine restart: want one restart and no failed start:\n%s", strings.Join(lines, "\n"))
	}
}

// TestDockerEngineAwayLong stops the Docker Engine under a running server
// for longer than Kiln waits for it (EngineWait, 2 s here; 5 min by
// default): the server is not left crashed. It waits offline, its desired
// state running, saying so once on its console, and runs again when the
// engine is back — without a Kiln restart, and (a second absence) across
// one: the Kiln started after the engine came back starts it.
func TestDockerEngineAwayLong(t *testing.T) {
	eng := privateEngine(t)
	user := ""
	if os.Getuid() == 0 {
		user = "10001:10001"
	}
	network := testNetwork(t, eng.host)
	connect := func() *docker.Docker {
		t.Helper()
		d, err := docker.New(t.Context(), docker.Options{Host: eng.host, User: user, Network: network, EngineWait: 2 * time.Second,
			Log: slog.New(slog.NewTextHandler(t.Output(), nil))})
		if err != nil {
			t.Fatalf("docker.New(%s) = %v", eng.host, err)
		}
		t.Cleanup(func() { d.Close() })
		return d
	}
	d := connect()
	if err := d.EnsureKilnImage(t.Context(), docker.KilnTestImage, serverstest.KilnBinary(t)); err != nil {
		t.Fatalf("EnsureKilnImage = %v", err)
	}
	db := storetest.SQLite(t)
	teamID := team(t, db)
	dir := t.TempDir()
	opts := func(d *docker.Docker) serverstest.Options {
		return serverstest.Options{Runtime: d, KilnBin: docker.KilnImageBinary, DataDir: dir,
			Servers: servers.Options{RestartBackoff: 50 * time.Millisecond}}
	}
	env := serverstest.New(t, db, opts(d))
	svc := env.Service
	sv := runningInDocker(t, svc, d, teamID)
	const waiting = "[kiln] the container engine is away; the server starts once it is back"
	away := func(svc *servers.Service, times int) {
		t.Helper()
		waitConsole(t, svc, teamID, sv.ID, waiting, times)
		cur, err := svc.Get(t.Context(), teamID, sv.ID)
		if err != nil {
			t.Fatal(err)
		}
		if cur.Status != servers.StatusOffline || cur.DesiredState != "running" {
			t.Errorf("while the engine is away: status %s, desired %s; want offline, running", cur.Status, cur.DesiredState)
		}
	}

	// Away longer than the wait, Kiln running: back with the engine.
	eng.stop(t, syscall.SIGTERM)
	away(svc, 1)
	eng.start(t)
	waitStatus(t, svc, teamID, sv.ID, servers.StatusRunning)
	if _, err := slp.Ping(t.Context(), sv.Address); err != nil {
		t.Errorf("ping %s once the engine is back: %v", sv.Address, err)
	}

	// Away again, and Kiln restarted once the engine is back (kiln serve
	// does not start without its engine).
	eng.stop(t, syscall.SIGTERM)
	away(svc, 2)
	env.Stop()
	eng.start(t)
	env2 := serverstest.New(t, db, opts(connect()))
	got := waitStatus(t, env2.Service, teamID, sv.ID, servers.StatusRunning)
	if _, err := slp.Ping(t.Context(), got.Address); err != nil {
		t.Errorf("ping %s after the Kiln restart: %v", got.Address, err)
	}
}

// engine is a dockerd of a test's own.
type engine struct {
	host   string // unix://…
	args   []string
	dir    string
	cmd    *exec.Cmd
	exited chan error // cmd's end
}

// privateEngine starts a Docker Engine of the test's own, on its own
// socket, data root, exec root (its own containerd), cgroup parent and
// default bridge (a bridge interface made for it: with --bridge none,
// dockerd would delete the host's docker0), without iptables rules, so
// that restarting it disturbs no other test. It needs root and dockerd;
// without them it skips (fails with KILN_REQUIRE_DOCKER=1). The engine is
// stopped and its files removed when the test ends.
func privateEngine(t *testing.T) *engine {
	t.Helper()
	skip := func(why string) {
		t.Helper()
		if os.Getenv("KILN_REQUIRE_DOCKER") == "1" {
			t.Fatalf("a private Docker Engine: %s", why)
		}
		t.Skipf("SKIP DOCKER ENGINE RESTART: %s (set KILN_REQUIRE_DOCKER=1 to fail instead)", why)
	}
	if os.Geteuid() != 0 {
		skip("starting dockerd needs root")
	}
	if _, err := exec.LookPath("dockerd"); err != nil {
		skip("dockerd is not installed")
	}
	// Short: containerd's socket lives below it, and a unix socket's path
	// has at most 107 bytes.
	dir, err := os.MkdirTemp("", "kd")
	if err != nil {
		t.Fatal(err)
	}
	tag := fmt.Sprintf("%06x", rand.Uint32()>>8)
	br := "kd" + tag
	cgroup := "kilntest-" + tag
	subnet := freeSubnet(t)
	ip(t, "link", "add", br, "type", "bridge")
	e := &engine{host: "unix://" + filepath.Join(dir, "sock"), dir: dir, args: []string{
		"--host", "unix://" + filepath.Join(dir, "sock"),
		"--data-root", filepath.Join(dir, "data"), "--exec-root", filepath.Join(dir, "exec"),
		"--pidfile", filepath.Join(dir, "pid"), "--cgroup-parent", "/" + cgroup,
		"--containerd-namespace", cgroup, "--containerd-plugins-namespace", cgroup + "-plugins",
		"--bridge", br, "--iptables=false", "--ip-masq=false", "--storage-driver", "vfs",
	}}
	t.Cleanup(func() {
		if e.cmd != nil {
			e.stop(t, syscall.SIGTERM)
		}
		// What a killed engine leaves: its mounts below dir, its
		// containers' cgroups, the bridge made for it.
		mounts, _ := os.ReadFile("/proc/self/mountinfo")
		var below []string
		for line := range strings.Lines(string(mounts)) {
			if f := strings.Fields(line); len(f) > 4 && strings.HasPrefix(f[4], dir+"/") {
				below = append(below, f[4])
			}
		}
		slices.SortFunc(below, func(a, b string) int { return len(b) - len(a) })
		for _, m := range below {
			_ = syscall.Unmount(m, syscall.MNT_DETACH)
		}
		if err := os.RemoveAll(dir); err != nil {
			t.Errorf("remove the engine's files: %v", err)
		}
		cgs, _ := filepath.Glob("/sys/fs/cgroup/*/" + cgroup)
		for _, cg := range cgs {
			var dirs []string
			_ = filepath.WalkDir(cg, func(p string, d os.DirEntry, err error) error {
				if err == nil && d.IsDir() {
					dirs = append(dirs, p)
				}
				return nil
			})
			for _, d := range slices.Backward(dirs) {
				_ = syscall.Rmdir(d)
			}
		}
		_ = exec.Command("ip", "link", "del", br).Run()
	})
	ip(t, "addr", "add", netip.PrefixFrom(subnet.Addr().Next(), subnet.Bits()).String(), "dev", br)
	ip(t, "link", "set", br, "up")
	e.start(t)
	return e
}

func (e *engine) start(t *testing.T) {
	t.Helper()
	log, err := os.OpenFile(filepath.Join(e.dir, "log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	e.cmd = exec.Command("dockerd", e.args...)
	e.cmd.Stdout, e.cmd.Stderr = log, log
	if err := e.cmd.Start(); err != nil {
		t.Fatalf("start dockerd: %v", err)
	}
	e.exited = make(chan error, 1)
	go func(cmd *exec.Cmd, exited chan<- error) { exited <- cmd.Wait() }(e.cmd, e.exited)
	c := http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", strings.TrimPrefix(e.host, "unix://"))
	}}, Timeout: 2 * time.Second}
	defer c.CloseIdleConnections()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(2 * time.Minute)
	for {
		select {
		case err := <-e.exited:
			e.exited <- err
			t.Fatalf("dockerd exited: %v; its log ends:\n%s", err, e.logTail())
		case <-deadline:
			t.Fatalf("dockerd did not answer within 2 minutes; its log ends:\n%s", e.logTail())
		case <-tick.C:
		}
		if res, err := c.Get("http://engine/_ping"); err == nil {
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				return
			}
		}
	}
}

// stop ends dockerd with sig: SIGTERM as systemd does (it stops its
// containers first), killing it after 2 minutes; SIGKILL as the OOM
// killer would (its containers run on).
func (e *engine) stop(t *testing.T, sig syscall.Signal) {
	t.Helper()
	_ = e.cmd.Process.Signal(sig)
	select {
	case <-e.exited:
	case <-time.After(2 * time.Minute):
		t.Errorf("dockerd did not stop within 2 minutes of SIGTERM; killed. Its log ends:\n%s", e.logTail())
		_ = e.cmd.Process.Kill()
		<-e.exited
	}
	e.exited <- nil // a second stop returns at once
}

// restart stops dockerd with sig and starts it again on the same files
// (after a SIGKILL, without the pid file it left: dockerd would refuse to
// start, as after a crash of the host's, which systemd's unit hides).
func (e *engine) restart(t *testing.T, sig syscall.Signal) {
	t.Helper()
	e.stop(t, sig)
	if sig == syscall.SIGKILL {
		_ = os.Remove(filepath.Join(e.dir, "pid"))
		// Its containerd dies with it (parent-death signal), but is
		// reaped later: until then dockerd takes it for running and
		// waits for it.
		if b, err := os.ReadFile(filepath.Join(e.dir, "exec", "containerd", "containerd.pid")); err == nil {
			proc := "/proc/" + strings.TrimSpace(string(b))
			tick := time.NewTicker(50 * time.Millisecond)
			defer tick.Stop()
			deadline := time.After(time.Minute)
			for {
				if _, err := os.Stat(proc); err != nil {
					break
				}
				select {
				case <-tick.C:
				case <-deadline:
					t.Fatalf("the killed engine's containerd (%s) is still there after a minute", proc)
				}
			}
		}
	}
	e.start(t)
}

func (e *engine) logTail() string {
	b, _ := os.ReadFile(filepath.Join(e.dir, "log"))
	lines := slices.DeleteFunc(bytes.Split(bytes.TrimSpace(b), []byte("\n")), func(l []byte) bool {
		return bytes.Contains(l, []byte("[core]")) || bytes.Contains(l, []byte("loading plugin"))
	})
	return string(bytes.Join(lines[max(0, len(lines)-30):], []byte("\n")))
}

// ip runs the ip command (iproute2).
func ip(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %s: %v %s", strings.Join(args, " "), err, out)
	}
}

// freeSubnet picks a /24 of 10.231.0.0/16 that no route of the host
// overlaps.
func freeSubnet(t *testing.T) netip.Prefix {
	t.Helper()
	out, err := exec.Command("ip", "-4", "route", "show", "table", "all").Output()
	if err != nil {
		t.Fatalf("ip route: %v", err)
	}
	var used []netip.Prefix
	for line := range strings.Lines(string(out)) {
		f := strings.Fields(line)
		for _, w := range f {
			if p, err := netip.ParsePrefix(w); err == nil {
				used = append(used, p)
			} else if a, err := netip.ParseAddr(w); err == nil && a.Is4() {
				used = append(used, netip.PrefixFrom(a, 32))
			}
		}
	}
	for range 100 {
		p := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 231, byte(rand.IntN(256)), 0}), 24)
		if !slices.ContainsFunc(used, p.Overlaps) {
			return p
		}
	}
	t.Fatal("no free /24 in 10.231.0.0/16")
	return netip.Prefix{}
}
