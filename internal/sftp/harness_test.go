package sftp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pkg/sftp"
	"golang.org/x/crypto/ssh"

	"github.com/kilnhq/kiln/internal/auth"
	"github.com/kilnhq/kiln/internal/secretbox"
	"github.com/kilnhq/kiln/internal/servers"
	"github.com/kilnhq/kiln/internal/servers/serverstest"
	"github.com/kilnhq/kiln/internal/store"
)

// env is a running SFTP server over real servers, tokens and a database.
type env struct {
	t       *testing.T
	db      *store.DB
	servers *servers.Service
	auth    *auth.Service
	svc     *Service
	srv     *Server
	addr    string // the listener's 127.0.0.1:port
	port    int
	teamID  string
	tokenID string
	label   string
	clock   *testClock
	dataDir string
	stop    func()
}

// testClock is the lockout's and idle check's clock: real time plus
// what the test added.
type testClock struct{ skew atomic.Int64 }

func (c *testClock) Now() time.Time          { return time.Now().Add(time.Duration(c.skew.Load())) }
func (c *testClock) Advance(d time.Duration) { c.skew.Add(int64(d)) }

// testLog sends log lines to the test output.
type testLog struct{ t testing.TB }

func (w testLog) Write(p []byte) (int, error) {
	defer func() { _ = recover() }() // a line after the test ended
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

// newEnv starts servers, a team "default" with a user token "alice", and
// an SFTP server on a free loopback port with short re-check intervals.
func newEnv(t *testing.T, db *store.DB, cfg Config) *env {
	t.Helper()
	ctx := t.Context()
	log := slog.New(slog.NewTextHandler(testLog{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
	a, err := auth.NewService(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	if _, _, err := a.Bootstrap(ctx); err != nil {
		t.Fatal(err)
	}
	_, tok, err := a.CreateToken(ctx, auth.BootstrapTeam, auth.KindUser, "alice")
	if err != nil {
		t.Fatal(err)
	}
	se := serverstest.New(t, db, serverstest.Options{Log: log})
	box, err := secretbox.New([]byte(strings.Repeat("k", 32)))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	svc := NewService(db, box, se.Service, ServiceOptions{PublicHost: "127.0.0.1", Port: port}, log)
	se.Service.OnDelete(svc.RevokeServer)
	se.Service.OnDeleteEnded(svc.DeleteEnded)
	se.Service.OnHold(svc.ServerHeld)
	e := &env{t: t, db: db, servers: se.Service, auth: a, svc: svc, addr: ln.Addr().String(), port: port,
		teamID: tok.TeamID, tokenID: tok.ID, label: "alice", clock: &testClock{}, dataDir: t.TempDir()}
	e.start(ln, cfg)
	return e
}

// start runs a Server on ln until the test ends (or stop).
func (e *env) start(ln net.Listener, cfg Config) {
	e.t.Helper()
	cfg.DataDir = e.dataDir
	if cfg.CheckInterval == 0 {
		cfg.CheckInterval = 50 * time.Millisecond
	}
	cfg.Now = e.clock.Now
	log := slog.New(slog.NewTextHandler(testLog{e.t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
	srv, err := NewServer(e.svc, cfg, log)
	if err != nil {
		e.t.Fatal(err)
	}
	e.srv = srv
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	var once sync.Once
	e.stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				e.t.Errorf("Serve = %v", err)
			}
		})
	}
	e.t.Cleanup(e.stop)
}

// restart stops the server and starts a new one on the same port and
// data directory.
func (e *env) restart(cfg Config) {
	e.t.Helper()
	e.stop()
	ln, err := net.Listen("tcp", e.addr)
	if err != nil {
		e.t.Fatal(err)
	}
	e.start(ln, cfg)
}

// newServer creates a kiln-test server of the team and waits for its
// install; it returns the server and its root.
func (e *env) newServer(name string) (servers.Server, string) {
	e.t.Helper()
	sv, err := e.servers.Create(e.t.Context(), e.teamID, servers.NewServer{Name: name, Software: "kiln-test", MemoryMB: 512, DiskMB: 1024})
	if err != nil {
		e.t.Fatalf("Create = %v", err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for sv.Status != servers.StatusOffline {
		if time.Now().After(deadline) {
			e.t.Fatalf("server %s never installed: status %q", sv.ID, sv.Status)
		}
		time.Sleep(20 * time.Millisecond)
		if sv, err = e.servers.Get(e.t.Context(), e.teamID, sv.ID); err != nil {
			e.t.Fatal(err)
		}
	}
	a, err := e.servers.Access(e.t.Context(), e.teamID, sv.ID, false)
	if err != nil {
		e.t.Fatal(err)
	}
	return sv, a.Root
}

// creds gets (or rotates) alice's credentials on a server.
func (e *env) creds(serverID string, rotate bool) Credentials {
	e.t.Helper()
	c, err := e.svc.Credentials(e.t.Context(), e.teamID, e.tokenID, e.label, serverID, rotate)
	if err != nil {
		e.t.Fatalf("Credentials = %v", err)
	}
	return c
}

// dial logs in with the pkg/sftp client (checking the host key).
func (e *env) dial(user, password string) (*sftp.Client, *ssh.Client, error) {
	cfg := &ssh.ClientConfig{
		User:            user,
		Auth:            []ssh.AuthMethod{ssh.Password(password)},
		HostKeyCallback: ssh.FixedHostKey(e.srv.HostKey()),
		Timeout:         30 * time.Second,
	}
	c, err := ssh.Dial("tcp", e.addr, cfg)
	if err != nil {
		return nil, nil, err
	}
	sc, err := sftp.NewClient(c, sftp.MaxPacketUnchecked(256<<10-1024), sftp.UseConcurrentWrites(true))
	if err != nil {
		c.Close()
		return nil, nil, err
	}
	return sc, c, nil
}

// mustDial is dial that fails the test, closing the client at its end.
func (e *env) mustDial(c Credentials) *sftp.Client {
	e.t.Helper()
	sc, conn, err := e.dial(c.ComputedUsername, c.Password)
	if err != nil {
		e.t.Fatalf("login as %s: %v", c.ComputedUsername, err)
	}
	e.t.Cleanup(func() { sc.Close(); conn.Close() })
	return sc
}

// waitEnded waits until the SFTP client's connection is closed by the
// server (30 s at most: a loaded machine under -race).
func waitEnded(t *testing.T, sc *sftp.Client, what string) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- sc.Wait() }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatalf("the session was not ended after %s", what)
	}
	if _, err := sc.Getwd(); err == nil {
		t.Fatalf("the session still answers after %s", what)
	}
}

var skipOnce sync.Once

// needClients skips (one loud line for the whole run) when OpenSSH's sftp
// or sshpass is missing, unless KILN_REQUIRE_SFTP_CLIENT=1.
func needClients(t *testing.T) {
	t.Helper()
	var missing []string
	for _, bin := range []string{"sftp", "sshpass"} {
		if _, err := exec.LookPath(bin); err != nil {
			missing = append(missing, bin)
		}
	}
	if len(missing) == 0 {
		return
	}
	if os.Getenv("KILN_REQUIRE_SFTP_CLIENT") == "1" {
		t.Fatalf("%s not installed but KILN_REQUIRE_SFTP_CLIENT=1 (apt-get install openssh-client sshpass)", strings.Join(missing, ", "))
	}
	skipped := false
	skipOnce.Do(func() {
		skipped = true
		t.Skipf("SKIP SFTP CLIENT: %s not installed (apt-get install openssh-client sshpass); the OpenSSH client tests do not run", strings.Join(missing, ", "))
	})
	if !skipped {
		t.SkipNow()
	}
}

// openssh runs OpenSSH's sftp client in batch mode (password by sshpass,
// from the environment, never on a command line) in dir, with the
// commands of batch; it returns the output and whether sftp succeeded.
func (e *env) openssh(c Credentials, dir, batch string, extra ...string) (string, error) {
	e.t.Helper()
	// ssh keeps the first value of an option: extra ones go first.
	args := append([]string{"-e", "sftp"}, extra...)
	args = append(args, "-oBatchMode=no", "-b", "-", "-P", strconv.Itoa(e.port),
		"-oStrictHostKeyChecking=no", "-oUserKnownHostsFile=/dev/null", "-oLogLevel=ERROR",
		"-oPreferredAuthentications=password", "-oPubkeyAuthentication=no", "-oNumberOfPasswordPrompts=1")
	args = append(args, c.ComputedUsername+"@127.0.0.1")
	ctx, cancel := context.WithTimeout(e.t.Context(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "sshpass", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "SSHPASS="+c.Password)
	cmd.Stdin = strings.NewReader(batch)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// mustOpenSSH is openssh that fails the test when sftp fails.
func (e *env) mustOpenSSH(c Credentials, dir, batch string) string {
	e.t.Helper()
	out, err := e.openssh(c, dir, batch)
	if err != nil {
		e.t.Fatalf("sftp batch failed: %v\nbatch:\n%s\noutput:\n%s", err, batch, out)
	}
	return out
}

// writeRandom writes n pseudo-random bytes to path and returns them.
func writeRandom(t *testing.T, path string, n int, seed int64) []byte {
	t.Helper()
	b := make([]byte, n)
	x := uint64(seed)*0x9E3779B97F4A7C15 + 1
	for i := range b {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		b[i] = byte(x)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return b
}

// mustRead reads a file of a root.
func mustRead(t *testing.T, root, rel string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, rel))
	if err != nil {
		t.Fatalf("read %s: %v", rel, err)
	}
	return b
}

// statusCode is the SFTP status of err (0 when it is none).
func statusCode(err error) uint32 {
	var se *sftp.StatusError
	if errors.As(err, &se) {
		return se.Code
	}
	return 0
}

func fmtErr(err error) string { return fmt.Sprintf("%v (code %d)", err, statusCode(err)) }
