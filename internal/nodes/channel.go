package nodes

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"

	"github.com/kilnhq/kiln/internal/cluster"
)

// UnavailableError: a call to a node that cannot be made now: the node
// has no live channel with this process (not connected, or connected to
// another control-plane replica), or the channel was lost while the call
// was in flight. It comes at once, never after a wait. Reason is a
// sentence that names no host or address; Err, when set, is the
// transport's error (for the log).
type UnavailableError struct {
	Node   string
	Reason string
	Err    error
}

func (e *UnavailableError) Error() string {
	s := fmt.Sprintf("node %q is unavailable: %s", e.Node, e.Reason)
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

func (e *UnavailableError) Unwrap() error { return e.Err }

// Reasons of UnavailableError.
const (
	reasonNotConnected = "it is not connected to this control plane"
	reasonLost         = "its connection to this control plane was lost"
)

// channel is a node's live channel: the connection its agent dialed
// with ALPN cluster.ChannelProto, on which this process is the HTTP/2
// client.
type channel struct {
	member
	cc   *http.ClientConn
	done chan struct{} // closed once the connection is unusable
}

// serveChannel takes a connection whose ALPN protocol is the channel's:
// it checks the node's certificate as a session's is checked (the CA in
// the handshake, then the row's serial), makes it the node's channel
// (closing an older one of the same node) and holds it until it breaks,
// is cut (removal: the member check) or ctx ends. A refused connection
// is closed without a word: the agent's session is where it hears why.
func (e *Endpoint) serveChannel(ctx context.Context, c *tls.Conn) {
	st := c.ConnectionState()
	remote := c.RemoteAddr().String()
	if len(st.PeerCertificates) == 0 {
		e.log.Info("channel refused: no node certificate", "remote", remote)
		return
	}
	name, serial := cluster.NodeOf(st.PeerCertificates[0])
	log := e.log.With("node", name)
	if err := e.svc.Authorize(ctx, name, serial); errors.Is(err, ErrNotMember) {
		log.Info("node certificate refused", "serial", serial, "remote", remote, "on", "channel")
		return
	} else if err != nil {
		log.Error("cannot check a node's certificate", "err", err, "on", "channel")
		return
	}
	m := member{name: name, serial: serial}
	e.track(c, m)
	cc, err := cluster.ChannelClient(ctx, c, cluster.ChannelKeepalive(e.Interval()))
	if err != nil {
		log.Warn("channel: cannot start its HTTP/2 client", "err", err)
		return
	}
	ch := &channel{member: m, cc: cc, done: make(chan struct{})}
	var once sync.Once
	cc.SetStateHook(func(cc *http.ClientConn) {
		if cc.Err() != nil {
			once.Do(func() { close(ch.done) })
		}
	})
	e.mu.Lock()
	old := e.chans[name]
	e.chans[name] = ch
	e.mu.Unlock()
	if old != nil {
		_ = old.cc.Close()
		log.Info("channel replaced by a newer one")
	}
	log.Info("channel open", "remote", remote)
	select {
	case <-ctx.Done():
	case <-ch.done:
	}
	e.mu.Lock()
	if e.chans[name] == ch {
		delete(e.chans, name)
	}
	e.mu.Unlock()
	_ = cc.Close()
	log.Info("channel closed", "remote", remote)
}

// live is node's channel. Errors: *UnavailableError.
func (e *Endpoint) live(node string) (*channel, error) {
	e.mu.Lock()
	ch := e.chans[node]
	e.mu.Unlock()
	if ch == nil || ch.cc.Err() != nil {
		return nil, &UnavailableError{Node: node, Reason: reasonNotConnected}
	}
	return ch, nil
}

// Connected says whether node's agent has a live channel with this
// process, so that Client's calls can reach it.
func (e *Endpoint) Connected(node string) bool {
	_, err := e.live(node)
	return err == nil
}

// Client returns an HTTP client of node's agent: each request goes over
// the node's live channel with this process, as HTTP/2, whatever its
// URL's scheme and host (write http://NODE/path); bodies stream both
// ways, and ending a request's context cancels the agent's handler.
// Redirects are not followed. Errors, from Client and from each call
// (through *url.Error): *UnavailableError at once when the node has no
// live channel, and when the channel breaks under a call in flight
// (also from a response body's Read); a call whose peer went silent
// fails within twice cluster.ChannelKeepalive. The caller's context
// error otherwise, as net/http gives it.
func (e *Endpoint) Client(node string) (*http.Client, error) {
	if _, err := e.live(node); err != nil {
		return nil, err
	}
	return &http.Client{
		Transport:     &nodeTransport{e: e, node: node},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}, nil
}

// nodeTransport sends requests over a node's channel, the live one at
// each request (a channel replaced meanwhile serves the next).
type nodeTransport struct {
	e    *Endpoint
	node string
}

func (t *nodeTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	ch, err := t.e.live(t.node)
	if err != nil {
		if req.Body != nil {
			_ = req.Body.Close()
		}
		return nil, err
	}
	if req.URL.Scheme != "http" || req.URL.Host != t.node {
		r := req.Clone(req.Context())
		u := *req.URL
		u.Scheme, u.Host = "http", t.node
		r.URL, r.Host = &u, ""
		req = r
	}
	resp, err := ch.cc.RoundTrip(req)
	if err != nil {
		return nil, t.lost(req.Context(), ch, err)
	}
	resp.Body = &channelBody{ReadCloser: resp.Body, ctx: req.Context(), t: t, ch: ch}
	return resp, nil
}

// lost turns err into *UnavailableError when the channel broke under
// the call, not the caller's context.
func (t *nodeTransport) lost(ctx context.Context, ch *channel, err error) error {
	if ctx.Err() != nil || ch.cc.Err() == nil {
		return err
	}
	return &UnavailableError{Node: t.node, Reason: reasonLost, Err: err}
}

// channelBody is a response body whose Read tells a channel lost.
type channelBody struct {
	io.ReadCloser
	ctx context.Context
	t   *nodeTransport
	ch  *channel
}

func (b *channelBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && !errors.Is(err, io.EOF) {
		err = b.t.lost(b.ctx, b.ch, err)
	}
	return n, err
}
