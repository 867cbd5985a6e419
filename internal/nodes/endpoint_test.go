package nodes

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/kilnhq/kiln/internal/agent"
	"github.com/kilnhq/kiln/internal/cluster"
	"github.com/kilnhq/kiln/internal/eventually"
	"github.com/kilnhq/kiln/internal/node"
	"github.com/kilnhq/kiln/internal/store"
	"github.com/kilnhq/kiln/internal/store/storetest"
)

// serveEndpoint runs f's node endpoint on a loopback port until the test
// ends, calling a node unreachable after within; it returns its https URL.
func serveEndpoint(t *testing.T, f *fixture, within time.Duration) (string, *Endpoint) {
	t.Helper()
	return serveEndpointOpts(t, f, EndpointOptions{UnreachableAfter: within, RevocationPoll: 20 * time.Millisecond})
}

// serveEndpointOpts is serveEndpoint with opts.
func serveEndpointOpts(t *testing.T, f *fixture, opts EndpointOptions) (string, *Endpoint) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ep := NewEndpoint(f.svc, f.ca, opts, slog.New(slog.DiscardHandler))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ep.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve = %v", err)
		}
	})
	return "https://" + ln.Addr().String(), ep
}

// client is an HTTP/2 client of the endpoint with cert as its client
// certificate (none: nil), checking the control plane against the CA.
func client(f *fixture, cert *tls.Certificate) *http.Client {
	cfg := cluster.NodeTLS(f.ca.Certificate(), tls.Certificate{})
	cfg.Certificates = nil
	if cert != nil {
		cfg.Certificates = []tls.Certificate{*cert}
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: cfg, ForceAttemptHTTP2: true}}
}

func call(t *testing.T, c *http.Client, url, body string) (int, string) {
	t.Helper()
	resp, err := c.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestEndpointRefuses: without a client certificate only enrollment
// answers; malformed calls get the error model's bodies.
func TestEndpointRefuses(t *testing.T) {
	f := newFixture(t, storetest.SQLite(t))
	url, _ := serveEndpoint(t, f, 3*time.Second)
	c := client(f, nil)
	for _, tc := range []struct{ path, body, want string }{
		{cluster.PathSession, `{"type":"hello"}`, `{"error":"this call needs a node's client certificate","code":"NODE_NOT_MEMBER"}`},
		{cluster.PathEnroll, `{"token":1}`, `{"error":"the body must be a JSON object {token, csr}","code":"VALIDATION_ERROR"}`},
		{cluster.PathEnroll, `{"token":"x","csr":"y","extra":1}`, `{"error":"the body must be a JSON object {token, csr}","code":"VALIDATION_ERROR"}`},
		{cluster.PathEnroll, `{"token":"x","csr":"y"}`, `{"error":"that is not a Kiln join token","code":"INVALID_JOIN_TOKEN"}`},
		{"/v1/servers", `{}`, `{"error":"no such call on the node endpoint","code":"NOT_FOUND"}`},
	} {
		if _, got := call(t, c, url+tc.path, tc.body); strings.TrimSpace(got) != tc.want {
			t.Errorf("POST %s %s = %s, want %s", tc.path, tc.body, got, tc.want)
		}
	}
}

// TestEndpointCutsRemovedNode: a node's open session is cut when the
// node is removed (by another process: the endpoint finds out from the
// database), without waiting for its next heartbeat or its silence (a
// minute here); its next call is refused, and a real agent stops saying
// so.
func TestEndpointCutsRemovedNode(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		f := newFixture(t, db)
		url, ep := serveEndpoint(t, f, time.Minute)
		ctx := t.Context()

		// A real agent joins and reports.
		tok, _, err := f.svc.Add(ctx, "edge-1", f.ca.Certificate())
		if err != nil {
			t.Fatal(err)
		}
		agentDone := make(chan error, 1)
		go func() {
			agentDone <- agent.Run(ctx, agent.Config{ServerURL: url, JoinToken: tok.String(), DataDir: t.TempDir(), PublicHost: "127.0.0.2",
				Ports: node.PortRange{First: 30000, Last: 30009}, SFTPAddr: "127.0.0.2:2022", Runtime: "process", Version: "test",
				MinBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond}, slog.New(slog.DiscardHandler))
		}()
		eventually.True(t, eventually.Within, "edge-1 ready", func() (bool, string) {
			list, err := f.svc.List(ctx)
			if err != nil || len(list) != 1 {
				return false, "list: " + show(list)
			}
			n := list[0]
			return n.Status == StatusReady && n.PublicHost == "127.0.0.2" && n.Version == "test" && n.MemoryTotal > 0 && n.PortsFree == 10, show(list)
		})

		// A session of another node, held open by hand.
		key, csr := request(t)
		tok2, _, _ := f.svc.Add(ctx, "edge-2", f.ca.Certificate())
		_, certPEM, err := f.svc.Enroll(ctx, f.ca, tok2.String(), csr)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := pem.Decode(certPEM)
		cert := &tls.Certificate{Certificate: [][]byte{b.Bytes}, PrivateKey: key}
		c := client(f, cert)
		pr, pw := io.Pipe()
		defer pw.Close()
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url+cluster.PathSession, pr)
		go json.NewEncoder(pw).Encode(cluster.Up{Type: cluster.TypeHello, Hello: &cluster.Hello{Version: "x", PublicHost: "h", SFTPAddr: "h:1",
			PortFirst: 1, PortLast: 2, Runtime: "docker"}})
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		rd := bufio.NewReader(resp.Body)
		line, err := rd.ReadString('\n')
		var welcome cluster.Down
		if err != nil || json.Unmarshal([]byte(line), &welcome) != nil || welcome.Type != cluster.TypeWelcome || welcome.Welcome.Node != "edge-2" ||
			welcome.Welcome.HeartbeatIntervalMS != 5000 {
			t.Fatalf("welcome = %q, %v", line, err)
		}
		cut := make(chan error, 1)
		go func() { _, err := rd.ReadString('\n'); cut <- err }()

		for _, name := range []string{"edge-2", "edge-1"} {
			if err := f.svc.Remove(ctx, name); err != nil {
				t.Fatal(err)
			}
		}
		select {
		case err := <-cut:
			if err == nil || errors.Is(err, io.EOF) {
				t.Errorf("after the node was removed, the session read %v; want its connection cut", err)
			}
		case <-time.After(eventually.Within):
			t.Fatal("the removed node's session was never cut")
		}
		code, body := call(t, client(f, cert), url+cluster.PathSession, "")
		if code != http.StatusForbidden || !strings.Contains(body, `"code":"NODE_NOT_MEMBER"`) {
			t.Errorf("a call with the removed node's certificate = %d %s, want 403 NODE_NOT_MEMBER", code, body)
		}
		select {
		case err := <-agentDone:
			if re, ok := errors.AsType[*agent.RefusedError](err); !ok || re.Code != cluster.CodeNotMember {
				t.Errorf("the removed agent stopped with %v, want NODE_NOT_MEMBER", err)
			}
		case <-time.After(eventually.Within):
			t.Fatal("the removed agent never stopped")
		}
		// Connections closed are forgotten.
		c.CloseIdleConnections()
		eventually.True(t, eventually.Within, "no connection tracked", func() (bool, string) {
			ep.mu.Lock()
			defer ep.mu.Unlock()
			return len(ep.conns) == 0, fmt.Sprintf("%d tracked", len(ep.conns))
		})
	})
}
