package nodes

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/kilnhq/kiln/internal/cluster"
)

// EndpointOptions tune the node endpoint; zero values take the defaults.
type EndpointOptions struct {
	// UnreachableAfter is the silence after which a node is unreachable
	// (DefaultUnreachableAfter); nodes are asked to beat a sixth as often
	// (cluster.HeartbeatInterval).
	UnreachableAfter time.Duration
	// RevocationPoll is how often the endpoint checks that the nodes it
	// holds connections of are still members (1 s): a node removed by
	// kiln admin, another process, is cut within it.
	RevocationPoll time.Duration
	Now            func() time.Time
	// Marker is the blob store marker named in every Welcome
	// (WriteMarker): agents refuse to serve when their blob store does
	// not hold it. nil names none (a control plane with no store
	// agents share: tests).
	Marker *cluster.BlobMarker
	// Records serves the calls under PathRecordsPrefix (the records an
	// agent's game servers keep with the control plane:
	// noderpc.RecordsHandler), each admitted as a member's as the session
	// is; NodeName tells the handler which node made the call. nil
	// answers them 404.
	Records http.Handler
}

// Endpoint is the control plane's node endpoint (kiln serve
// --cluster-addr): TLS with a certificate of the cluster CA; enrollment
// without a client certificate, everything else with the current
// certificate of a member node.
type Endpoint struct {
	svc  *Service
	ca   *cluster.CA
	opts EndpointOptions
	log  *slog.Logger

	certMu sync.Mutex
	cert   *tls.Certificate

	mu    sync.Mutex
	conns map[net.Conn]member // connections that made a member's call
	chans map[string]*channel // the live channel of each node (channel.go)
}

// member is a node as its certificate names it.
type member struct{ name, serial string }

type connKey struct{}

// NewEndpoint returns the endpoint of svc's nodes, with ca's
// certificates.
func NewEndpoint(svc *Service, ca *cluster.CA, opts EndpointOptions, log *slog.Logger) *Endpoint {
	if opts.UnreachableAfter <= 0 {
		opts.UnreachableAfter = DefaultUnreachableAfter
	}
	if opts.RevocationPoll <= 0 {
		opts.RevocationPoll = time.Second
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Endpoint{svc: svc, ca: ca, opts: opts, log: log.With("component", "cluster"), conns: map[net.Conn]member{}, chans: map[string]*channel{}}
}

// Interval is the heartbeat interval nodes are asked for.
func (e *Endpoint) Interval() time.Duration {
	return cluster.HeartbeatInterval(e.opts.UnreachableAfter)
}

// Serve serves ln until ctx ends, then closes every connection (agents
// reconnect, to this control plane when it is back or to another
// replica) and returns once its goroutines are done.
func (e *Endpoint) Serve(ctx context.Context, ln net.Listener) error {
	interval := e.Interval()
	var protos http.Protocols
	protos.SetHTTP1(true)
	protos.SetHTTP2(true)
	srv := &http.Server{
		Handler:           e,
		TLSConfig:         cluster.ServerTLS(e.ca.Certificate(), e.certificate),
		ReadHeaderTimeout: 10 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return ctx },
		ConnContext:       func(ctx context.Context, c net.Conn) context.Context { return context.WithValue(ctx, connKey{}, c) },
		ConnState: func(c net.Conn, st http.ConnState) {
			if st == http.StateClosed || st == http.StateHijacked {
				e.untrack(c)
			}
		},
		// A peer gone without a word (a host switched off) is noticed by
		// HTTP/2 pings, not after TCP's retransmissions.
		HTTP2:     &http.HTTP2Config{SendPingTimeout: 2 * interval, PingTimeout: 2 * interval},
		ErrorLog:  slog.NewLogLogger(e.log.Handler(), slog.LevelDebug),
		Protocols: &protos,
		// A connection whose ALPN protocol is the channel's is no HTTP
		// client's: the agent serves HTTP/2 on it (channel.go). Sessions
		// and enrollment negotiate h2 (or http/1.1) and are served as
		// before: Protocols, set, keeps both with this map non-nil.
		TLSNextProto: map[string]func(*http.Server, *tls.Conn, http.Handler){
			cluster.ChannelProto: func(_ *http.Server, c *tls.Conn, _ http.Handler) { e.serveChannel(ctx, c) },
		},
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.ServeTLS(ln, "", "") }()
	var wg sync.WaitGroup
	wg.Go(func() { e.watch(ctx) })
	var err error
	select {
	case <-ctx.Done():
	case err = <-errc:
		errc <- nil
	}
	// Sessions end with ctx (BaseContext); Close cuts what is left.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	_ = srv.Shutdown(sctx)
	cancel()
	_ = srv.Close()
	if serr := <-errc; err == nil && serr != nil && !errors.Is(serr, http.ErrServerClosed) {
		err = serr
	}
	wg.Wait()
	if err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("node endpoint: %w", err)
	}
	return nil
}

// certificate is the control plane's server certificate: made at the
// first handshake and again when a third of its life is left; the key
// lives in memory only.
func (e *Endpoint) certificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	e.certMu.Lock()
	defer e.certMu.Unlock()
	now := e.opts.Now()
	if e.cert == nil || now.After(e.cert.Leaf.NotAfter.Add(-cluster.ServerCertRenew)) {
		c, err := e.ca.ServerCertificate(now)
		if err != nil {
			e.log.Error("cannot make the node endpoint's certificate", "err", err)
			return nil, err
		}
		e.cert = c
	}
	return e.cert, nil
}

// watch cuts the connections of nodes that stopped being members.
func (e *Endpoint) watch(ctx context.Context) {
	t := time.NewTicker(e.opts.RevocationPoll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			e.sweep(ctx)
		}
	}
}

func (e *Endpoint) sweep(ctx context.Context) {
	e.mu.Lock()
	held := make(map[net.Conn]member, len(e.conns))
	for c, m := range e.conns {
		held[c] = m
	}
	e.mu.Unlock()
	if len(held) == 0 {
		return
	}
	members, err := e.svc.Members(ctx)
	if err != nil {
		if ctx.Err() == nil {
			e.log.Warn("cannot check the nodes' certificates", "err", err)
		}
		return
	}
	for c, m := range held {
		if !slices.Contains(members[m.name], m.serial) {
			e.cut(c, m)
		}
	}
}

// cut closes a connection whose certificate was revoked: every stream on
// it ends at once.
func (e *Endpoint) cut(c net.Conn, m member) {
	e.untrack(c)
	_ = c.Close()
	e.log.Info("node certificate revoked: connection cut", "node", m.name, "serial", m.serial, "remote", c.RemoteAddr().String())
}

func (e *Endpoint) track(c net.Conn, m member) {
	e.mu.Lock()
	e.conns[c] = m
	e.mu.Unlock()
}

func (e *Endpoint) untrack(c net.Conn) {
	e.mu.Lock()
	delete(e.conns, c)
	e.mu.Unlock()
}

// ServeHTTP routes the node endpoint's calls.
func (e *Endpoint) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case cluster.PathEnroll:
		if r.Method != http.MethodPost {
			writeError(w, http.StatusMethodNotAllowed, "METHOD_NOT_ALLOWED", "use POST")
			return
		}
		e.enroll(w, r)
	case cluster.PathSession:
		e.memberPost(w, r, e.session)
	case cluster.PathRenew:
		e.memberPost(w, r, e.renew)
	default:
		if e.opts.Records != nil && strings.HasPrefix(r.URL.Path, PathRecordsPrefix) {
			m, ok := e.authorize(w, r)
			if !ok {
				return
			}
			e.opts.Records.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), nodeNameKey{}, m.name)))
			return
		}
		writeError(w, http.StatusNotFound, cluster.CodeNotFound, "no such call on the node endpoint")
	}
}

// memberPost serves a POST of a member node (authorize) with call.
func (e *Endpoint) memberPost(w http.ResponseWriter, r *http.Request, call func(http.ResponseWriter, *http.Request, member)) {
	if r.Method != http.MethodPost {
		writeError(w, http.StatusMethodNotAllowed, "METHOD_NOT_ALLOWED", "use POST")
		return
	}
	if m, ok := e.authorize(w, r); ok {
		call(w, r, m)
	}
}

// PathRecordsPrefix starts the calls EndpointOptions.Records serves.
const PathRecordsPrefix = "/v1/records/"

type nodeNameKey struct{}

// NodeName is the node whose certificate made a call that
// EndpointOptions.Records serves ("" for any other request).
func NodeName(r *http.Request) string {
	n, _ := r.Context().Value(nodeNameKey{}).(string)
	return n
}

// authorize admits a call made with a member's current certificate (the
// TLS layer checked that the CA signed it) and tracks its connection.
func (e *Endpoint) authorize(w http.ResponseWriter, r *http.Request) (member, bool) {
	if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
		writeError(w, http.StatusForbidden, cluster.CodeNotMember, "this call needs a node's client certificate")
		return member{}, false
	}
	name, serial := cluster.NodeOf(r.TLS.PeerCertificates[0])
	err := e.svc.Authorize(r.Context(), name, serial)
	if errors.Is(err, ErrNotMember) {
		e.log.Info("node certificate refused", "node", name, "serial", serial, "remote", r.RemoteAddr)
		writeError(w, http.StatusForbidden, cluster.CodeNotMember, fmt.Sprintf(
			"node %q is not a member of this cluster with this certificate (removed, or joined again since); join it again with a new token from kiln admin node add", name))
		return member{}, false
	}
	if err != nil {
		e.log.Error("cannot check a node's certificate", "node", name, "err", err)
		writeError(w, http.StatusServiceUnavailable, cluster.CodeUnavailable, "the control plane cannot check certificates now; try again")
		return member{}, false
	}
	m := member{name: name, serial: serial}
	if c, ok := r.Context().Value(connKey{}).(net.Conn); ok {
		e.track(c, m)
	}
	return m, true
}

func (e *Endpoint) enroll(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, cluster.MaxMessage)
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	var req cluster.EnrollRequest
	if err := dec.Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, cluster.CodeValidation, "the body must be a JSON object {token, csr}")
		return
	}
	name, certPEM, err := e.svc.Enroll(r.Context(), e.ca, req.Token, req.CSR)
	if te, ok := errors.AsType[*TokenError](err); ok {
		e.log.Warn("enrollment refused", "remote", r.RemoteAddr, "reason", te.Reason)
		writeError(w, http.StatusForbidden, cluster.CodeInvalidJoinToken, te.Reason)
		return
	}
	if errors.Is(err, cluster.ErrCSR) {
		writeError(w, http.StatusBadRequest, cluster.CodeInvalidCSR, err.Error())
		return
	}
	if err != nil {
		e.log.Error("enrollment failed", "remote", r.RemoteAddr, "err", err)
		writeError(w, http.StatusInternalServerError, cluster.CodeInternal, "the control plane could not enroll the node; see its log")
		return
	}
	e.log.Info("node enrolled", "node", name, "remote", r.RemoteAddr)
	writeJSON(w, http.StatusOK, cluster.EnrollResponse{Node: name, Certificate: string(certPEM), CA: string(e.ca.CertificatePEM())})
}

// renew signs a new certificate for a node's new key (Service.Renew).
func (e *Endpoint) renew(w http.ResponseWriter, r *http.Request, m member) {
	r.Body = http.MaxBytesReader(w, r.Body, cluster.MaxMessage)
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	var req cluster.RenewRequest
	if err := dec.Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, cluster.CodeValidation, "the body must be a JSON object {csr}")
		return
	}
	certPEM, err := e.svc.Renew(r.Context(), e.ca, r.TLS.PeerCertificates[0], req.CSR)
	if errors.Is(err, cluster.ErrCSR) {
		writeError(w, http.StatusBadRequest, cluster.CodeInvalidCSR, err.Error())
		return
	}
	if errors.Is(err, ErrNotMember) {
		writeError(w, http.StatusForbidden, cluster.CodeNotMember, fmt.Sprintf("node %q renews with its current certificate only", m.name))
		return
	}
	if err != nil {
		e.log.Error("certificate renewal failed", "node", m.name, "err", err)
		writeError(w, http.StatusInternalServerError, cluster.CodeInternal, "the control plane could not renew the certificate; see its log")
		return
	}
	c, _ := cluster.ParseCertificatePEM(certPEM)
	_, serial := cluster.NodeOf(c)
	e.log.Info("node certificate renewed", "node", m.name, "serial", serial, "expires", c.NotAfter.UTC().Format(time.RFC3339))
	writeJSON(w, http.StatusOK, cluster.RenewResponse{Certificate: string(certPEM)})
}

// session reads a node's Hello and heartbeats and answers a Welcome and
// an ack per heartbeat recorded, until the node goes, its certificate is
// revoked, or the control plane stops.
func (e *Endpoint) session(w http.ResponseWriter, r *http.Request, m member) {
	if r.ProtoMajor != 2 {
		writeError(w, http.StatusHTTPVersionNotSupported, cluster.CodeValidation, "the session needs HTTP/2")
		return
	}
	ctx := r.Context()
	log := e.log.With("node", m.name)
	lines := make(chan []byte)
	readDone := make(chan error, 1)
	done := make(chan struct{})
	defer close(done)
	go func() {
		sc := bufio.NewScanner(r.Body)
		sc.Buffer(make([]byte, 0, 4096), cluster.MaxMessage)
		for sc.Scan() {
			line := append([]byte(nil), sc.Bytes()...)
			select {
			case lines <- line:
			case <-done:
				return
			}
		}
		readDone <- sc.Err()
	}()
	silence := time.NewTimer(e.opts.UnreachableAfter)
	defer silence.Stop()
	next := func() (cluster.Up, bool) {
		var up cluster.Up
		silence.Reset(e.opts.UnreachableAfter)
		select {
		case <-ctx.Done():
			return up, false
		case err := <-readDone:
			if err != nil {
				log.Debug("node session ended", "err", err)
			}
			return up, false
		case <-silence.C:
			log.Info("node session silent: ended")
			return up, false
		case line := <-lines:
			if err := json.Unmarshal(line, &up); err != nil {
				log.Warn("node session: an unreadable message; ended", "err", err)
				return up, false
			}
			return up, true
		}
	}
	up, ok := next()
	if !ok {
		return
	}
	if up.Type != cluster.TypeHello || up.Hello == nil {
		writeError(w, http.StatusBadRequest, cluster.CodeValidation, "a session starts with a hello")
		return
	}
	hello := *up.Hello
	if err := hello.Validate(); err != nil {
		writeError(w, http.StatusBadRequest, cluster.CodeValidation, "hello: "+err.Error())
		return
	}
	if err := e.svc.Hello(ctx, m.name, m.serial, r.RemoteAddr, hello); errors.Is(err, ErrNotMember) {
		writeError(w, http.StatusForbidden, cluster.CodeNotMember, fmt.Sprintf("node %q is not a member of this cluster with this certificate", m.name))
		return
	} else if err != nil {
		log.Error("cannot record a node's hello", "err", err)
		writeError(w, http.StatusServiceUnavailable, cluster.CodeUnavailable, "the control plane cannot record the node now; try again")
		return
	}
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	enc := json.NewEncoder(w)
	send := func(d cluster.Down) bool {
		if err := enc.Encode(d); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	if !send(cluster.Down{Type: cluster.TypeWelcome, Welcome: &cluster.Welcome{Node: m.name, HeartbeatIntervalMS: e.Interval().Milliseconds(),
		BlobMarker: e.opts.Marker}}) {
		return
	}
	log.Info("node session open", "remote", r.RemoteAddr, "version", hello.Version, "public_host", hello.PublicHost)
	for {
		up, ok := next()
		if !ok {
			return
		}
		if up.Type != cluster.TypeHeartbeat || up.Heartbeat == nil {
			log.Warn("node session: an unexpected message; ended", "type", up.Type)
			return
		}
		hb := *up.Heartbeat
		if err := hb.Validate(hello.PortFirst, hello.PortLast); err != nil {
			log.Warn("node session: a bad heartbeat; ended", "err", err)
			return
		}
		err := e.svc.Beat(ctx, m.name, m.serial, hb, e.opts.UnreachableAfter)
		if errors.Is(err, ErrNotMember) {
			if c, ok := ctx.Value(connKey{}).(net.Conn); ok {
				e.cut(c, m)
			}
			return
		}
		if err != nil {
			// Not acknowledged: the node's next beat tries again.
			if ctx.Err() == nil {
				log.Warn("cannot record a heartbeat", "err", err)
			}
			continue
		}
		if !send(cluster.Down{Type: cluster.TypeAck, Seq: hb.Seq}) {
			return
		}
	}
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, cluster.ErrorBody{Error: msg, Code: code})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
