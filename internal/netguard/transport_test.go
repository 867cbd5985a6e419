package netguard_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/kilnhq/kiln/internal/netguard"
	"github.com/kilnhq/kiln/internal/netguard/netguardtest"
)

// These tests only ever connect to loopback addresses. Every address they
// expect to be refused is one the kernel would deliver to a local listener
// (127/8, ::1, 0.0.0.0, ::, ::ffff:127.x), so even a broken guard sends
// nothing off the machine, and the tests use a Resolver table, never DNS.

// hosts is a Resolver backed by a table.
type hosts map[string][]netip.Addr

func (h hosts) LookupNetIP(_ context.Context, network, host string) ([]netip.Addr, error) {
	var out []netip.Addr
	for _, a := range h[host] {
		if network == "ip" || (network == "ip4") == a.Unmap().Is4() {
			out = append(out, a)
		}
	}
	if len(out) == 0 {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	return out, nil
}

// rebinding answers first with one address and then with another, as a
// DNS server with a zero TTL does in a rebinding attack.
type rebinding struct {
	first, then netip.Addr
	mu          sync.Mutex
	lookups     int
}

func (r *rebinding) LookupNetIP(context.Context, string, string) ([]netip.Addr, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lookups++
	if r.lookups == 1 {
		return []netip.Addr{r.first}, nil
	}
	return []netip.Addr{r.then}, nil
}

// newServer starts an HTTP server on 127.0.0.1 that answers "ok" on /,
// redirects /redirect to ?to= and /hops/{n} to /hops/{n-1} down to 0.
func newServer(t *testing.T, tls bool) *httptest.Server {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") })
	mux.HandleFunc("/redirect", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, r.URL.Query().Get("to"), http.StatusFound)
	})
	mux.HandleFunc("/hops/{n}", func(w http.ResponseWriter, r *http.Request) {
		n, err := strconv.Atoi(r.PathValue("n"))
		if err != nil || n < 0 {
			http.NotFound(w, r)
			return
		}
		if n == 0 {
			io.WriteString(w, "ok")
			return
		}
		http.Redirect(w, r, fmt.Sprintf("/hops/%d", n-1), http.StatusFound)
	})
	var srv *httptest.Server
	if tls {
		srv = httptest.NewTLSServer(mux)
	} else {
		srv = httptest.NewServer(mux)
	}
	t.Cleanup(srv.Close)
	return srv
}

func loopbackPolicy(t *testing.T, r netguard.Resolver) *netguard.Policy {
	t.Helper()
	allow, err := netguard.ParseAllowList([]string{"127.0.0.1/32"})
	if err != nil {
		t.Fatal(err)
	}
	return netguard.NewPolicy(allow, r)
}

func newClient(t *testing.T, p *netguard.Policy, base *http.Transport) *http.Client {
	t.Helper()
	c := p.Client(base)
	t.Cleanup(c.CloseIdleConnections)
	return c
}

// get fetches u and returns the body.
func get(t *testing.T, c *http.Client, u string) (string, error) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

func mustGet(t *testing.T, c *http.Client, u string) {
	t.Helper()
	body, err := get(t, c, u)
	if err != nil || body != "ok" {
		t.Fatalf("GET %s = %q, %v, want \"ok\"", u, body, err)
	}
}

func TestClientAllowed(t *testing.T) {
	srv := newServer(t, false)
	port := srv.Listener.Addr().(*net.TCPAddr).Port
	c := newClient(t, loopbackPolicy(t, hosts{
		"kiln.test":   {netip.MustParseAddr("127.0.0.1")},
		"mapped.test": {netip.MustParseAddr("::ffff:127.0.0.1")}, // how net.Resolver answers A records
	}), nil)

	mustGet(t, c, srv.URL)
	mustGet(t, c, fmt.Sprintf("http://kiln.test:%d/", port))
	mustGet(t, c, fmt.Sprintf("http://mapped.test:%d/", port))
}

func TestClientTLS(t *testing.T) {
	srv := newServer(t, true)
	base := srv.Client().Transport.(*http.Transport)
	mustGet(t, newClient(t, loopbackPolicy(t, hosts{}), base), srv.URL)
}

func TestClientRefused(t *testing.T) {
	srv := newServer(t, false)
	redirect := func(to string) string { return srv.URL + "/redirect?to=" + url.QueryEscape(to) }
	resolver := hosts{"evil.test": {netip.MustParseAddr("127.0.0.3")}}

	for _, tc := range []struct {
		name     string
		listen   string                // where the refused connection would land
		url      func(port int) string // port is the recorder's
		wantAddr string
		wantHost string
		reason   string
	}{
		{
			name: "other loopback address", listen: "127.0.0.2:0",
			url:      func(p int) string { return fmt.Sprintf("http://127.0.0.2:%d/", p) },
			wantAddr: "127.0.0.2", reason: "127.0.0.0/8",
		},
		{
			name: "IPv6 loopback", listen: "[::1]:0",
			url:      func(p int) string { return fmt.Sprintf("http://[::1]:%d/", p) },
			wantAddr: "::1", reason: "::1/128",
		},
		{
			name: "0.0.0.0 reaches the local host", listen: "127.0.0.1:0",
			url:      func(p int) string { return fmt.Sprintf("http://0.0.0.0:%d/", p) },
			wantAddr: "0.0.0.0", reason: "0.0.0.0/8",
		},
		{
			name: ":: reaches the local host", listen: "[::1]:0",
			url:      func(p int) string { return fmt.Sprintf("http://[::]:%d/", p) },
			wantAddr: "::", reason: "::/128",
		},
		{
			name: "IPv4-mapped spelling of the allowed address", listen: "127.0.0.1:0",
			url:      func(p int) string { return fmt.Sprintf("http://[::ffff:127.0.0.1]:%d/", p) },
			wantAddr: "::ffff:127.0.0.1", reason: "IPv4-mapped ::ffff:0:0/96 form of 127.0.0.1",
		},
		{
			name: "IPv4-mapped other loopback address", listen: "127.0.0.2:0",
			url:      func(p int) string { return fmt.Sprintf("http://[::ffff:127.0.0.2]:%d/", p) },
			wantAddr: "::ffff:127.0.0.2", reason: "127.0.0.0/8",
		},
		{
			name: "name resolving to loopback", listen: "127.0.0.3:0",
			url:      func(p int) string { return fmt.Sprintf("http://evil.test:%d/", p) },
			wantAddr: "127.0.0.3", wantHost: "evil.test", reason: "127.0.0.0/8",
		},
		{
			name: "redirect to other loopback address", listen: "127.0.0.2:0",
			url:      func(p int) string { return redirect(fmt.Sprintf("http://127.0.0.2:%d/", p)) },
			wantAddr: "127.0.0.2", reason: "127.0.0.0/8",
		},
		{
			name: "redirect to name resolving to loopback", listen: "127.0.0.3:0",
			url:      func(p int) string { return redirect(fmt.Sprintf("http://evil.test:%d/", p)) },
			wantAddr: "127.0.0.3", wantHost: "evil.test", reason: "127.0.0.0/8",
		},
		{
			name: "redirect to IPv6 loopback", listen: "[::1]:0",
			url:      func(p int) string { return redirect(fmt.Sprintf("http://[::1]:%d/", p)) },
			wantAddr: "::1", reason: "::1/128",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := netguardtest.Listen(t, tc.listen)
			c := newClient(t, loopbackPolicy(t, resolver), nil)
			u := tc.url(rec.Port())
			body, err := get(t, c, u)
			rec.AssertNoConnection(t)
			be, ok := errors.AsType[*netguard.BlockedError](err)
			if !ok {
				t.Fatalf("GET %s = %q, %v, want a *BlockedError", u, body, err)
			}
			if be.Addr != netip.MustParseAddr(tc.wantAddr) || be.Host != tc.wantHost || !strings.Contains(be.Reason, tc.reason) {
				t.Errorf("GET %s: error %+v, want Addr %s, Host %q, Reason containing %q", u, be, tc.wantAddr, tc.wantHost, tc.reason)
			}
			if !strings.Contains(err.Error(), tc.wantAddr) || !strings.Contains(err.Error(), tc.reason) {
				t.Errorf("GET %s: error %q, want it to name %s and %q", u, err, tc.wantAddr, tc.reason)
			}
		})
	}
}

func TestClientZoneRefused(t *testing.T) {
	c := newClient(t, loopbackPolicy(t, hosts{}), nil)
	u := "http://[fe80::1%25lo]:9/"
	_, err := get(t, c, u)
	if be, ok := errors.AsType[*netguard.BlockedError](err); !ok || !strings.Contains(be.Reason, "zone") {
		t.Errorf("GET %s = %v, want a *BlockedError for the zone", u, err)
	}
}

// TestClientSkipsRefusedAnswers: of a name's answers only the allowed ones
// are dialed.
func TestClientSkipsRefusedAnswers(t *testing.T) {
	srv := newServer(t, false)
	port := srv.Listener.Addr().(*net.TCPAddr).Port
	rec := netguardtest.Listen(t, net.JoinHostPort("127.0.0.3", strconv.Itoa(port)))
	c := newClient(t, loopbackPolicy(t, hosts{
		"mixed.test": {netip.MustParseAddr("127.0.0.3"), netip.MustParseAddr("127.0.0.1")},
	}), nil)

	mustGet(t, c, fmt.Sprintf("http://mixed.test:%d/", port))
	rec.AssertNoConnection(t)
}

// TestClientDNSRebinding reproduces CVE-2024-34068: a name that answers
// with an allowed address, then with a refused one. Resolving once and
// dialing what was checked connects to the allowed address only.
func TestClientDNSRebinding(t *testing.T) {
	srv := newServer(t, false)
	port := srv.Listener.Addr().(*net.TCPAddr).Port
	rec := netguardtest.Listen(t, net.JoinHostPort("127.0.0.3", strconv.Itoa(port)))
	r := &rebinding{first: netip.MustParseAddr("127.0.0.1"), then: netip.MustParseAddr("127.0.0.3")}
	c := newClient(t, loopbackPolicy(t, r), nil)

	mustGet(t, c, fmt.Sprintf("http://rebind.test:%d/", port))
	rec.AssertNoConnection(t)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.lookups != 1 {
		t.Errorf("one connection made %d lookups, want 1", r.lookups)
	}
}

func TestClientRedirects(t *testing.T) {
	srv := newServer(t, false)
	c := newClient(t, loopbackPolicy(t, hosts{}), nil)

	mustGet(t, c, srv.URL+"/hops/5")

	u := srv.URL + "/hops/6"
	if body, err := get(t, c, u); !errors.Is(err, netguard.ErrTooManyRedirects) {
		t.Errorf("GET %s = %q, %v, want ErrTooManyRedirects", u, body, err)
	}
	for _, to := range []string{"file:///etc/passwd", "ftp://127.0.0.1/", "gopher://127.0.0.1:70/"} {
		u := srv.URL + "/redirect?to=" + url.QueryEscape(to)
		if body, err := get(t, c, u); !errors.Is(err, netguard.ErrUnsupportedScheme) {
			t.Errorf("GET %s = %q, %v, want ErrUnsupportedScheme", u, body, err)
		}
	}
}

// TestTransportDropsBase: nothing from base that could open a connection
// reaches the guarded transport.
func TestTransportDropsBase(t *testing.T) {
	srv := newServer(t, false)
	p := loopbackPolicy(t, hosts{})
	base := &http.Transport{
		Proxy: func(*http.Request) (*url.URL, error) {
			t.Error("base Proxy called")
			return nil, nil
		},
		DialContext: func(context.Context, string, string) (net.Conn, error) {
			t.Error("base DialContext called")
			return nil, errors.New("base DialContext")
		},
		DialTLSContext: func(context.Context, string, string) (net.Conn, error) {
			t.Error("base DialTLSContext called")
			return nil, errors.New("base DialTLSContext")
		},
		TLSClientConfig:     &tls.Config{ServerName: "example.test"},
		MaxIdleConnsPerHost: 7,
		DisableCompression:  true,
		HTTP2:               &http.HTTP2Config{MaxReceiveBufferPerStream: 1 << 20},
		Protocols:           new(http.Protocols),
	}
	base.Protocols.SetHTTP1(true)
	base.RegisterProtocol("file", http.NewFileTransport(http.Dir(t.TempDir())))

	tr := p.Transport(base)
	t.Cleanup(tr.CloseIdleConnections)
	//lint:ignore SA1019 the deprecated dial fields must stay unset too
	if tr.Proxy != nil || tr.Dial != nil || tr.DialTLS != nil || tr.DialTLSContext != nil || tr.DialContext == nil {
		t.Errorf("Transport(base): Proxy, Dial, DialTLS, DialTLSContext must be nil and DialContext set")
	}
	if tr.MaxIdleConnsPerHost != 7 || !tr.DisableCompression {
		t.Errorf("Transport(base) = MaxIdleConnsPerHost %d, DisableCompression %v, want base's 7, true", tr.MaxIdleConnsPerHost, tr.DisableCompression)
	}
	if tr.TLSClientConfig == base.TLSClientConfig || tr.TLSClientConfig.ServerName != "example.test" {
		t.Errorf("Transport(base).TLSClientConfig = %p %+v, want a clone of %p", tr.TLSClientConfig, tr.TLSClientConfig, base.TLSClientConfig)
	}
	if tr.HTTP2 == base.HTTP2 || tr.HTTP2.MaxReceiveBufferPerStream != base.HTTP2.MaxReceiveBufferPerStream || tr.Protocols == base.Protocols || *tr.Protocols != *base.Protocols {
		t.Errorf("Transport(base): HTTP2 %p and Protocols %p, want copies of base's %p and %p", tr.HTTP2, tr.Protocols, base.HTTP2, base.Protocols)
	}
	if tr := p.Transport(nil); tr.Proxy != nil || !tr.ForceAttemptHTTP2 {
		t.Errorf("Transport(nil): Proxy set or HTTP/2 off")
	}

	c := &http.Client{Transport: tr}
	mustGet(t, c, srv.URL)
	if _, err := get(t, c, "file:///x"); err == nil || !strings.Contains(err.Error(), "unsupported protocol scheme") {
		t.Errorf("GET file:///x through Transport(base) = %v, want unsupported protocol scheme", err)
	}
}

func TestDialContextErrors(t *testing.T) {
	p := loopbackPolicy(t, hosts{})
	for _, tc := range []struct{ network, address, want string }{
		{"udp", "127.0.0.1:53", "only tcp"},
		{"unix", "/tmp/x.sock", "only tcp"},
		{"tcp", "127.0.0.1", "missing port"},
		{"tcp", "127.0.0.1:http", "not a number"},
		{"tcp", "127.0.0.1:65536", "not a number"},
		{"tcp", ":80", "empty host"},
		{"tcp", "unknown.test:80", "no such host"},
	} {
		conn, err := p.DialContext(t.Context(), tc.network, tc.address)
		if err == nil {
			conn.Close()
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("DialContext(%q, %q) = %v, want error containing %q", tc.network, tc.address, err, tc.want)
		}
		if _, ok := errors.AsType[*netguard.BlockedError](err); ok {
			t.Errorf("DialContext(%q, %q) = %v, want an error other than *BlockedError", tc.network, tc.address, err)
		}
	}
}

// TestDialContextConnectError: when every allowed address fails to
// connect, the error is the connection error, not a *BlockedError, even if
// other answers were refused.
func TestDialContextConnectError(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	p := loopbackPolicy(t, hosts{
		"mixed.test": {netip.MustParseAddr("127.0.0.3"), netip.MustParseAddr("127.0.0.1")},
	})
	for _, host := range []string{"127.0.0.1", "mixed.test"} {
		addr := net.JoinHostPort(host, strconv.Itoa(closed))
		conn, err := p.DialContext(t.Context(), "tcp", addr)
		if err == nil {
			conn.Close()
		}
		if !errors.Is(err, syscall.ECONNREFUSED) {
			t.Errorf("DialContext(tcp, %s) = %v, want ECONNREFUSED", addr, err)
		}
		if _, ok := errors.AsType[*netguard.BlockedError](err); ok {
			t.Errorf("DialContext(tcp, %s) = %v, want no *BlockedError", addr, err)
		}
	}
}

// TestControl checks the connect-time hook alone: DialUnchecked skips the
// check in DialContext, as a second resolution would in a rebinding attack.
func TestControl(t *testing.T) {
	p := loopbackPolicy(t, hosts{})

	rec := netguardtest.Listen(t, "127.0.0.1:0")
	conn, err := p.DialUnchecked(t.Context(), "tcp", rec.Addr())
	if err != nil {
		t.Fatalf("DialUnchecked(%s) = %v, want a connection", rec.Addr(), err)
	}
	conn.Close()

	for _, tc := range []struct{ listen, host, wantAddr string }{
		{"127.0.0.2:0", "127.0.0.2", "127.0.0.2"},
		{"127.0.0.2:0", "::ffff:127.0.0.2", "127.0.0.2"}, // Go connects to it over IPv4
		{"[::1]:0", "::1", "::1"},
		{"127.0.0.1:0", "0.0.0.0", "0.0.0.0"},
	} {
		t.Run(tc.host, func(t *testing.T) {
			rec := netguardtest.Listen(t, tc.listen)
			addr := net.JoinHostPort(tc.host, strconv.Itoa(rec.Port()))
			conn, err := p.DialUnchecked(t.Context(), "tcp", addr)
			if err == nil {
				conn.Close()
			}
			be, ok := errors.AsType[*netguard.BlockedError](err)
			if !ok || be.Addr != netip.MustParseAddr(tc.wantAddr) || be.Host != "" {
				t.Errorf("DialUnchecked(%s) = %v, want a *BlockedError for %s", addr, err, tc.wantAddr)
			}
			rec.AssertNoConnection(t)
		})
	}
}
