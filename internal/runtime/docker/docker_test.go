package docker

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	goruntime "runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/jsonstream"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/client"

	"github.com/kilnhq/kiln/internal/files"
	"github.com/kilnhq/kiln/internal/quota"
	"github.com/kilnhq/kiln/internal/runtime"
)

// waitLimit bounds every wait on the engine or the test program.
const waitLimit = 60 * time.Second

// suite is what the subtests share: the runtime under test and the image.
type suite struct {
	d     *Docker
	opts  Options
	image string
	uid   int // the uid:gid the test program must run as
	gid   int
}

// TestDocker runs the docker runtime against the real engine: one image is
// built FROM scratch around testdata/echoer, every subtest runs its own
// container. It is one test so that a missing engine gives one SKIP line.
func TestDocker(t *testing.T) {
	s := newSuite(t)

	t.Run("console", func(t *testing.T) {
		t.Parallel()
		srv := s.start(t, s.spec(t))
		srv.con.wait(t, "ready")
		if err := srv.inst.WriteLine("hello there"); err != nil {
			t.Fatalf("WriteLine = %v", err)
		}
		srv.con.wait(t, "echo: hello there")
		if err := srv.inst.WriteLine("stderr oops"); err != nil {
			t.Fatalf("WriteLine = %v", err)
		}
		srv.con.wait(t, "err: oops")
		// A 10000-byte line comes in two: 8 KiB, then the rest.
		if err := srv.inst.WriteLine("long 10000"); err != nil {
			t.Fatalf("WriteLine = %v", err)
		}
		srv.con.wait(t, strings.Repeat("x", maxLine))
		srv.con.wait(t, strings.Repeat("x", 10000-maxLine))
		if err := srv.inst.WriteLine("two\nlines"); err == nil {
			t.Errorf("WriteLine(two lines) = nil, want an error")
		}
	})

	t.Run("published port", func(t *testing.T) {
		t.Parallel()
		spec := s.spec(t)
		srv := s.start(t, spec)
		srv.con.wait(t, "ready") // printed once the program listens
		conn, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(spec.Port)), 10*time.Second)
		if err != nil {
			t.Fatalf("dial the published port: %v", err)
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(waitLimit))
		got, err := bufio.NewReader(conn).ReadString('\n')
		if err != nil || got != "hello\n" {
			t.Errorf("read from the published port = %q, %v; want %q", got, err, "hello\n")
		}
	})

	t.Run("filesystem and privileges", func(t *testing.T) {
		t.Parallel()
		spec := s.spec(t)
		srv := s.start(t, spec)
		srv.con.wait(t, "ready")
		for _, tc := range []struct{ cmd, want string }{
			{"id", "uid=" + strconv.Itoa(s.uid) + " gid=" + strconv.Itoa(s.gid)},
			{"caps", "capeff=0000000000000000"},
			{"write /data/hello.txt", "write /data/hello.txt ok"},
			{"write /tmp/scratch", "write /tmp/scratch ok"},
			{"write /rootfs-file", "write /rootfs-file err open /rootfs-file: read-only file system"},
		} {
			if err := srv.inst.WriteLine(tc.cmd); err != nil {
				t.Fatalf("WriteLine(%q) = %v", tc.cmd, err)
			}
			srv.con.wait(t, tc.want)
		}
		fi, err := os.Stat(filepath.Join(spec.Root, "hello.txt"))
		if err != nil {
			t.Fatalf("the file written in /data is not in the server root: %v", err)
		}
		st := fi.Sys().(*syscall.Stat_t)
		if int(st.Uid) != s.uid || int(st.Gid) != s.gid {
			t.Errorf("owner of hello.txt = %d:%d, want %d:%d", st.Uid, st.Gid, s.uid, s.gid)
		}
	})

	t.Run("server's own user", func(t *testing.T) {
		// As servers.Options.Users makes it: the root is the server's
		// user's, 0700, and the spec says so. The container runs as that
		// user, not as Options.User; a file Kiln writes into the root
		// while it runs (files.Root, as the files API does) is that
		// user's, so the game rewrites it in place (a whitelist).
		if os.Geteuid() != 0 {
			t.Skip("a user of its own needs root")
		}
		t.Parallel()
		spec := s.spec(t)
		const own = 10002
		spec.User = &runtime.User{UID: own, GID: own}
		if err := os.Chown(spec.Root, own, own); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(spec.Root, 0o700); err != nil {
			t.Fatal(err)
		}
		srv := s.start(t, spec)
		srv.con.wait(t, "ready")
		if err := srv.inst.WriteLine("id"); err != nil {
			t.Fatal(err)
		}
		srv.con.wait(t, "uid=10002 gid=10002")
		root, err := files.Open(spec.Root)
		if err != nil {
			t.Fatal(err)
		}
		defer root.Close()
		res, err := quota.NewAccount(1<<20, quota.NewTempNames(make([]byte, 32))).Reserve(0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := root.WriteFile("whitelist.json", strings.NewReader("[]\n"), res); err != nil {
			t.Fatalf("WriteFile = %v", err)
		}
		res.Commit()
		var st syscall.Stat_t
		if err := syscall.Stat(filepath.Join(spec.Root, "whitelist.json"), &st); err != nil {
			t.Fatal(err)
		}
		if st.Uid != own || st.Gid != own {
			t.Errorf("whitelist.json written while the container runs belongs to %d:%d, want the server's user %d:%d", st.Uid, st.Gid, own, own)
		}
		if err := srv.inst.WriteLine("write /data/whitelist.json"); err != nil {
			t.Fatal(err)
		}
		if got := srv.con.waitPrefix(t, "write /data/whitelist.json "); got != "write /data/whitelist.json ok" {
			t.Errorf("the game rewriting whitelist.json in place: %q", got)
		}
	})

	t.Run("container definition", func(t *testing.T) {
		t.Parallel()
		spec := s.spec(t)
		srv := s.start(t, spec)
		res, err := s.d.cli.ContainerInspect(t.Context(), srv.inst.Ref(), client.ContainerInspectOptions{})
		if err != nil {
			t.Fatalf("ContainerInspect = %v", err)
		}
		c := res.Container
		hc := c.HostConfig
		stopTimeout := -1
		if c.Config.StopTimeout != nil {
			stopTimeout = *c.Config.StopTimeout
		}
		checks := []struct {
			name      string
			got, want any
		}{
			{"Name", c.Name, "/" + ContainerName(spec.ServerID)},
			{"Labels[" + LabelManaged + "]", c.Config.Labels[LabelManaged], "true"},
			{"Labels[" + LabelServer + "]", c.Config.Labels[LabelServer], spec.ServerID},
			{"User", c.Config.User, s.opts.User},
			{"WorkingDir", c.Config.WorkingDir, "/data"},
			{"Cmd", c.Config.Cmd, spec.Argv},
			{"len(Entrypoint)", len(c.Config.Entrypoint), 0},
			{"Init", *hc.Init, true},
			{"OpenStdin", c.Config.OpenStdin, true},
			{"Tty", c.Config.Tty, false},
			{"Memory", hc.Memory, int64(spec.MemoryMB) << 20},
			{"MemorySwap", hc.MemorySwap, int64(spec.MemoryMB) << 20},
			{"CPUPeriod", hc.CPUPeriod, int64(100000)},
			{"CPUQuota", hc.CPUQuota, int64(spec.CPUPercent) * 1000},
			{"PidsLimit", *hc.PidsLimit, s.opts.PidsLimit},
			{"StopTimeout (s, -1: unset)", stopTimeout, 37},
			{"Privileged", hc.Privileged, false},
			{"ReadonlyRootfs", hc.ReadonlyRootfs, true},
			{"CapDrop", hc.CapDrop, []string{"ALL"}},
			{"SecurityOpt", hc.SecurityOpt, []string{"no-new-privileges:true"}},
			{"Tmpfs", hc.Tmpfs, map[string]string{"/tmp": tmpfsOpts}},
			{"LogConfig.Type", hc.LogConfig.Type, "json-file"},
			{"RestartPolicy", string(hc.RestartPolicy.Name), "no"},
			{"Mounts", len(c.Mounts), 1},
			{"NetworkMode", string(hc.NetworkMode), s.opts.Network},
		}
		for _, ck := range checks {
			if !reflect.DeepEqual(ck.got, ck.want) {
				t.Errorf("inspect %s = %v, want %v", ck.name, ck.got, ck.want)
			}
		}
		// HOME is where the root is mounted, never its host path.
		if !slices.Contains(c.Config.Env, "HOME=/data") || !slices.Contains(c.Config.Env, "KILN_TEST=1") {
			t.Errorf("inspect Env = %q, want KILN_TEST=1 and HOME=/data among them", c.Config.Env)
		}
		for _, kv := range c.Config.Env {
			if strings.Contains(kv, spec.Root) {
				t.Errorf("inspect Env holds %q, naming the host path of the root", kv)
			}
		}
		if len(c.Mounts) == 1 {
			m := c.Mounts[0]
			if m.Type != mount.TypeBind || m.Source != spec.Root || m.Destination != "/data" || !m.RW {
				t.Errorf("inspect Mounts[0] = %+v, want a read-write bind of %s at /data", m, spec.Root)
			}
		}
	})

	t.Run("exit code and restart", func(t *testing.T) {
		t.Parallel()
		spec := s.spec(t)
		srv := s.start(t, spec)
		srv.con.wait(t, "ready")
		if err := srv.inst.WriteLine("exit 7"); err != nil {
			t.Fatalf("WriteLine = %v", err)
		}
		srv.waitDone(t)
		if got, want := srv.inst.Exit(), (runtime.Exit{Code: 7}); got != want {
			t.Errorf("Exit() = %+v, want %+v", got, want)
		}
		if err := srv.inst.WriteLine("too late"); err == nil {
			t.Errorf("WriteLine after the end = nil, want an error")
		}
		if st, err := srv.inst.Stats(t.Context()); err != nil || st != (runtime.Stats{}) {
			t.Errorf("Stats after the end = %+v, %v; want zero, nil", st, err)
		}
		// The stopped container of the first run is replaced.
		again := s.start(t, spec)
		again.con.wait(t, "ready")
		if again.inst.Ref() == srv.inst.Ref() {
			t.Errorf("second Start reused container %s", srv.inst.Ref())
		}
	})

	for _, tc := range []struct {
		name   string
		end    func(runtime.Instance) error
		signal string
	}{
		{"stop", runtime.Instance.Stop, "terminated"},
		{"kill", runtime.Instance.Kill, "killed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := s.start(t, s.spec(t))
			srv.con.wait(t, "ready")
			if err := tc.end(srv.inst); err != nil {
				t.Fatalf("%s() = %v", tc.name, err)
			}
			srv.waitDone(t)
			if got, want := srv.inst.Exit(), (runtime.Exit{Code: -1, Signal: tc.signal}); got != want {
				t.Errorf("Exit() after %s = %+v, want %+v", tc.name, got, want)
			}
			if err := tc.end(srv.inst); err != nil {
				t.Errorf("%s() after the end = %v, want nil", tc.name, err)
			}
		})
	}

	t.Run("out of memory", func(t *testing.T) {
		t.Parallel()
		spec := s.spec(t)
		spec.MemoryMB = 32
		srv := s.start(t, spec)
		srv.con.wait(t, "ready")
		if err := srv.inst.WriteLine("alloc 256"); err != nil {
			t.Fatalf("WriteLine = %v", err)
		}
		srv.waitDone(t)
		if got, want := srv.inst.Exit(), (runtime.Exit{Code: -1, Signal: "killed (out of memory)"}); got != want {
			t.Errorf("Exit() = %+v, want %+v", got, want)
		}
	})

	t.Run("stats", func(t *testing.T) {
		t.Parallel()
		spec := s.spec(t)
		srv := s.start(t, spec)
		srv.con.wait(t, "ready")
		st, err := srv.inst.Stats(t.Context())
		if err != nil {
			t.Fatalf("Stats = %v", err)
		}
		if st.CPU != 0 || st.MemoryBytes <= 0 || st.MemoryBytes > int64(spec.MemoryMB)<<20 {
			t.Errorf("first Stats = %+v, want CPU 0 and memory in (0, %d MiB]", st, spec.MemoryMB)
		}
		if err := srv.inst.WriteLine("burn"); err != nil {
			t.Fatalf("WriteLine = %v", err)
		}
		srv.con.wait(t, "burning")
		// The program spins one core under a quota of half a core: wait
		// until a sample shows it, then check it is plausible.
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		deadline := time.After(waitLimit)
		for st.CPU < 5 {
			select {
			case <-tick.C:
			case <-deadline:
				t.Fatalf("Stats CPU stayed at %.1f while the program spins", st.CPU)
			}
			if st, err = srv.inst.Stats(t.Context()); err != nil {
				t.Fatalf("Stats = %v", err)
			}
		}
		t.Logf("Stats while spinning under a 50%% quota = %+v", st)
		if limit := float64(100 * goruntime.NumCPU()); st.CPU > limit {
			t.Errorf("Stats CPU = %.1f, more than all %d cores", st.CPU, goruntime.NumCPU())
		}
	})

	t.Run("adopt after a restart of kiln", func(t *testing.T) {
		t.Parallel()
		spec := s.spec(t)
		first, err := New(t.Context(), s.opts) // the kiln that goes away
		if err != nil {
			t.Fatalf("New = %v", err)
		}
		con1 := &console{}
		inst1, err := first.Start(t.Context(), spec, con1.add)
		if err != nil {
			t.Fatalf("Start = %v", err)
		}
		con1.wait(t, "ready")
		if err := first.Close(); err != nil { // detaches; the container runs on
			t.Fatalf("Close = %v", err)
		}
		select {
		case <-inst1.Done():
			t.Fatalf("Done closed by a Close of the runtime; Exit = %+v", inst1.Exit())
		default:
		}

		con2 := &console{}
		inst2, err := s.d.Adopt(t.Context(), spec, inst1.Ref(), con2.add)
		if err != nil {
			t.Fatalf("Adopt(%s) = %v", inst1.Ref(), err)
		}
		if inst2.Ref() != inst1.Ref() {
			t.Errorf("Adopt Ref = %s, want %s", inst2.Ref(), inst1.Ref())
		}
		if err := inst2.WriteLine("after restart"); err != nil {
			t.Fatalf("WriteLine = %v", err)
		}
		con2.wait(t, "echo: after restart")
		if con1.has("echo: after restart") {
			t.Errorf("the detached console still received output")
		}
		// What the container said before the restart is replayed first,
		// once, from the engine's log.
		if got := con2.count("ready"); got != 1 || con2.index("ready") > con2.index("echo: after restart") {
			t.Errorf("console after Adopt: %d × \"ready\", want it once, before the live lines:\n%s", got, con2.dump())
		}

		// A ref that is gone falls back to the container's name.
		inst2.(*Container).Detach()
		con3 := &console{}
		inst3, err := s.d.Adopt(t.Context(), spec, "0123456789ab", con3.add)
		if err != nil {
			t.Fatalf("Adopt by name = %v", err)
		}
		if con3.index("ready") < 0 || con3.index("ready") > con3.index("echo: after restart") || con3.count("echo: after restart") != 1 {
			t.Errorf("console after a second Adopt: want \"ready\" then \"echo: after restart\" once, replayed:\n%s", con3.dump())
		}
		if err := inst3.WriteLine("exit 3"); err != nil {
			t.Fatalf("WriteLine = %v", err)
		}
		select {
		case <-inst3.Done():
		case <-time.After(waitLimit):
			t.Fatalf("the adopted container did not end")
		}
		if got, want := inst3.Exit(), (runtime.Exit{Code: 3}); got != want {
			t.Errorf("Exit() = %+v, want %+v", got, want)
		}

		// An ended container is not adoptable, and is removed.
		if _, err := s.d.Adopt(t.Context(), spec, inst3.Ref(), con3.add); !errors.Is(err, runtime.ErrNotAdoptable) {
			t.Errorf("Adopt(ended) = %v, want ErrNotAdoptable", err)
		}
		if _, err := s.d.cli.ContainerInspect(t.Context(), inst3.Ref(), client.ContainerInspectOptions{}); !cerrdefs.IsNotFound(err) {
			t.Errorf("ContainerInspect(ended and adopted) = %v, want not found", err)
		}
	})

	t.Run("adopt missing", func(t *testing.T) {
		t.Parallel()
		spec := s.spec(t)
		for _, ref := range []string{"", "0123456789ab", "kiln-no-such-server"} {
			if inst, err := s.d.Adopt(t.Context(), spec, ref, nil); !errors.Is(err, runtime.ErrNotAdoptable) {
				t.Errorf("Adopt(%q) = %v, %v; want ErrNotAdoptable", ref, inst, err)
			}
		}
	})

	t.Run("remove", func(t *testing.T) {
		t.Parallel()
		spec := s.spec(t)
		srv := s.start(t, spec)
		srv.con.wait(t, "ready")
		for i := range 2 {
			if err := s.d.Remove(t.Context(), spec.ServerID); err != nil {
				t.Fatalf("Remove #%d = %v", i+1, err)
			}
		}
		srv.waitDone(t)
		if _, err := s.d.cli.ContainerInspect(t.Context(), srv.inst.Ref(), client.ContainerInspectOptions{}); !cerrdefs.IsNotFound(err) {
			t.Errorf("ContainerInspect after Remove = %v, want not found", err)
		}
	})

	t.Run("port taken", func(t *testing.T) {
		t.Parallel()
		first := s.start(t, s.spec(t))
		first.con.wait(t, "ready")
		spec := s.spec(t)
		spec.Port = s.portOf(t, first.inst)
		spec.Argv = []string{"/echoer", strconv.Itoa(spec.Port)}
		if inst, err := s.d.Start(t.Context(), spec, nil); err == nil {
			t.Fatalf("Start on a published port = %v, nil; want an error", inst)
		}
		// The container that could not start is not left behind.
		if _, err := s.d.cli.ContainerInspect(t.Context(), ContainerName(spec.ServerID), client.ContainerInspectOptions{}); !cerrdefs.IsNotFound(err) {
			t.Errorf("ContainerInspect after a failed Start = %v, want not found", err)
		}
	})

	t.Run("foreign container of the same name", func(t *testing.T) {
		t.Parallel()
		spec := s.spec(t)
		res, err := s.d.cli.ContainerCreate(t.Context(), client.ContainerCreateOptions{
			Name: ContainerName(spec.ServerID), Image: s.image,
		})
		if err != nil {
			t.Fatalf("ContainerCreate = %v", err)
		}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
			defer cancel()
			_, _ = s.d.cli.ContainerRemove(ctx, res.ID, client.ContainerRemoveOptions{Force: true})
		})
		if _, err := s.d.Start(t.Context(), spec, nil); err == nil || !strings.Contains(err.Error(), "not created by kiln") {
			t.Errorf("Start = %v, want an error saying the container is not kiln's", err)
		}
		if err := s.d.Remove(t.Context(), spec.ServerID); err == nil {
			t.Errorf("Remove = nil, want an error")
		}
		if _, err := s.d.Adopt(t.Context(), spec, res.ID, nil); err == nil || errors.Is(err, runtime.ErrNotAdoptable) {
			t.Errorf("Adopt = %v, want an error other than ErrNotAdoptable", err)
		}
		if _, err := s.d.cli.ContainerInspect(t.Context(), res.ID, client.ContainerInspectOptions{}); err != nil {
			t.Errorf("the foreign container is gone: %v", err)
		}
	})

	t.Run("missing image", func(t *testing.T) {
		t.Parallel()
		spec := s.spec(t)
		spec.Image = s.image + "-missing"
		inst, err := s.d.Start(t.Context(), spec, nil)
		if err == nil || !strings.Contains(err.Error(), "never pulls") {
			t.Errorf("Start(missing image) = %v, %v; want an error saying kiln never pulls", inst, err)
		}
	})
}

// newSuite connects to the engine (or skips) and builds the test image.
func newSuite(t *testing.T) *suite {
	t.Helper()
	s := &suite{uid: os.Getuid(), gid: os.Getgid()}
	if s.uid == 0 {
		// Never run the game server as root: use another id and give it
		// the server roots, as an operator running kiln as root must.
		s.uid, s.gid = 10001, 10001
		s.opts.User = "10001:10001"
	} else {
		s.opts.User = strconv.Itoa(s.uid) + ":" + strconv.Itoa(s.gid)
	}
	s.opts.PidsLimit = 100
	// Not the engine's 10 s nor Kiln's 30 s: the value given is the one set
	// (rounded up to whole seconds).
	s.opts.StopTimeout = 36*time.Second + time.Millisecond
	s.opts.Log = slog.New(slog.NewTextHandler(t.Output(), nil))
	// A network of the test's own, removed when the test ends (after its
	// containers: cleanups run last first).
	s.opts.Network = "kt" + randomHex(4)
	t.Cleanup(func() { removeNetwork(t, s.opts.Host, s.opts.Network) })
	d, err := New(t.Context(), s.opts)
	if errors.Is(err, ErrUnreachable) && os.Getenv("KILN_REQUIRE_DOCKER") != "1" {
		t.Skipf("SKIP DOCKER SUITE: %v (set KILN_REQUIRE_DOCKER=1 to fail instead)", err)
	}
	if err != nil {
		t.Fatalf("New = %v", err)
	}
	t.Cleanup(func() { _ = d.Close() })
	s.d = d
	s.image = buildImage(t, d.cli)
	return s
}

// removeNetwork removes a network a test's runtime created, if any.
func removeNetwork(t *testing.T, host, name string) {
	t.Helper()
	opt := client.FromEnv
	if host != "" {
		opt = client.WithHost(host)
	}
	cli, err := client.New(opt)
	if err != nil {
		t.Errorf("remove network %s: %v", name, err)
		return
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	if _, err := cli.NetworkRemove(ctx, name, client.NetworkRemoveOptions{}); err != nil && !cerrdefs.IsNotFound(err) && !client.IsErrConnectionFailed(err) {
		t.Errorf("remove network %s: %v", name, err)
	}
}

// buildImage compiles testdata/echoer as a static binary and builds an
// image FROM scratch around it through the Engine API (no docker CLI, no
// pull). The image is removed when the test ends.
func buildImage(t *testing.T, cli *client.Client) string {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "echoer")
	cmd := exec.CommandContext(t.Context(), "go", "build", "-trimpath", "-ldflags=-s -w", "-o", bin, "./testdata/echoer")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build testdata/echoer: %v\n%s", err, out)
	}
	exe, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	return buildTestImage(t, cli, "kiln-docker-test:"+randomHex(6), []imageFile{
		// The ENTRYPOINT must be cleared by Start: were it kept, the
		// program would try to listen on "not-a-port" and exit 3.
		{"Dockerfile", 0o644, []byte("FROM scratch\nCOPY echoer /echoer\nENTRYPOINT [\"/echoer\", \"not-a-port\"]\n")},
		{"echoer", 0o755, exe},
	})
}

// imageFile is one file of a test image's build context.
type imageFile struct {
	name string
	mode int64
	data []byte
}

// buildTestImage builds tag FROM scratch out of files (a Dockerfile among
// them) through the Engine API (no docker CLI, no pull) and removes it
// when the test ends.
func buildTestImage(t *testing.T, cli *client.Client, tag string, files []imageFile) string {
	t.Helper()
	var ctxTar bytes.Buffer
	tw := tar.NewWriter(&ctxTar)
	for _, f := range files {
		if err := tw.WriteHeader(&tar.Header{Name: f.name, Mode: f.mode, Size: int64(len(f.data)), ModTime: time.Now()}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(f.data); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	res, err := cli.ImageBuild(t.Context(), &ctxTar, client.ImageBuildOptions{
		Tags: []string{tag}, Dockerfile: "Dockerfile", Remove: true, ForceRemove: true,
		Labels: map[string]string{"kiln.test": "true"},
	})
	if err != nil {
		t.Fatalf("ImageBuild = %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
		defer cancel()
		if _, err := cli.ImageRemove(ctx, tag, client.ImageRemoveOptions{Force: true, PruneChildren: true}); err != nil && !cerrdefs.IsNotFound(err) {
			t.Errorf("remove test image %s: %v", tag, err)
		}
	})
	defer res.Body.Close()
	dec := json.NewDecoder(res.Body)
	for {
		var m jsonstream.Message
		if err := dec.Decode(&m); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("read build output: %v", err)
		}
		if m.Error != nil {
			t.Fatalf("build test image: %s", m.Error.Message)
		}
	}
	return tag
}

// spec is a fresh server: its own id, root (owned by the container user)
// and port. Its container is removed when the test ends.
func (s *suite) spec(t *testing.T) runtime.Spec {
	t.Helper()
	id := "test-" + randomHex(6)
	root := t.TempDir()
	if os.Getuid() == 0 {
		if err := os.Chown(root, s.uid, s.gid); err != nil {
			t.Fatal(err)
		}
	}
	port := freePort(t)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
		defer cancel()
		if err := s.d.Remove(ctx, id); err != nil {
			t.Errorf("Remove(%s) = %v", id, err)
		}
	})
	return runtime.Spec{
		ServerID: id, Root: root, Image: s.image,
		Argv:     []string{"/echoer", strconv.Itoa(port)},
		Env:      []string{"KILN_TEST=1"},
		MemoryMB: 64, CPUPercent: 50, Port: port, BindHost: "127.0.0.1",
	}
}

// portOf is the host port an instance's game port is published on.
func (s *suite) portOf(t *testing.T, inst runtime.Instance) int {
	t.Helper()
	res, err := s.d.cli.ContainerInspect(t.Context(), inst.Ref(), client.ContainerInspectOptions{})
	if err != nil {
		t.Fatalf("ContainerInspect = %v", err)
	}
	for _, b := range res.Container.HostConfig.PortBindings {
		p, err := strconv.Atoi(b[0].HostPort)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	t.Fatalf("no published port")
	return 0
}

type server struct {
	inst runtime.Instance
	con  *console
}

func (s *suite) start(t *testing.T, spec runtime.Spec) *server {
	t.Helper()
	con := &console{}
	inst, err := s.d.Start(t.Context(), spec, con.add)
	if err != nil {
		t.Fatalf("Start = %v", err)
	}
	return &server{inst: inst, con: con}
}

func (srv *server) waitDone(t *testing.T) {
	t.Helper()
	select {
	case <-srv.inst.Done():
	case <-time.After(waitLimit):
		t.Fatalf("the container did not end; console:\n%s", srv.con.dump())
	}
}

// console records the lines a runtime delivers.
type console struct {
	mu      sync.Mutex
	lines   []string
	changed chan struct{} // closed at the next line
}

func (c *console) add(line string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lines = append(c.lines, line)
	if c.changed != nil {
		close(c.changed)
		c.changed = nil
	}
}

func (c *console) count(line string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, l := range c.lines {
		if l == line {
			n++
		}
	}
	return n
}

// index is the position of line's first delivery, -1 when none.
func (c *console) index(line string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Index(c.lines, line)
}

func (c *console) has(line string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Contains(c.lines, line)
}

// wait returns when line has been delivered, failing after waitLimit.
func (c *console) wait(t *testing.T, line string) {
	t.Helper()
	deadline := time.After(waitLimit)
	for {
		c.mu.Lock()
		if slices.Contains(c.lines, line) {
			c.mu.Unlock()
			return
		}
		if c.changed == nil {
			c.changed = make(chan struct{})
		}
		ch := c.changed
		c.mu.Unlock()
		select {
		case <-ch:
		case <-deadline:
			t.Fatalf("console line %.80q not received; console:\n%s", line, c.dump())
		}
	}
}

// waitPrefix returns the first line delivered that starts with prefix,
// failing after waitLimit.
func (c *console) waitPrefix(t *testing.T, prefix string) string {
	t.Helper()
	deadline := time.After(waitLimit)
	for {
		c.mu.Lock()
		if i := slices.IndexFunc(c.lines, func(l string) bool { return strings.HasPrefix(l, prefix) }); i >= 0 {
			l := c.lines[i]
			c.mu.Unlock()
			return l
		}
		if c.changed == nil {
			c.changed = make(chan struct{})
		}
		ch := c.changed
		c.mu.Unlock()
		select {
		case <-ch:
		case <-deadline:
			t.Fatalf("no console line starting %.80q; console:\n%s", prefix, c.dump())
		}
	}
}

func (c *console) dump() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var b strings.Builder
	for _, l := range c.lines {
		if len(l) > 200 {
			l = l[:200] + "…"
		}
		b.WriteString("  " + l + "\n")
	}
	return b.String()
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
