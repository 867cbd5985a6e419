package cluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"log"
	"net"
	"net/http"
	"sync"
	"time"
)

// ChannelProto is the ALPN protocol of the channel: a connection the
// agent dials (mutual TLS, as the session's) on which the roles reverse —
// the agent serves HTTP/2, the control plane is its client (doc.go).
const ChannelProto = "kiln-node/1"

// PathPing is the one call every agent's channel answers (GET): a
// PingResponse.
const PathPing = "/v1/ping"

// PingResponse answers PathPing.
type PingResponse struct {
	Node    string `json:"node"`
	Version string `json:"version"`
}

// ChannelStreams is how many calls the control plane may have open on
// one channel at once (HTTP/2's concurrent streams; a call past it waits
// for a slot, within its context). A console or a download holds one for
// as long as it lasts.
const ChannelStreams = 1000

// ChannelKeepalive is the HTTP/2 ping of both ends of a channel: a ping
// is sent after this long without a frame from the peer, and the
// connection is closed when its answer does not come within as long
// again. So a call in flight whose peer went silent (a host switched
// off, a network cut without a reset) fails within twice this after the
// last frame from it: with the heartbeat interval of 5 s, 10 s. At least
// 1 s: a loaded host must not lose its channel to a late ping.
func ChannelKeepalive(interval time.Duration) time.Duration {
	return max(interval, time.Second)
}

// NodeChannelTLS is the TLS configuration an agent dials its channel
// with: NodeTLS (its certificate, the pinned CA as the only root of the
// control plane's) offering ChannelProto alone.
func NodeChannelTLS(ca *x509.Certificate, cert tls.Certificate) *tls.Config {
	c := NodeTLS(ca, cert)
	c.NextProtos = []string{ChannelProto}
	return c
}

// plainConn hides a connection's TLS from net/http: the handshake is
// done (the ALPN protocol chose the channel) and both ends speak HTTP/2
// with prior knowledge over it, which net/http does only on a connection
// it does not take for TLS (Protocols.UnencryptedHTTP2). The bytes are
// TLS's all the same.
type plainConn struct{ net.Conn }

// ServeChannel serves h over HTTP/2 on c, the agent's end of a channel
// (TLS done), until c closes or ctx ends; it closes c and returns then.
// Requests' contexts end when the control plane cancels its call and
// when the connection ends; when ctx ends, the connection is closed
// first, so a call in flight (a console) reads as cut on the control
// plane, not as ended. keepalive is ChannelKeepalive's. Handlers still
// running when it returns see their contexts ended.
func ServeChannel(ctx context.Context, c net.Conn, h http.Handler, keepalive time.Duration, errLog *log.Logger) {
	var protos http.Protocols
	protos.SetUnencryptedHTTP2(true)
	closed := make(chan struct{})
	var once sync.Once
	hctx, hcancel := context.WithCancel(context.WithoutCancel(ctx))
	defer hcancel()
	srv := &http.Server{
		Handler:     h,
		Protocols:   &protos,
		HTTP2:       &http.HTTP2Config{MaxConcurrentStreams: ChannelStreams, SendPingTimeout: keepalive, PingTimeout: keepalive},
		BaseContext: func(net.Listener) context.Context { return hctx },
		ConnState: func(_ net.Conn, st http.ConnState) {
			if st == http.StateClosed || st == http.StateHijacked {
				once.Do(func() { close(closed) })
			}
		},
		ErrorLog: errLog,
	}
	ln := &oneConn{c: plainConn{c}, closed: make(chan struct{})}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
	select {
	case <-ctx.Done():
	case <-closed:
	}
	_ = srv.Close()
	_ = c.Close()
	hcancel()
	<-done
}

// ChannelClient is the control plane's HTTP/2 client over c, its end of
// a channel (TLS done, the node's certificate checked). The connection
// is its own: it never dials, and requests sent on it go to the agent
// whatever their URL says. keepalive is ChannelKeepalive's. Close it to
// close c.
func ChannelClient(ctx context.Context, c net.Conn, keepalive time.Duration) (*http.ClientConn, error) {
	var protos http.Protocols
	protos.SetUnencryptedHTTP2(true)
	var mu sync.Mutex
	conn := net.Conn(plainConn{c})
	tr := &http.Transport{
		Protocols: &protos,
		HTTP2:     &http.HTTP2Config{SendPingTimeout: keepalive, PingTimeout: keepalive},
		// NewClientConn "dials" once: the connection the agent dialed.
		DialContext: func(context.Context, string, string) (net.Conn, error) {
			mu.Lock()
			defer mu.Unlock()
			if conn == nil {
				return nil, errors.New("a channel's connection is used once")
			}
			c := conn
			conn = nil
			return c, nil
		},
	}
	cc, err := tr.NewClientConn(ctx, "http", "node.channel:1")
	if err != nil {
		_ = c.Close()
		return nil, err
	}
	return cc, nil
}

// oneConn is a listener of one connection: Accept gives it once, then
// waits until Close.
type oneConn struct {
	mu     sync.Mutex
	c      net.Conn
	closed chan struct{}
	once   sync.Once
}

func (l *oneConn) Accept() (net.Conn, error) {
	l.mu.Lock()
	c := l.c
	l.c = nil
	l.mu.Unlock()
	if c != nil {
		return c, nil
	}
	<-l.closed
	return nil, net.ErrClosed
}

func (l *oneConn) Close() error {
	l.once.Do(func() { close(l.closed) })
	return nil
}

func (l *oneConn) Addr() net.Addr { return channelAddr{} }

type channelAddr struct{}

func (channelAddr) Network() string { return "channel" }
func (channelAddr) String() string  { return "channel" }
