package main

import (
	"bufio"
	"context"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kilnhq/kiln/internal/catalog"
	"github.com/kilnhq/kiln/internal/catalog/install"
	"github.com/kilnhq/kiln/internal/slp"
	"github.com/kilnhq/kiln/internal/testserver"
)

// game is a `kiln testserver` process started from a profile's command.
type game struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string // stdout, closed at EOF
	done  chan error
}

// startGame runs a profile's start command in dir, as the process runtime
// does (working directory the server root), and waits for its Done line.
func startGame(t *testing.T, p catalog.Profile, dir string, port int) *game {
	t.Helper()
	argv, err := p.Command(map[string]string{catalog.VarKilnBin: kilnBin, catalog.VarServerPort: strconv.Itoa(port)})
	if err != nil {
		t.Fatalf("%s.Command: %v", p.Type, err)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir, cmd.Env, cmd.Stderr = dir, cleanEnv(), os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %q: %v", argv, err)
	}
	g := &game{cmd: cmd, stdin: stdin, lines: make(chan string, 256), done: make(chan error, 1)}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			g.lines <- sc.Text()
		}
		close(g.lines)
		g.done <- cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		for range g.lines {
		}
	})
	g.waitFor(t, `\]: Done \(`)
	return g
}

// waitFor returns the next stdout line matching re.
func (g *game) waitFor(t *testing.T, re string) string {
	t.Helper()
	rx := regexp.MustCompile(re)
	limit := time.After(30 * time.Second)
	for {
		select {
		case l, ok := <-g.lines:
			if !ok {
				t.Fatalf("%q: output ended without a line matching %q", g.cmd.Args, re)
			}
			if rx.MatchString(l) {
				return l
			}
		case <-limit:
			t.Fatalf("%q: no line matching %q within 30s", g.cmd.Args, re)
		}
	}
}

// stop sends the profile's stop command and waits for a clean exit.
func (g *game) stop(t *testing.T, command string) {
	t.Helper()
	if _, err := io.WriteString(g.stdin, command+"\n"); err != nil {
		t.Fatalf("write %q: %v", command, err)
	}
	limit := time.After(30 * time.Second)
	for {
		select {
		case _, ok := <-g.lines:
			if ok {
				continue
			}
			if err := <-g.done; err != nil { // sent right after lines closes
				t.Errorf("%q after %q: %v, want exit 0", g.cmd.Args, command, err)
			}
			return
		case <-limit:
			t.Fatalf("%q did not exit within 30s of %q", g.cmd.Args, command)
		}
	}
}

func pingStatus(t *testing.T, addr string) slp.Status {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	st, err := slp.Ping(ctx, addr)
	if err != nil {
		t.Fatalf("Ping(%s): %v", addr, err)
	}
	return st
}

func loopbackPort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// TestProxyProfileEndToEnd runs the kiln-test-proxy and kiln-test
// profiles' start commands with this binary and wires them as Kiln does:
// the proxy's first start writes velocity.toml, WireVelocity and Configure
// edit it, and a ping of the restarted proxy answers with the backend's
// MOTD.
func TestProxyProfileEndToEnd(t *testing.T) {
	cat, err := catalog.Load(true)
	if err != nil {
		t.Fatal(err)
	}
	proxyProf, _ := cat.Get("kiln-test-proxy")
	backendProf, _ := cat.Get("kiln-test")

	backendDir, proxyDir := t.TempDir(), t.TempDir()
	backendPort, proxyPort := loopbackPort(t), loopbackPort(t)
	backendAddr := "127.0.0.1:" + strconv.Itoa(backendPort)
	proxyAddr := "127.0.0.1:" + strconv.Itoa(proxyPort)
	if err := install.Configure(backendProf, backendDir, map[string]string{"MOTD": "Behind kiln-test-proxy"}, "127.0.0.1", backendPort); err != nil {
		t.Fatal(err)
	}
	backend := startGame(t, backendProf, backendDir, backendPort)

	// First start: no velocity.toml yet, so Configure writes nothing and
	// --port alone says the port; the proxy writes its default file.
	if err := install.Configure(proxyProf, proxyDir, nil, "127.0.0.1", proxyPort); err != nil {
		t.Fatal(err)
	}
	first := startGame(t, proxyProf, proxyDir, proxyPort)
	if st := pingStatus(t, proxyAddr); st.Description != testserver.NoBackendMOTD {
		t.Errorf("Ping(unwired proxy) = %q, want %q", st.Description, testserver.NoBackendMOTD)
	}
	first.stop(t, proxyProf.StopCommand)

	old, err := os.ReadFile(filepath.Join(proxyDir, install.VelocityConfig))
	if err != nil {
		t.Fatalf("velocity.toml after the proxy's first start: %v", err)
	}
	secret := install.NewSecret()
	wired, err := install.WireVelocity(old, install.ProxyWiring{
		Bind:       proxyAddr,
		Backends:   []install.Backend{{Name: "lobby", Addr: backendAddr}},
		Try:        []string{"lobby"},
		Forwarding: install.ForwardingModern,
		Secret:     secret,
	})
	if err != nil {
		t.Fatalf("WireVelocity: %v", err)
	}
	if err := install.WriteConfigs(proxyDir, map[string][]byte{install.VelocityConfig: wired, install.VelocitySecretFile: secret.File()}); err != nil {
		t.Fatal(err)
	}
	if err := install.Configure(proxyProf, proxyDir, nil, "127.0.0.1", proxyPort); err != nil {
		t.Fatal(err)
	}

	proxy := startGame(t, proxyProf, proxyDir, proxyPort)
	st := pingStatus(t, proxyAddr)
	if st.Description != "Behind kiln-test-proxy" || st.Version.Name != "Kiln Test "+testserver.DefaultVersion {
		t.Errorf("Ping(wired proxy) = %q, version %q; want the backend's %q, %q", st.Description, st.Version.Name, "Behind kiln-test-proxy", "Kiln Test "+testserver.DefaultVersion)
	}
	proxy.stop(t, proxyProf.StopCommand)
	backend.stop(t, backendProf.StopCommand)
}

func TestTestServerProxyFlags(t *testing.T) {
	_, errOut, code := kiln(t, "testserver", "--proxy", "--motd", "x")
	if code == 0 || !strings.Contains(errOut, "do not apply to --proxy") {
		t.Errorf("kiln testserver --proxy --motd x: exit %d, stderr %q; want a usage error", code, errOut)
	}
}
