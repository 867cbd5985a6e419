package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kilnhq/kiln/internal/servers/serverstest"
	"github.com/kilnhq/kiln/internal/store/storetest"
)

// These tests run the real binary as a subprocess, the way an operator does.

var kilnBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "kiln-bin")
	if err != nil {
		panic(err)
	}
	kilnBin = filepath.Join(dir, "kiln")
	// Static (CGO_ENABLED=0): the docker suite wraps it in a scratch image.
	build := exec.Command("go", "build", "-o", kilnBin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := build.CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "build kiln: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// proc is a running `kiln serve`.
type proc struct {
	t      *testing.T
	cmd    *exec.Cmd
	addr   string
	mu     sync.Mutex
	stdout bytes.Buffer
	stderr bytes.Buffer
	done   chan error
}

func (p *proc) Stdout() string { p.mu.Lock(); defer p.mu.Unlock(); return p.stdout.String() }
func (p *proc) Stderr() string { p.mu.Lock(); defer p.mu.Unlock(); return p.stderr.String() }

var addrRE = regexp.MustCompile(`msg="kiln serving" addr=(\S+)`)

// startServe runs kiln serve on a free loopback port and waits until it
// listens.
func startServe(t *testing.T, args ...string) *proc {
	t.Helper()
	return startServeWith(t, nil, kilnBin, args...)
}

// startServeUnder is startServe run by a wrapper command (e.g. prlimit
// …), which must exec kiln in its place.
func startServeUnder(t *testing.T, wrapper []string, args ...string) *proc {
	t.Helper()
	return startServeWith(t, wrapper, kilnBin, args...)
}

// startServeOf runs kiln serve of the binary bin (startServe).
func startServeOf(t *testing.T, bin string, args ...string) *proc {
	t.Helper()
	return startServeWith(t, nil, bin, args...)
}

// startServeWith runs kiln serve of the binary bin under wrapper (none:
// nil). At the end of the test the game servers it leaves running under
// holders (in <data-dir>/run) are killed.
func startServeWith(t *testing.T, wrapper []string, bin string, args ...string) *proc {
	t.Helper()
	passable(t, args)
	p := &proc{t: t, done: make(chan error, 1)}
	argv := append(append(append([]string{}, wrapper...), bin, "serve", "--addr", "127.0.0.1:0", "--sftp-addr", "127.0.0.1:0"), args...)
	p.cmd = exec.Command(argv[0], argv[1:]...)
	p.cmd.Env = cleanEnv()
	outR, _ := p.cmd.StdoutPipe()
	errR, _ := p.cmd.StderrPipe()
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	addrCh := make(chan string, 1)
	var wg sync.WaitGroup
	wg.Go(func() { p.copy(outR, &p.stdout, nil) })
	wg.Go(func() { p.copy(errR, &p.stderr, addrCh) })
	go func() { wg.Wait(); p.done <- p.cmd.Wait() }()
	t.Cleanup(func() {
		if p.cmd.ProcessState == nil {
			p.cmd.Process.Kill()
			<-p.done
		}
		if dir := dataDirOf(args); dir != "" {
			serverstest.EndHolders(t, filepath.Join(dir, "run"))
		}
	})
	select {
	case p.addr = <-addrCh:
	case err := <-p.done:
		t.Fatalf("kiln serve exited before listening: %v\nstderr:\n%s", err, p.Stderr())
	case <-time.After(60 * time.Second):
		t.Fatalf("kiln serve did not listen within 60 s\nstderr:\n%s", p.Stderr())
	}
	return p
}

// passable lets other users through the directories above --data-dir
// that the testing package made 0700 (t.TempDir): as root, kiln serve
// runs each server as a user of its own (--uid-range), which must reach
// its root, and refuses to start otherwise. Only directories below the
// system's temporary directory are changed.
func passable(t *testing.T, args []string) {
	t.Helper()
	dir := dataDirOf(args)
	if dir == "" {
		return
	}
	tmp := filepath.Clean(os.TempDir())
	for d := filepath.Dir(filepath.Clean(dir)); strings.HasPrefix(d, tmp+"/"); d = filepath.Dir(d) {
		if fi, err := os.Stat(d); err == nil && fi.Mode().Perm()&0o001 == 0 {
			if err := os.Chmod(d, fi.Mode().Perm()|0o011); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// dataDirOf is the value of --data-dir in args, "" when none.
func dataDirOf(args []string) string {
	dir := ""
	for i, a := range args {
		if a == "--data-dir" && i+1 < len(args) {
			dir = args[i+1]
		}
	}
	return dir
}

func (p *proc) copy(r io.Reader, buf *bytes.Buffer, addr chan<- string) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		p.mu.Lock()
		buf.WriteString(line + "\n")
		p.mu.Unlock()
		if addr != nil {
			if m := addrRE.FindStringSubmatch(line); m != nil {
				addr <- m[1]
				addr = nil
			}
		}
	}
}

func (p *proc) stop(sig os.Signal) error {
	p.t.Helper()
	p.cmd.Process.Signal(sig)
	select {
	case err := <-p.done:
		return err
	case <-time.After(30 * time.Second):
		p.t.Fatalf("kiln serve did not stop within 30 s of %v", sig)
		return nil
	}
}

// cleanEnv keeps KILN_* settings of the developer's shell out of the tests.
func cleanEnv() []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "KILN_") {
			out = append(out, kv)
		}
	}
	return out
}

// kiln runs a one-shot kiln command and returns stdout, stderr and the exit code.
func kiln(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	if len(args) > 0 && args[0] == "serve" {
		passable(t, args)
	}
	return kilnAsIs(t, args...)
}

// kilnAsIs is kiln leaving the directories above --data-dir as they are.
func kilnAsIs(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, kilnBin, args...)
	cmd.Env = cleanEnv()
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := errors.AsType[*exec.ExitError](err); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return out.String(), errb.String(), code
}

func get(t *testing.T, addr, path, token string) (int, string, http.Header) {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), "GET", "http://"+addr+path, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), resp.Header
}

var tokenRE = regexp.MustCompile(`kiln_(pat|agt)_[0-9A-Za-z]{36}`)

func TestFirstStartBootstrapsOnce(t *testing.T) {
	dir := t.TempDir()
	p := startServe(t, "--data-dir", dir)
	tokens := tokenRE.FindAllString(p.Stdout(), -1)
	if len(tokens) != 1 || !strings.HasPrefix(tokens[0], "kiln_pat_") {
		t.Fatalf("stdout shows tokens %q, want exactly one user token\n%s", tokens, p.Stdout())
	}
	tok := tokens[0]
	if strings.Contains(p.Stderr(), tok) {
		t.Error("the token appears in the log")
	}
	fi, err := os.Stat(filepath.Join(dir, "bootstrap-token"))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("bootstrap-token mode = %v, want 0600", fi.Mode().Perm())
	}
	data, _ := os.ReadFile(filepath.Join(dir, "bootstrap-token"))
	if strings.TrimSpace(string(data)) != tok {
		t.Errorf("bootstrap-token holds %q, want the printed token", data)
	}
	if status, body, _ := get(t, p.addr, "/api/client/v1/servers", tok); status != 200 || body != "{\"servers\":[],\"count\":0}\n" {
		t.Fatalf("GET /servers = %d %s", status, body)
	}
	if err := p.stop(syscall.SIGTERM); err != nil {
		t.Fatalf("exit after SIGTERM: %v\n%s", err, p.Stderr())
	}
	if !strings.Contains(p.Stderr(), `msg="shutting down"`) || !strings.Contains(p.Stderr(), "msg=stopped") {
		t.Errorf("no graceful shutdown in the log:\n%s", p.Stderr())
	}
	// A second start creates nothing and prints no token.
	p2 := startServe(t, "--data-dir", dir)
	if tokenRE.MatchString(p2.Stdout()) {
		t.Errorf("second start printed a token:\n%s", p2.Stdout())
	}
	if status, _, _ := get(t, p2.addr, "/api/client/v1/servers", tok); status != 200 {
		t.Errorf("bootstrap token after restart: %d", status)
	}
	if err := p2.stop(os.Interrupt); err != nil {
		t.Errorf("exit after SIGINT: %v", err)
	}
}

func TestAdminWhileServing(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) { adminWhileServing(t, "--data-dir", t.TempDir()) })
	t.Run("postgres", func(t *testing.T) {
		adminWhileServing(t, "--data-dir", t.TempDir(), "--database-url", storetest.PostgresURL(t))
	})
}

func adminWhileServing(t *testing.T, store ...string) {
	p := startServe(t, store...)
	out, errOut, code := kiln(t, append([]string{"admin", "team", "create", "ops"}, store...)...)
	if code != 0 || !regexp.MustCompile(`^team_[0-9A-Za-z]{20}\n$`).MatchString(out) {
		t.Fatalf("team create = %q %q exit %d", out, errOut, code)
	}
	out, errOut, code = kiln(t, append([]string{"admin", "token", "create", "--team", "ops", "--kind", "agent", "--name", "ci-bot"}, store...)...)
	if code != 0 || !regexp.MustCompile(`^kiln_agt_[0-9A-Za-z]{36}\n$`).MatchString(out) {
		t.Fatalf("token create = %q %q exit %d; want only the token", out, errOut, code)
	}
	tok := strings.TrimSpace(out)
	if status, _, _ := get(t, p.addr, "/api/client/v1/servers", tok); status != 200 {
		t.Fatalf("new token: %d", status)
	}
	out, _, code = kiln(t, append([]string{"admin", "token", "list", "--team", "ops"}, store...)...)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 2 || !strings.HasPrefix(lines[0], "ID") || !strings.Contains(lines[1], "ci-bot") || !strings.Contains(lines[1], "agent") {
		t.Fatalf("token list = %q exit %d", out, code)
	}
	if strings.Contains(out, "kiln_agt_") {
		t.Error("token list shows a token")
	}
	id := strings.Fields(lines[1])[0]
	out, _, code = kiln(t, append([]string{"admin", "token", "revoke", id}, store...)...)
	if code != 0 || out != "revoked "+id+"\n" {
		t.Fatalf("revoke = %q exit %d", out, code)
	}
	// Revocation takes effect on the very next request.
	if status, body, _ := get(t, p.addr, "/api/client/v1/servers", tok); status != 401 || !strings.Contains(body, "INVALID_TOKEN") {
		t.Errorf("revoked token: %d %s, want 401 INVALID_TOKEN", status, body)
	}
	// Operator mistakes are clear.
	_, errOut, code = kiln(t, append([]string{"admin", "token", "create", "--team", "nope", "--name", "x"}, store...)...)
	if code != 1 || !strings.Contains(errOut, "team not found") {
		t.Errorf("unknown team: exit %d %q", code, errOut)
	}
	_, errOut, code = kiln(t, append([]string{"admin", "team", "create", "ops"}, store...)...)
	if code != 1 || !strings.Contains(errOut, "already exists") {
		t.Errorf("duplicate team: exit %d %q", code, errOut)
	}
	_, errOut, code = kiln(t, append([]string{"admin", "token", "create", "--team", "ops", "--kind", "robot", "--name", "x"}, store...)...)
	if code != 2 || !strings.Contains(errOut, "user") {
		t.Errorf("bad kind: exit %d %q", code, errOut)
	}
	_, errOut, code = kiln(t, append([]string{"admin", "token", "revoke", "tok_nope"}, store...)...)
	if code != 1 || !strings.Contains(errOut, "not found") {
		t.Errorf("revoke unknown: exit %d %q", code, errOut)
	}
}

// Two kiln serve processes sharing one PostgreSQL share each token's limit.
func TestRateLimitAcrossProcesses(t *testing.T) {
	url := storetest.PostgresURL(t)
	dir := t.TempDir()
	const limit = 10
	a := startServe(t, "--data-dir", dir, "--database-url", url, "--rate-limit", fmt.Sprint(limit))
	b := startServe(t, "--data-dir", t.TempDir(), "--database-url", url, "--rate-limit", fmt.Sprint(limit))
	tok := strings.TrimSpace(string(must(os.ReadFile(filepath.Join(dir, "bootstrap-token")))))
	if tokenRE.MatchString(b.Stdout()) {
		t.Fatalf("the second replica bootstrapped again:\n%s", b.Stdout())
	}
	start := time.Now()
	ok, refused := 0, 0
	for i := range 3 * limit {
		addr := a.addr
		if i%2 == 1 {
			addr = b.addr
		}
		status, body, hdr := get(t, addr, "/api/client/v1/servers", tok)
		switch status {
		case 200:
			ok++
		case 429:
			refused++
			if hdr.Get("Retry-After") == "" {
				t.Errorf("429 without Retry-After")
			}
		default:
			t.Fatalf("status %d: %s", status, body)
		}
	}
	// GCRA refills one request every minute/limit; allow for what refilled
	// while the test ran (normally nothing).
	refill := int(time.Since(start) / (time.Minute / limit))
	if ok < limit || ok > limit+refill {
		t.Errorf("allowed %d of %d requests across two replicas, want %d (+%d refilled)", ok, 3*limit, limit, refill)
	}
	if ok+refused != 3*limit {
		t.Errorf("ok %d + refused %d != %d", ok, refused, 3*limit)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func TestBadServeFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"serve", "--database-url", "mysql://x"}, "postgres://"},
		{[]string{"serve", "--rate-limit", "0"}, "--rate-limit"},
		{[]string{"serve", "--rate-limit", "2147483648"}, "at most 2147483647"},
		{[]string{"serve", "--runtime", "vm"}, "--runtime"},
		{[]string{"serve", "--port-range", "70000-70010"}, "--port-range"},
		{[]string{"serve", "--port-range", "30010-30000"}, "--port-range"},
		{[]string{"serve", "--installer-mirror-url", "ftp://x"}, "--installer-mirror-url"},
		{[]string{"serve", "--log-format", "xml"}, "--log-format"},
		{[]string{"serve", "--snapshot-compression", "zip"}, `--snapshot-compression: snapshot compression "zip": want one of fastest, default, better`},
		{[]string{"serve", "--snapshot-dedup", "node"}, `--snapshot-dedup: snapshot dedup "node": want team or global`},
		{[]string{"serve", "--java-home", "17"}, "--java-home \"17\": want MAJOR=/absolute/java/home"},
		{[]string{"serve", "--java-home", "x=/usr/lib/jvm/x"}, "--java-home \"x=/usr/lib/jvm/x\""},
		{[]string{"serve", "--java-home", "17=jdk"}, "--java-home \"17=jdk\""},
		{[]string{"serve", "--java-home", "17=/a,17=/b"}, "--java-home: Java 17 given twice"},
		{[]string{"serve", "--addr", "nonsense"}, "--addr"},
		{[]string{"serve", "--max-conns", "0"}, "--max-conns 0: want at least 1"},
		{[]string{"serve", "--max-conns-per-addr", "-1"}, "--max-conns-per-addr -1: want at least 1"},
		{[]string{"serve", "--sftp-max-unauthenticated", "0"}, "--sftp-max-unauthenticated 0: want at least 1"},
		{[]string{"serve", "--sftp-max-unauthenticated-per-addr", "0"}, "--sftp-max-unauthenticated-per-addr 0: want at least 1"},
		{[]string{"serve", "extra"}, "no arguments"},
		{[]string{"frobnicate"}, "unknown command"},
		{[]string{"admin", "token", "create", "--name", "x"}, "--team is required"},
	} {
		_, errOut, code := kiln(t, c.args...)
		if code != 2 || !strings.Contains(errOut, c.want) {
			t.Errorf("kiln %q: exit %d, stderr %q; want exit 2 mentioning %q", c.args, code, errOut, c.want)
		}
	}
}
