package nodes

import (
	"bufio"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"hash"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kilnhq/kiln/internal/agent"
	"github.com/kilnhq/kiln/internal/cluster"
	"github.com/kilnhq/kiln/internal/eventually"
	"github.com/kilnhq/kiln/internal/node"
	"github.com/kilnhq/kiln/internal/store/storetest"
)

// streamSize is what the streaming tests move each way; leadBound is how
// far a sender may get ahead of its receiver: HTTP/2's flow-control
// windows (1 MiB up, 4 MiB down) and a few buffers, far below streamSize,
// so a body buffered whole anywhere on the way breaks it.
const (
	streamSize = 64 << 20
	leadBound  = 16 << 20
)

// stream is a body of n deterministic bytes that checks, at each Read,
// how far it is ahead of what its receiver reports consumed.
type stream struct {
	rng      *rand.ChaCha8
	left     int64
	produced int64
	consumed *atomic.Int64
	maxLead  *atomic.Int64
	sum      hash.Hash
}

func newStream(n int64, consumed, maxLead *atomic.Int64) *stream {
	return &stream{rng: rand.NewChaCha8([32]byte{7}), left: n, consumed: consumed, maxLead: maxLead, sum: sha256.New()}
}

func (s *stream) Read(p []byte) (int, error) {
	if s.left == 0 {
		return 0, io.EOF
	}
	if lead := s.produced - s.consumed.Load(); lead > s.maxLead.Load() {
		s.maxLead.Store(lead)
	}
	p = p[:min(int64(len(p)), s.left)]
	_, _ = s.rng.Read(p)
	s.sum.Write(p)
	s.left -= int64(len(p))
	s.produced += int64(len(p))
	return len(p), nil
}

// counter counts and hashes what it is written.
type counter struct {
	n   *atomic.Int64
	sum hash.Hash
}

func (c counter) Write(p []byte) (int, error) {
	c.sum.Write(p)
	c.n.Add(int64(len(p)))
	return len(p), nil
}

// testHandler is an agent's channel handler for the tests: ping, a
// streamed upload and download, and a console that answers a line per
// poke and never ends by itself.
type testHandler struct {
	name         string
	upConsumed   atomic.Int64 // bytes of the upload the handler has read
	upLead       atomic.Int64 // the client's greatest lead over it
	downConsumed atomic.Int64 // bytes of the download the test has read
	downLead     atomic.Int64
	downSum      chan string
	poke         chan string
	consoleEnded chan error
}

func newTestHandler(name string) *testHandler {
	return &testHandler{name: name, downSum: make(chan string, 1), poke: make(chan string), consoleEnded: make(chan error, 1)}
}

func (h *testHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case cluster.PathPing:
		json.NewEncoder(w).Encode(cluster.PingResponse{Node: h.name, Version: r.Proto})
	case "/upload":
		c := counter{n: &h.upConsumed, sum: sha256.New()}
		n, err := io.Copy(c, r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		fmt.Fprintf(w, "%d %x", n, c.sum.Sum(nil))
	case "/download":
		s := newStream(streamSize, &h.downConsumed, &h.downLead)
		if _, err := io.Copy(w, s); err != nil {
			return
		}
		h.downSum <- hex.EncodeToString(s.sum.Sum(nil))
	case "/console":
		rc := http.NewResponseController(w)
		w.WriteHeader(http.StatusOK)
		if err := rc.Flush(); err != nil {
			h.consoleEnded <- err
			return
		}
		for {
			select {
			case <-r.Context().Done():
				h.consoleEnded <- r.Context().Err()
				return
			case line := <-h.poke:
				fmt.Fprintln(w, line)
				if err := rc.Flush(); err != nil {
					h.consoleEnded <- err
					return
				}
			}
		}
	default:
		http.NotFound(w, r)
	}
}

// runAgent runs a real agent (agent.Run) that joins f's endpoint at url
// as name with handler h, its configuration changed by mods; it stops
// when the returned function is called or the test ends, and the
// function returns Run's error once Run has.
func runAgent(t *testing.T, f *fixture, url, name string, h http.Handler, mods ...func(*agent.Config)) (stop func() error) {
	t.Helper()
	r := startAgent(t, f, url, name, h, mods...)
	return r.stop
}

// agentRun is a real agent running.
type agentRun struct {
	cancel context.CancelFunc
	done   chan struct{} // closed when Run returned
	err    error         // Run's, once done
}

func (r *agentRun) stop() error {
	r.cancel()
	<-r.done
	return r.err
}

// wait waits for the agent to stop on its own and returns Run's error.
func (r *agentRun) wait(t *testing.T) error {
	t.Helper()
	select {
	case <-r.done:
		return r.err
	case <-time.After(eventually.Within):
		t.Fatal("the agent never stopped")
		return nil
	}
}

// startAgent is runAgent's agent.
func startAgent(t *testing.T, f *fixture, url, name string, h http.Handler, mods ...func(*agent.Config)) *agentRun {
	t.Helper()
	tok, _, err := f.svc.Add(t.Context(), name, f.ca.Certificate())
	if err != nil {
		t.Fatal(err)
	}
	cfg := agent.Config{ServerURL: url, JoinToken: tok.String(), DataDir: t.TempDir(), PublicHost: "127.0.0.2",
		Ports: node.PortRange{First: 30000, Last: 30009}, SFTPAddr: "127.0.0.2:2022", Runtime: "process", Version: "test",
		MinBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond, Handler: h}
	for _, m := range mods {
		m(&cfg)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &agentRun{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		r.err = agent.Run(ctx, cfg, slog.New(slog.DiscardHandler))
	}()
	t.Cleanup(func() { r.stop() })
	return r
}

func connected(t *testing.T, ep *Endpoint, name string) {
	t.Helper()
	eventually.True(t, eventually.Within, name+"'s channel live", func() (bool, string) { return ep.Connected(name), "not connected" })
}

func get(t *testing.T, ep *Endpoint, ctx context.Context, name, path string) (*http.Response, error) {
	t.Helper()
	c, err := ep.Client(name)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+name+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	return c.Do(req)
}

func ping(t *testing.T, ep *Endpoint, name string) cluster.PingResponse {
	t.Helper()
	resp, err := get(t, ep, t.Context(), name, cluster.PathPing)
	if err != nil {
		t.Fatalf("GET %s on %s's channel: %v", cluster.PathPing, name, err)
	}
	defer resp.Body.Close()
	var p cluster.PingResponse
	if err := json.NewDecoder(resp.Body).Decode(&p); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s = %d, %v", cluster.PathPing, resp.StatusCode, err)
	}
	return p
}

// TestChannel: the control plane calls a real agent over its channel
// (the agent dialed it; real TLS, the endpoint's own listener, on which
// sessions still speak HTTP/2): a round trip, 64 MiB up and 64 MiB down
// streamed with the sender never more than the flow-control windows
// ahead of the receiver, a console that never ends by itself while small
// calls pass beside it, and the caller's cancellation ending the agent's
// handler.
func TestChannel(t *testing.T) {
	f := newFixture(t, storetest.SQLite(t))
	url, ep := serveEndpoint(t, f, 3*time.Second)
	h := newTestHandler("edge-1")
	runAgent(t, f, url, "edge-1", h)
	connected(t, ep, "edge-1")

	// Enrollment and sessions negotiate h2 on the same listener.
	resp, err := client(f, nil).Post(url+cluster.PathSession, "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.ProtoMajor != 2 || resp.StatusCode != http.StatusForbidden {
		t.Errorf("an ordinary call on the endpoint = %s %d, want HTTP/2 403", resp.Proto, resp.StatusCode)
	}

	if p := ping(t, ep, "edge-1"); p != (cluster.PingResponse{Node: "edge-1", Version: "HTTP/2.0"}) {
		t.Errorf("ping = %+v, want edge-1 over HTTP/2.0", p)
	}

	t.Run("upload", func(t *testing.T) {
		c, err := ep.Client("edge-1")
		if err != nil {
			t.Fatal(err)
		}
		body := newStream(streamSize, &h.upConsumed, &h.upLead)
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodPut, "http://edge-1/upload", body)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		got, _ := io.ReadAll(resp.Body)
		want := fmt.Sprintf("%d %x", streamSize, body.sum.Sum(nil))
		if resp.StatusCode != http.StatusOK || string(got) != want {
			t.Errorf("PUT /upload = %d %q, want 200 %q", resp.StatusCode, got, want)
		}
		if lead := h.upLead.Load(); lead > leadBound {
			t.Errorf("the upload's sender got %d bytes ahead of the agent's handler, want at most %d: buffered on the way", lead, leadBound)
		}
	})
	t.Run("download", func(t *testing.T) {
		resp, err := get(t, ep, t.Context(), "edge-1", "/download")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		c := counter{n: &h.downConsumed, sum: sha256.New()}
		n, err := io.Copy(c, resp.Body)
		if err != nil || n != streamSize {
			t.Fatalf("GET /download read %d bytes, %v; want %d", n, err, streamSize)
		}
		if got, want := hex.EncodeToString(c.sum.Sum(nil)), <-h.downSum; got != want {
			t.Errorf("download's SHA-256 = %s, want %s", got, want)
		}
		if lead := h.downLead.Load(); lead > leadBound {
			t.Errorf("the agent's handler got %d bytes ahead of the reader, want at most %d: buffered on the way", lead, leadBound)
		}
	})
	t.Run("console", func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		resp, err := get(t, ep, ctx, "edge-1", "/console")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		rd := bufio.NewReader(resp.Body)
		for i := range 3 {
			line := fmt.Sprintf("line %d", i)
			h.poke <- line
			if got, err := rd.ReadString('\n'); err != nil || got != line+"\n" {
				t.Fatalf("console read %q, %v; want %q", got, err, line)
			}
			// Small calls pass beside the open console.
			if p := ping(t, ep, "edge-1"); p.Node != "edge-1" {
				t.Errorf("ping beside the console = %+v", p)
			}
		}
		cancel()
		select {
		case err := <-h.consoleEnded:
			if !errors.Is(err, context.Canceled) {
				t.Errorf("the console handler ended with %v, want its request's context canceled", err)
			}
		case <-time.After(eventually.Within):
			t.Fatal("the caller's cancellation never reached the agent's handler")
		}
	})
}

// TestChannelUnavailable: a node with no live channel is refused at
// once with *UnavailableError; a removed node's channel is cut by the
// control plane (a call in flight fails, the next call is refused); a
// real agent stopped leaves the same.
func TestChannelUnavailable(t *testing.T) {
	f := newFixture(t, storetest.SQLite(t))
	url, ep := serveEndpoint(t, f, 3*time.Second)

	unavailable := func(t *testing.T, err error, name, reason string) {
		t.Helper()
		if ue, ok := errors.AsType[*UnavailableError](err); !ok || ue.Node != name || ue.Reason != reason {
			t.Errorf("error = %v, want *UnavailableError{%s, %q}", err, name, reason)
		}
	}
	_, err := ep.Client("ghost")
	unavailable(t, err, "ghost", reasonNotConnected)

	for _, how := range []string{"removed", "stopped"} {
		t.Run(how, func(t *testing.T) {
			name := "edge-" + how
			h := newTestHandler(name)
			var stop func() error
			if how == "removed" {
				// A channel held by hand: nothing but the control plane
				// can end it (an agent would stop, refused, on its own).
				cert, _ := nodeCert(t, f, name)
				dialChannel(t, f, url, cert, h)
			} else {
				stop = runAgent(t, f, url, name, h)
			}
			connected(t, ep, name)
			c, err := ep.Client(name)
			if err != nil {
				t.Fatal(err)
			}
			// A console in flight.
			resp, err := get(t, ep, t.Context(), name, "/console")
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			rd := bufio.NewReader(resp.Body)
			h.poke <- "hello"
			if l, err := rd.ReadString('\n'); err != nil || l != "hello\n" {
				t.Fatalf("console = %q, %v", l, err)
			}
			if how == "removed" {
				if err := f.svc.Remove(t.Context(), name); err != nil {
					t.Fatal(err)
				}
			} else if err := stop(); err != nil {
				t.Fatalf("agent.Run = %v", err)
			}
			_, err = readLine(t, rd)
			unavailable(t, err, name, reasonLost)
			eventually.True(t, eventually.Within, name+" disconnected", func() (bool, string) { return !ep.Connected(name), "connected" })
			_, err = ep.Client(name)
			unavailable(t, err, name, reasonNotConnected)
			// A client taken before answers the same, at once.
			_, err = c.Get("http://" + name + cluster.PathPing)
			unavailable(t, err, name, reasonNotConnected)
		})
	}
}

// nodeCert enrolls name and returns its key and certificate, and a
// second certificate the CA signed for the same node and key but the
// row does not name.
func nodeCert(t *testing.T, f *fixture, name string) (current, stray tls.Certificate) {
	t.Helper()
	key, csr := request(t)
	tok, _, err := f.svc.Add(t.Context(), name, f.ca.Certificate())
	if err != nil {
		t.Fatal(err)
	}
	_, certPEM, err := f.svc.Enroll(t.Context(), f.ca, tok.String(), csr)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := pem.Decode(certPEM)
	current = tls.Certificate{Certificate: [][]byte{b.Bytes}, PrivateKey: key}
	csrBlock, _ := pem.Decode([]byte(csr))
	der, _, err := f.ca.SignNode(csrBlock.Bytes, name, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return current, tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// dialChannel dials a channel to url with cert as an agent does
// (cluster.NodeChannelTLS) and serves h on it in the background; done
// is closed when the connection ended.
func dialChannel(t *testing.T, f *fixture, url string, cert tls.Certificate, h http.Handler) (done chan struct{}) {
	t.Helper()
	cfg := cluster.NodeChannelTLS(f.ca.Certificate(), cert)
	c, err := tls.Dial("tcp", strings.TrimPrefix(url, "https://"), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if p := c.ConnectionState().NegotiatedProtocol; p != cluster.ChannelProto {
		t.Fatalf("ALPN = %q, want %q", p, cluster.ChannelProto)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done = make(chan struct{})
	go func() { defer close(done); cluster.ServeChannel(ctx, c, h, time.Second, nil) }()
	t.Cleanup(func() { cancel(); <-done })
	return done
}

// readLine reads a line of rd, failing the test if none comes and rd
// does not fail within eventually.Within.
func readLine(t *testing.T, rd *bufio.Reader) (string, error) {
	t.Helper()
	type line struct {
		s   string
		err error
	}
	c := make(chan line, 1)
	go func() { s, err := rd.ReadString('\n'); c <- line{s, err} }()
	select {
	case l := <-c:
		return l.s, l.err
	case <-time.After(eventually.Within):
		t.Fatal("a read on the channel neither answered nor failed")
		return "", nil
	}
}

func ended(t *testing.T, done chan struct{}, what string) {
	t.Helper()
	select {
	case <-done:
	case <-time.After(eventually.Within):
		t.Fatalf("%s: the connection never ended", what)
	}
}

// TestChannelCertificates: a channel is the node's only with the
// certificate its row names (the CA's signature is not enough: a serial
// the row does not hold is closed at once, before it is the node's
// channel, as a session with it is refused); a newer channel of a node
// replaces an older one.
func TestChannelCertificates(t *testing.T) {
	f := newFixture(t, storetest.SQLite(t))
	// No member check while the test runs: the refusal is the channel's
	// own, at its start.
	url, ep := serveEndpointOpts(t, f, EndpointOptions{UnreachableAfter: 3 * time.Second, RevocationPoll: time.Hour})
	current, stray := nodeCert(t, f, "edge-1")

	ended(t, dialChannel(t, f, url, stray, newTestHandler("stray")), "a certificate the row does not name")
	if ep.Connected("edge-1") {
		t.Error("a channel with a certificate the row does not name became the node's")
	}

	first := dialChannel(t, f, url, current, newTestHandler("first"))
	connected(t, ep, "edge-1")
	if p := ping(t, ep, "edge-1"); p.Node != "first" {
		t.Errorf("ping = %+v, want the first channel's", p)
	}
	dialChannel(t, f, url, current, newTestHandler("second"))
	ended(t, first, "the older channel once a newer one came")
	if p := ping(t, ep, "edge-1"); p.Node != "second" {
		t.Errorf("ping = %+v, want the newer channel's", p)
	}
}

// freezer is a TCP proxy whose connections can be frozen: bytes stop
// flowing both ways, nothing is closed (a host switched off, a cable
// cut). Connections made after a freeze flow.
type freezer struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	frozen chan struct{} // closed by freeze: the connections of now stop
	wg     sync.WaitGroup
	conns  []net.Conn
}

func newFreezer(t *testing.T, target string) *freezer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &freezer{ln: ln, target: target, frozen: make(chan struct{})}
	p.wg.Go(p.accept)
	t.Cleanup(func() {
		ln.Close()
		p.mu.Lock()
		for _, c := range p.conns {
			c.Close()
		}
		p.mu.Unlock()
		p.wg.Wait()
	})
	return p
}

func (p *freezer) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		frozen := p.frozen
		p.conns = append(p.conns, c, up)
		p.mu.Unlock()
		copyUntil := func(dst, src net.Conn) {
			buf := make([]byte, 32<<10)
			for {
				n, err := src.Read(buf)
				select {
				case <-frozen:
					return // swallowed: nothing more goes through, nothing is closed
				default:
				}
				if n > 0 {
					if _, err := dst.Write(buf[:n]); err != nil {
						return
					}
				}
				if err != nil {
					dst.Close()
					return
				}
			}
		}
		p.wg.Go(func() { copyUntil(up, c) })
		p.wg.Go(func() { copyUntil(c, up) })
	}
}

func (p *freezer) freeze() {
	p.mu.Lock()
	close(p.frozen)
	p.frozen = make(chan struct{})
	p.mu.Unlock()
}

// TestChannelSilentAgent: a call in flight on a channel whose agent went
// silent without closing anything fails with *UnavailableError (HTTP/2
// pings: within twice cluster.ChannelKeepalive), never hangs; the agent
// comes back on a fresh connection.
func TestChannelSilentAgent(t *testing.T) {
	f := newFixture(t, storetest.SQLite(t))
	url, ep := serveEndpoint(t, f, 3*time.Second)
	proxy := newFreezer(t, strings.TrimPrefix(url, "https://"))
	h := newTestHandler("edge-1")
	runAgent(t, f, "https://"+proxy.ln.Addr().String(), "edge-1", h)
	connected(t, ep, "edge-1")
	resp, err := get(t, ep, t.Context(), "edge-1", "/console")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	rd := bufio.NewReader(resp.Body)
	h.poke <- "before"
	if l, err := rd.ReadString('\n'); err != nil || l != "before\n" {
		t.Fatalf("console = %q, %v", l, err)
	}
	proxy.freeze()
	_, err = readLine(t, rd)
	if ue, ok := errors.AsType[*UnavailableError](err); !ok || ue.Reason != reasonLost {
		t.Errorf("a console read on a silent channel = %v, want *UnavailableError (lost)", err)
	}
	eventually.True(t, eventually.Within, "edge-1 back", func() (bool, string) {
		resp, err := get(t, ep, t.Context(), "edge-1", cluster.PathPing)
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, resp.Status
	})
}
