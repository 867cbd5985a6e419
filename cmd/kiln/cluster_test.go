package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"io"
	"net"
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

	"github.com/kilnhq/kiln/internal/cluster"
	"github.com/kilnhq/kiln/internal/eventually"
	"github.com/kilnhq/kiln/internal/servers/serverstest"
	"github.com/kilnhq/kiln/internal/store"
)

// agentProc is a running `kiln agent`.
type agentProc struct {
	cmd    *exec.Cmd
	mu     sync.Mutex
	stderr bytes.Buffer
	done   chan struct{}
	err    error
}

func (a *agentProc) Stderr() string { a.mu.Lock(); defer a.mu.Unlock(); return a.stderr.String() }

func (a *agentProc) Write(p []byte) (int, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.stderr.Write(p)
}

// startAgent runs kiln agent with args; it is killed when the test ends.
func startAgent(t *testing.T, args ...string) *agentProc {
	t.Helper()
	passable(t, args) // as root its game servers run as users of their own
	a := &agentProc{done: make(chan struct{})}
	a.cmd = exec.Command(kilnBin, append([]string{"agent"}, args...)...)
	a.cmd.Env = cleanEnv()
	a.cmd.Stderr = a
	if err := a.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { a.err = a.cmd.Wait(); close(a.done) }()
	t.Cleanup(func() {
		a.cmd.Process.Kill()
		<-a.done
	})
	return a
}

// exit waits for the agent to end and returns its exit code.
func (a *agentProc) exit(t *testing.T) int {
	t.Helper()
	select {
	case <-a.done:
	case <-time.After(eventually.Within):
		t.Fatalf("kiln agent did not end\nstderr:\n%s", a.Stderr())
	}
	return a.cmd.ProcessState.ExitCode()
}

var clusterAddrRE = regexp.MustCompile(`msg="node endpoint listening" addr=(\S+)`)

// startControlPlane runs kiln serve with a node endpoint on a loopback
// port and a silence window of 2 s; it returns the process and the
// endpoint's URL.
func startControlPlane(t *testing.T, dir string) (*proc, string) {
	t.Helper()
	p := startServe(t, "--data-dir", dir, "--cluster-addr", "127.0.0.1:0", "--node-unreachable-after", "2s")
	m := clusterAddrRE.FindStringSubmatch(p.Stderr())
	if m == nil {
		t.Fatalf("no node endpoint in the log:\n%s", p.Stderr())
	}
	return p, "https://" + m[1]
}

// nodeAdd runs kiln admin node add and returns the token.
func nodeAdd(t *testing.T, dir, name string) string {
	t.Helper()
	out, errOut, code := kiln(t, "admin", "node", "add", name, "--data-dir", dir)
	if code != 0 || !regexp.MustCompile(`^KILN1[0-9a-f]{64}::`+regexp.QuoteMeta(name)+`:[0-9A-Za-z]{43}\n$`).MatchString(out) {
		t.Fatalf("node add %s = %q %q exit %d; want only the token", name, out, errOut, code)
	}
	return strings.TrimSpace(out)
}

// nodeList runs kiln admin node list --json.
func nodeList(t *testing.T, dir string) map[string]nodeJSON {
	t.Helper()
	out, errOut, code := kiln(t, "admin", "node", "list", "--json", "--data-dir", dir)
	if code != 0 {
		t.Fatalf("node list = exit %d %s", code, errOut)
	}
	var l struct{ Nodes []nodeJSON }
	if err := json.Unmarshal([]byte(out), &l); err != nil {
		t.Fatalf("node list --json: %v\n%s", err, out)
	}
	m := map[string]nodeJSON{}
	for _, n := range l.Nodes {
		m[n.Name] = n
	}
	return m
}

// waitNode waits until node name's listing satisfies cond.
func waitNode(t *testing.T, dir, name, what string, cond func(n nodeJSON, ok bool) bool) nodeJSON {
	t.Helper()
	return eventually.Value(t, eventually.Within, what, func() (nodeJSON, bool, string) {
		n, ok := nodeList(t, dir)[name]
		b, _ := json.Marshal(n)
		return n, cond(n, ok), string(b)
	})
}

// agentArgs are the flags of an agent of the control plane whose data
// dir is cpDir: it shares its blob store (kiln serve's default, the data
// dir's blobs).
func agentArgs(url, cpDir, dataDir, ports string, extra ...string) []string {
	return append([]string{"--server", url, "--data-dir", dataDir, "--public-host", "127.0.0.2", "--port-range", ports,
		"--sftp-addr", "127.0.0.2:2022", "--blob-url", "file://" + filepath.Join(cpDir, "blobs")}, extra...)
}

// TestAgentJoins: an agent on 127.0.0.2 joins a kiln serve on 127.0.0.1
// with a one-time token and is listed ready with its report, next to the
// local node; the token does not serve twice, nor once expired; a
// restarted agent needs no token; drain and undrain show; an agent killed
// is unreachable once the silence window has passed.
func TestAgentJoins(t *testing.T) {
	dir := t.TempDir()
	cp, url := startControlPlane(t, dir)
	tok := nodeAdd(t, dir, "edge-1")
	if n := nodeList(t, dir)["edge-1"]; n.Status != "pending" || n.Kind != "agent" || n.JoinExpiresAt == nil || n.LastHeartbeatAt != nil || n.MemoryTotalMB != nil {
		t.Errorf("edge-1 before joining: %+v; want pending, a token expiry, no report", n)
	}

	ports := serverstest.PortRange(t, 10)
	// Something on the host listens on the range's first port: the
	// report leaves it out of the free ones.
	busy, err := net.Listen("tcp", net.JoinHostPort("127.0.0.2", ports.String()[:strings.IndexByte(ports.String(), '-')]))
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	adir := filepath.Join(t.TempDir(), "agent")
	a := startAgent(t, agentArgs(url, dir, adir, ports.String(), "--join-token", tok)...)
	n := waitNode(t, dir, "edge-1", "edge-1 ready", func(n nodeJSON, ok bool) bool { return ok && n.Status == "ready" })
	if n.Kind != "agent" || deref(n.PublicHost) != "127.0.0.2" || deref(n.SFTPAddr) != "127.0.0.2:2022" || deref(n.PortRange) != ports.String() ||
		deref(n.Runtime) != "process" || deref(n.Version) != "dev" || !strings.HasPrefix(deref(n.Address), "127.0.0.1:") ||
		n.MemoryTotalMB == nil || *n.MemoryTotalMB <= 0 || n.DiskTotalMB == nil || *n.DiskTotalMB <= 0 || n.PortsFree == nil || *n.PortsFree != 9 ||
		n.Servers != 0 || n.MemoryAllocatedMB != 0 || n.CertExpiresAt == nil || n.JoinExpiresAt != nil || n.Draining {
		b, _ := json.Marshal(n)
		t.Errorf("edge-1 ready: %s", b)
	}
	if l := nodeList(t, dir)["local"]; l.Kind != "local" || l.Status != "ready" || l.Address != nil || deref(l.PortRange) != "25565-25664" {
		b, _ := json.Marshal(l)
		t.Errorf("the local node: %s; want listed, ready", b)
	}
	// The identity: 0600, the CA the token named.
	for _, f := range []string{"node.key", "node.pem", "ca.pem"} {
		if fi, err := os.Stat(filepath.Join(adir, f)); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v, %v; want 0600", f, fi, err)
		}
	}
	caPEM, _ := os.ReadFile(filepath.Join(adir, "ca.pem"))
	if ca, err := cluster.ParseCertificatePEM(caPEM); err != nil || !strings.HasPrefix(tok, "KILN1"+cluster.Fingerprint(ca)+"::") {
		t.Errorf("the pinned CA is not the token's: %v", err)
	}
	if secret := tok[strings.LastIndexByte(tok, ':')+1:]; strings.Contains(a.Stderr(), secret) || strings.Contains(cp.Stderr(), secret) {
		t.Error("the token's secret is in a log")
	}

	// The token again, by another agent: refused.
	_, errOut, code := kiln(t, append([]string{"agent"}, agentArgs(url, dir, t.TempDir(), ports.String(), "--join-token", tok)...)...)
	if code != 1 || !strings.Contains(errOut, "kiln: join the cluster: the join token was used already (INVALID_JOIN_TOKEN)\n") {
		t.Errorf("a used token: exit %d, %s", code, errOut)
	}
	// An expired token: refused, saying so.
	tok2 := nodeAdd(t, dir, "edge-2")
	db, err := store.OpenExisting(t.Context(), store.Options{DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Write().ExecContext(t.Context(), `UPDATE nodes SET join_expires_at = 1000 WHERE name = 'edge-2'`); err != nil {
		t.Fatal(err)
	}
	db.Close()
	_, errOut, code = kiln(t, append([]string{"agent"}, agentArgs(url, dir, t.TempDir(), ports.String(), "--join-token", tok2)...)...)
	if code != 1 || !strings.Contains(errOut, "kiln: join the cluster: the join token expired at 1970-01-01T00:00:01Z; make a new one with kiln admin node add edge-2 (INVALID_JOIN_TOKEN)\n") {
		t.Errorf("an expired token: exit %d, %s", code, errOut)
	}

	// Drain and undrain.
	if out, _, code := kiln(t, "admin", "node", "drain", "edge-1", "--data-dir", dir); code != 0 || out != "drained edge-1: no new servers are placed on it\n" {
		t.Errorf("drain = %q exit %d", out, code)
	}
	if n := nodeList(t, dir)["edge-1"]; n.Status != "draining" || !n.Draining {
		t.Errorf("after drain: %s, draining %v", n.Status, n.Draining)
	}
	if out, _, code := kiln(t, "admin", "node", "undrain", "edge-1", "--data-dir", dir); code != 0 || out != "undrained edge-1\n" {
		t.Errorf("undrain = %q exit %d", out, code)
	}
	if _, errOut, code := kiln(t, "admin", "node", "drain", "nope", "--data-dir", dir); code != 1 || errOut != "kiln: database "+dir+"/kiln.db\nkiln: node \"nope\" not found\n" {
		t.Errorf("drain of an unknown node: exit %d %q", code, errOut)
	}

	// A restart needs no token.
	a.cmd.Process.Signal(syscall.SIGTERM)
	if code := a.exit(t); code != 0 {
		t.Fatalf("agent after SIGTERM: exit %d\n%s", code, a.Stderr())
	}
	before := *nodeList(t, dir)["edge-1"].LastHeartbeatAt
	a = startAgent(t, agentArgs(url, dir, adir, ports.String())...)
	waitNode(t, dir, "edge-1", "edge-1 reporting again", func(n nodeJSON, ok bool) bool {
		return ok && n.Status == "ready" && n.LastHeartbeatAt != nil && *n.LastHeartbeatAt > before
	})

	// kill -9: unreachable once 2 s have passed without a word.
	a.cmd.Process.Kill()
	a.exit(t)
	waitNode(t, dir, "edge-1", "edge-1 unreachable", func(n nodeJSON, ok bool) bool { return ok && n.Status == "unreachable" })
	out, _, _ := kiln(t, "admin", "node", "list", "--data-dir", dir)
	certExpires := time.UnixMilli(*nodeList(t, dir)["edge-1"].CertExpiresAt).UTC().Format(time.DateOnly)
	if !regexp.MustCompile(`(?m)^NAME\s+STATUS\s+ADDRESS\s+PUBLIC HOST\s+LAST HEARTBEAT\s+MEMORY \(ALLOCATED/TOTAL\)\s+DISK \(FREE/TOTAL\)\s+FREE PORTS\s+SERVERS\s+VERSION\s+CERTIFICATE EXPIRES\n` +
		`edge-1\s+unreachable\s+127\.0\.0\.1:\d+\s+127\.0\.0\.2\s+\S+Z\s+0B/\S+\s+\S+/\S+\s+9\s+0\s+dev\s+` + certExpires + `\n` +
		`edge-2\s+pending \(token expired\)\s+-\s+-\s+-\s+-\s+-\s+-\s+0\s+-\s+-\n` +
		`local\s+ready\s+\(local\)\s+127\.0\.0\.1\s+`).MatchString(out) {
		t.Errorf("node list:\n%s", out)
	}
}

func deref(s *string) string {
	if s == nil {
		return "<nil>"
	}
	return *s
}

// TestAgentChecksControlPlane: an agent whose token names another CA
// than the control plane's stops before it sends the token: a server
// standing in for an impostor never reads a byte of a request, and the
// real control plane, given a forged fingerprint, is refused the same
// way; the genuine token then joins.
func TestAgentChecksControlPlane(t *testing.T) {
	dir := t.TempDir()
	_, url := startControlPlane(t, dir)
	tok := nodeAdd(t, dir, "edge-1")
	ports := serverstest.PortRange(t, 10).String()

	// An impostor: a TLS server with a CA of its own, showing it.
	certPEM, keyDER, err := cluster.NewCA(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	fake, err := cluster.LoadCA(certPEM, keyDER)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := fake.ServerCertificate(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{*cert}, NextProtos: []string{"h2", "http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var read sync.WaitGroup
	var mu sync.Mutex
	got := 0
	read.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			read.Go(func() {
				defer c.Close()
				c.SetDeadline(time.Now().Add(10 * time.Second))
				b, _ := io.ReadAll(c)
				mu.Lock()
				got += len(b)
				mu.Unlock()
			})
		}
	})
	_, errOut, code := kiln(t, append([]string{"agent"}, agentArgs("https://"+ln.Addr().String(), dir, t.TempDir(), ports, "--join-token", tok)...)...)
	ln.Close()
	read.Wait()
	wantErr := "the control plane's certificate authority is not the join token's (token: " + tok[5:69] + ", shown: " + fake.Fingerprint() + "); the token was not sent\n"
	if code != 1 || !strings.HasSuffix(errOut, "kiln: "+wantErr) {
		t.Errorf("against an impostor: exit %d, %s", code, errOut)
	}
	if got != 0 {
		t.Errorf("the impostor read %d bytes of requests, want none", got)
	}

	// The real control plane, a token with a forged fingerprint.
	sum := sha256.Sum256([]byte("forged"))
	forged := "KILN1" + hex.EncodeToString(sum[:]) + tok[69:]
	adir := t.TempDir()
	_, errOut, code = kiln(t, append([]string{"agent"}, agentArgs(url, dir, adir, ports, "--join-token", forged)...)...)
	if code != 1 || !strings.Contains(errOut, "kiln: the control plane's certificate authority is not the join token's (token: "+hex.EncodeToString(sum[:])+", shown: "+tok[5:69]+"); the token was not sent\n") {
		t.Errorf("a forged fingerprint: exit %d, %s", code, errOut)
	}
	if _, err := os.Stat(filepath.Join(adir, "node.pem")); !os.IsNotExist(err) {
		t.Errorf("a refused join left a certificate: %v", err)
	}
	startAgent(t, agentArgs(url, dir, adir, ports, "--join-token", tok)...)
	waitNode(t, dir, "edge-1", "edge-1 ready with the genuine token", func(n nodeJSON, ok bool) bool { return ok && n.Status == "ready" })
}

// TestRemovedNodeCut: removing a node cuts its agent's open connection
// and refuses its certificate from then on: the agent stops, saying so,
// and a call made with its key and certificate is refused.
func TestRemovedNodeCut(t *testing.T) {
	dir := t.TempDir()
	_, url := startControlPlane(t, dir)
	tok := nodeAdd(t, dir, "edge-1")
	adir := t.TempDir()
	a := startAgent(t, agentArgs(url, dir, adir, serverstest.PortRange(t, 10).String(), "--join-token", tok)...)
	waitNode(t, dir, "edge-1", "edge-1 ready", func(n nodeJSON, ok bool) bool { return ok && n.Status == "ready" })

	if _, errOut, code := kiln(t, "admin", "node", "remove", "local", "--data-dir", dir); code != 1 ||
		!strings.HasSuffix(errOut, "kiln: node \"local\" is the local node of a kiln serve that runs; stop that kiln serve first\n") {
		t.Errorf("remove the running local node: exit %d %q", code, errOut)
	}
	out, errOut, code := kiln(t, "admin", "node", "remove", "edge-1", "--data-dir", dir)
	if code != 0 || out != "removed edge-1: its certificate is refused from now on\n" {
		t.Fatalf("remove = %q %q exit %d", out, errOut, code)
	}
	if code := a.exit(t); code != 1 {
		t.Errorf("the removed agent: exit %d, want 1", code)
	}
	log := a.Stderr()
	cutAt := strings.Index(log, `msg="session with the control plane ended; reconnecting"`)
	refusedAt := strings.Index(log, "kiln: the control plane refused this node: node \"edge-1\" is not a member of this cluster with this certificate (removed, or joined again since); join it again with a new token from kiln admin node add (NODE_NOT_MEMBER)\n")
	if cutAt < 0 || refusedAt < cutAt {
		t.Errorf("the agent's log: want its session cut, then its certificate refused:\n%s", log)
	}
	if _, ok := nodeList(t, dir)["edge-1"]; ok {
		t.Error("edge-1 still listed")
	}

	// Its key and certificate: refused.
	pair, err := tls.LoadX509KeyPair(filepath.Join(adir, "node.pem"), filepath.Join(adir, "node.key"))
	if err != nil {
		t.Fatal(err)
	}
	caPEM, _ := os.ReadFile(filepath.Join(adir, "ca.pem"))
	ca, _ := cluster.ParseCertificatePEM(caPEM)
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: cluster.NodeTLS(ca, pair), ForceAttemptHTTP2: true}}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url+cluster.PathSession, strings.NewReader(""))
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 403 || !strings.Contains(string(body), `"code":"NODE_NOT_MEMBER"`) {
		t.Errorf("a call with the removed node's certificate = %d %s", resp.StatusCode, body)
	}
}

// TestClusterFlags: mistakes on the command line of the cluster's
// commands exit 2 with what is wrong.
func TestClusterFlags(t *testing.T) {
	good := []string{"--server", "https://127.0.0.1:7000", "--public-host", "127.0.0.2", "--data-dir", t.TempDir(), "--blob-url", "file://" + t.TempDir()}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"serve", "--cluster-addr", "nonsense"}, `--cluster-addr "nonsense"`},
		{[]string{"serve", "--node-unreachable-after", "500ms"}, "--node-unreachable-after 500ms: want 1s to 10m"},
		{[]string{"serve", "--node-name", "-x"}, `--node-name: node name "-x": want 1-63 letters`},
		{[]string{"agent", "--public-host", "h"}, "--server is required"},
		{[]string{"agent", "--server", "http://cp:7000", "--public-host", "h"}, `--server "http://cp:7000": want https://HOST:PORT`},
		{[]string{"agent", "--server", "https://cp:7000/x", "--public-host", "h"}, `--server "https://cp:7000/x": want https://HOST:PORT`},
		{[]string{"agent", "--server", "https://cp:7000"}, "--public-host is required"},
		{append(good, "--port-range", "9-1"), "--port-range"},
		{append(good, "--sftp-addr", "2022"), `--sftp-addr "2022"`},
		{append(good, "--runtime", "vm"), `--runtime "vm": want process or docker`},
		{append(good, "extra"), "kiln agent takes no arguments"},
		{[]string{"agent", "--server", "https://cp:7000", "--public-host", "h"}, "--blob-url is required: the blob store every node shares"},
		{append(good, "--blob-url", "ftp://x/y"), `--blob-url: open blob store: unsupported scheme "ftp"`},
		{[]string{"admin", "node", "add"}, "kiln admin node add NAME takes 1 argument(s), got 0"},
		{[]string{"admin", "node", "add", "a b"}, `NAME: node name "a b"`},
		{[]string{"admin", "node", "list", "x"}, "kiln admin node list takes 0 argument(s), got 1"},
	} {
		if c.args[0] != "serve" && c.args[0] != "admin" && c.args[0] != "agent" {
			c.args = append([]string{"agent"}, c.args...)
		}
		_, errOut, code := kiln(t, c.args...)
		if code != 2 || !strings.Contains(errOut, c.want) {
			t.Errorf("kiln %q: exit %d, stderr %q; want exit 2 mentioning %q", c.args, code, errOut, c.want)
		}
	}
	// An agent that has not joined, without a token: exit 1, saying what to do.
	passable(t, good) // as root its game servers' users must reach their roots
	_, errOut, code := kiln(t, append([]string{"agent"}, good...)...)
	if code != 1 || !strings.HasSuffix(errOut, "kiln: this agent has not joined a cluster yet: give it --join-token (kiln admin node add NAME on the control plane prints one)\n") {
		t.Errorf("agent without identity or token: exit %d %q", code, errOut)
	}
}

// TestAgentBlobStore: an agent whose --blob-url is not the control
// plane's store (another directory) joins, finds no marker there and
// stops, saying which store it does not see; started again on the
// control plane's store, it serves.
func TestAgentBlobStore(t *testing.T) {
	dir := t.TempDir()
	cp, url := startControlPlane(t, dir)
	if !strings.Contains(cp.Stderr(), `msg="blob store marker for agents" store=file://`+filepath.Join(dir, "blobs")+" key=cluster/marker sha256=") {
		t.Errorf("the control plane's log names no marker:\n%s", cp.Stderr())
	}
	tok := nodeAdd(t, dir, "edge-1")
	ports := serverstest.PortRange(t, 10).String()
	adir, other := t.TempDir(), t.TempDir()
	_, errOut, code := kiln(t, append([]string{"agent"}, agentArgs(url, dir, adir, ports, "--join-token", tok, "--blob-url", "file://"+other)...)...)
	want := "kiln: this agent does not see the control plane's blob store at file://" + other + ": the marker cluster/marker the control plane wrote is not there; " +
		"give kiln agent the --blob-url every node shares (an S3 bucket, or a directory each machine mounts) and start it again\n"
	if code != 1 || !strings.HasSuffix(errOut, want) {
		t.Errorf("an agent on another store: exit %d, stderr:\n%s\nwant it to end with %q", code, errOut, want)
	}
	startAgent(t, agentArgs(url, dir, adir, ports)...)
	waitNode(t, dir, "edge-1", "edge-1 ready on the shared store", func(n nodeJSON, ok bool) bool { return ok && n.Status == "ready" })
}
