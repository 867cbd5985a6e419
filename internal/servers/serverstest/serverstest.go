package serverstest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kilnhq/kiln/internal/catalog"
	"github.com/kilnhq/kiln/internal/catalog/install"
	"github.com/kilnhq/kiln/internal/cluster"
	"github.com/kilnhq/kiln/internal/node"
	"github.com/kilnhq/kiln/internal/nodes"
	"github.com/kilnhq/kiln/internal/quota"
	"github.com/kilnhq/kiln/internal/runtime"
	"github.com/kilnhq/kiln/internal/secretbox"
	"github.com/kilnhq/kiln/internal/servers"
	"github.com/kilnhq/kiln/internal/store"
)

var bin struct {
	once sync.Once
	path string
	err  error
}

// KilnBinary builds ./cmd/kiln once per test process (CGO_ENABLED=0) and
// returns its path. The directory is named after the process and left for
// the next test process to remove (a test binary has no hook that runs
// after every test of every package).
func KilnBinary(t testing.TB) string {
	t.Helper()
	bin.once.Do(func() {
		removeStaleBinaries()
		dir := filepath.Join(os.TempDir(), "kiln-testbin-"+strconv.Itoa(os.Getpid()))
		if bin.err = os.MkdirAll(dir, 0o755); bin.err != nil {
			return
		}
		path := filepath.Join(dir, "kiln")
		cmd := exec.Command("go", "build", "-trimpath", "-o", path, "./cmd/kiln")
		cmd.Dir = ModuleRoot()
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			bin.err = fmt.Errorf("go build ./cmd/kiln: %v\n%s", err, out)
			return
		}
		bin.path = path
	})
	if bin.err != nil {
		t.Fatalf("build kiln: %v", bin.err)
	}
	return bin.path
}

// removeStaleBinaries deletes the binaries of test processes that are gone.
func removeStaleBinaries() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), "kiln-testbin-*"))
	for _, d := range dirs {
		pid, err := strconv.Atoi(filepath.Base(d)[len("kiln-testbin-"):])
		if err != nil || pid == os.Getpid() {
			continue
		}
		if _, err := os.Stat("/proc/" + strconv.Itoa(pid)); os.IsNotExist(err) {
			os.RemoveAll(d)
		}
	}
}

// ModuleRoot is the repository's root directory.
func ModuleRoot() string {
	_, file, _, _ := goruntime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..")
}

// PortRange picks n consecutive ports at a random place of 20000-59999
// whose first port is free on 127.0.0.1. The servers service skips ports
// that are busy on the host anyway, so overlapping ranges of tests running
// in parallel cost a skipped port, not a failure.
func PortRange(t testing.TB, n int) node.PortRange {
	t.Helper()
	for range 100 {
		var b [2]byte
		_, _ = rand.Read(b[:])
		first := 20000 + int(binary.BigEndian.Uint16(b[:]))%(40000-n)
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(first)))
		if err != nil {
			continue
		}
		ln.Close()
		return node.PortRange{First: first, Last: first + n - 1}
	}
	t.Fatal("no free port range found")
	return node.PortRange{}
}

// Options adjust a test service.
type Options struct {
	Runtime   runtime.Runtime // default: the process runtime
	Holders   bool            // the default process runtime runs servers under holders (kiln shim), as kiln serve does
	KilnBin   string          // default: KilnBinary (process runtime)
	MirrorURL string          // installer mirror (a local httptest upstream)
	Ports     int             // size of the port range, default 20
	Servers   servers.Options // lifecycle tuning; PublicHost and BindHost are forced to 127.0.0.1
	DataDir   string          // default: t.TempDir()
	NodeName  string          // default: "local"
	Log       *slog.Logger    // default: the test's output
	// NodeMemory is the memory the node offers placement, in bytes
	// (default 1 TiB: tests make more servers than a test host holds);
	// its disk is the host's. Overcommit is --memory-overcommit (default
	// 1). Servers.Placement, when set, replaces this placement.
	NodeMemory int64
	Overcommit float64
}

// Env is a running service and what it stands on.
type Env struct {
	Service *servers.Service
	Node    *node.Local
	Catalog *catalog.Catalog
	DataDir string
	// StateDir is the holders' directory (Options.Holders), else empty.
	StateDir string
	stop     func()
}

// Stop ends the service as kiln serve's shutdown does and waits for it;
// the process runtime it made is closed (servers under holders run on).
func (e *Env) Stop() { e.stop() }

// New builds a service on db and runs it until the test ends.
func New(t testing.TB, db *store.DB, o Options) *Env {
	t.Helper()
	if o.Log == nil {
		o.Log = slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	if o.DataDir == "" {
		o.DataDir = t.TempDir()
	}
	if o.KilnBin == "" {
		o.KilnBin = KilnBinary(t)
	}
	closeRT, stateDir := func() {}, ""
	if o.Runtime == nil && o.Holders {
		stateDir = filepath.Join(o.DataDir, "run")
		p := runtime.NewProcessWith(o.Log, runtime.ProcessOptions{Holder: []string{o.KilnBin, "shim"}, StateDir: stateDir, Sandbox: []string{o.KilnBin, "sandbox-exec"}})
		o.Runtime, closeRT = p, func() { p.Close() }
	}
	if o.Runtime == nil {
		o.Runtime = runtime.NewProcess(o.Log)
	}
	if o.Ports == 0 {
		o.Ports = 20
	}
	cat, err := catalog.Load(true)
	if err != nil {
		t.Fatalf("load catalog: %v", err)
	}
	inst, err := install.New(install.Options{
		MirrorURL: o.MirrorURL, CacheDir: filepath.Join(o.DataDir, "cache"), Log: o.Log,
	})
	if err != nil {
		t.Fatalf("installer: %v", err)
	}
	if o.NodeName == "" {
		o.NodeName = "local"
	}
	n, err := node.NewLocal(o.NodeName, filepath.Join(o.DataDir, "servers"), PortRange(t, o.Ports), o.Runtime)
	if err != nil {
		t.Fatalf("node: %v", err)
	}
	so := o.Servers
	so.KilnBinary = o.KilnBin
	so.PublicHost = "127.0.0.1"
	so.BindHost = "127.0.0.1"
	if so.PingInterval == 0 {
		so.PingInterval = 50 * time.Millisecond
	}
	if so.StopTimeout == 0 {
		so.StopTimeout = 10 * time.Second
	}
	if so.Secrets == nil {
		box, err := secretbox.New(bytes.Repeat([]byte{7}, secretbox.KeySize))
		if err != nil {
			t.Fatalf("secret box: %v", err)
		}
		so.Secrets = box
	}
	so.TempNames = quota.NewTempNames(so.Secrets.Derive(servers.TempNamesPurpose))
	if so.Placement == nil {
		so.Placement = Placement(t, db, n, o.NodeMemory, o.Overcommit)
	}
	svc := servers.NewService(db, n, cat, inst, so, o.Log)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	<-svc.Recovered() // as kiln serve: nothing is asked before recovery
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("servers.Run = %v", err)
			}
			closeRT()
		})
	}
	t.Cleanup(func() {
		stop()
		// Servers under holders outlive the service: they end with the test.
		EndHolders(t, stateDir)
	})
	return &Env{Service: svc, Node: n, Catalog: cat, DataDir: o.DataDir, StateDir: stateDir, stop: stop}
}

// Placement lists n as kiln serve lists its local node, reporting
// memory bytes of memory (1 TiB when 0) and the host's disk, reachable
// for a day, and returns placement on it alone with overcommit (1 when
// 0).
func Placement(t testing.TB, db *store.DB, n *node.Local, memory int64, overcommit float64) *nodes.Placer {
	t.Helper()
	if memory == 0 {
		memory = 1 << 40
	}
	if overcommit == 0 {
		overcommit = 1
	}
	ns := nodes.New(db, nil)
	ctx := t.Context()
	err := ns.RegisterLocal(ctx, n.Name(), cluster.Hello{PublicHost: "127.0.0.1", PortFirst: n.Ports().First, PortLast: n.Ports().Last,
		Runtime: n.Runtime().Name()})
	if err != nil {
		t.Fatalf("list the node: %v", err)
	}
	c, err := n.Capacity(ctx)
	if err != nil {
		t.Fatalf("the node's capacity: %v", err)
	}
	err = ns.BeatLocal(ctx, n.Name(), cluster.Heartbeat{MemoryTotal: memory, MemoryFree: memory, DiskTotal: c.DiskBytes, DiskFree: c.DiskFreeBytes},
		24*time.Hour)
	if err != nil {
		t.Fatalf("report the node: %v", err)
	}
	return nodes.NewPlacer(ns, []string{n.Name()}, overcommit)
}

// EndHolders kills the servers under holders in stateDir (none when it is
// empty), as `kiln admin node stop-all --kill` does.
func EndHolders(t testing.TB, stateDir string) {
	t.Helper()
	if stateDir == "" {
		return
	}
	ids, err := runtime.HeldServers(stateDir)
	if err != nil {
		t.Errorf("list holders: %v", err)
	}
	for _, id := range ids {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		if _, err := runtime.StopHeld(ctx, stateDir, id, true, 10*time.Second); err != nil && !errors.Is(err, runtime.ErrNoHolder) {
			t.Errorf("end the holder of %s: %v", id, err)
		}
		cancel()
	}
}

// testWriter sends log lines to the test's output until it ends.
type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	defer func() { _ = recover() }() // a log line after the test ended
	w.t.Log(string(p[:len(p)-1]))
	return len(p), nil
}

// ProcessEnv is the environment of the process whose working directory is
// root (a process-runtime game server), read from /proc: what the server
// really got. Nil when no process runs there.
func ProcessEnv(root string) map[string]string {
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		if cwd, err := os.Readlink(d + "/cwd"); err != nil || cwd != root {
			continue
		}
		b, err := os.ReadFile(d + "/environ")
		if err != nil {
			continue
		}
		env := map[string]string{}
		for kv := range strings.SplitSeq(string(b), "\x00") {
			if k, v, ok := strings.Cut(kv, "="); ok {
				env[k] = v
			}
		}
		return env
	}
	return nil
}
