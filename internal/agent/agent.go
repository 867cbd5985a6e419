package agent

import (
	"bufio"
	"bytes"
	"context"
	"crypto"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	mrand "math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kilnhq/kiln/internal/blob"
	"github.com/kilnhq/kiln/internal/cluster"
	"github.com/kilnhq/kiln/internal/gameserver"
	"github.com/kilnhq/kiln/internal/node"
	"github.com/kilnhq/kiln/internal/noderpc"
)

// Config is everything kiln agent was told.
type Config struct {
	// ServerURL is the control plane's node endpoint: https://HOST:PORT
	// (kiln serve --cluster-addr).
	ServerURL string
	// JoinToken is needed on the first start only (kiln admin node add).
	JoinToken string
	// DataDir holds the node's identity (ca.pem, node.key, node.pem).
	DataDir    string
	PublicHost string
	Ports      node.PortRange
	SFTPAddr   string
	Runtime    string // process or docker
	Version    string
	// Offer is what the node offers its servers (--node-memory,
	// --node-disk; zero: the machine's), as its reports say.
	Offer node.Offer
	// MinBackoff and MaxBackoff bound the wait between attempts to reach
	// the control plane (500 ms, 30 s).
	MinBackoff, MaxBackoff time.Duration
	// Handler answers the control plane's calls on the channel (HTTP/2,
	// the agent serving); nil answers GET /v1/ping (cluster.PathPing)
	// and 404 to the rest.
	Handler http.Handler
	// Host, when set, makes this node's game servers: it is called once,
	// with the node's name and the records its servers keep with the
	// control plane (noderpc.RecordsClient over the node's client); the
	// Host's operations are served on the channel (noderpc.HostHandler,
	// beside Handler's GET /v1/ping) and its Run runs — recovering the
	// node's servers, once the control plane answers — until the agent
	// stops.
	Host func(name string, records gameserver.Records) (*gameserver.Host, error)
	// RenewCheck is how often the agent checks whether its certificate
	// is due for renewal (cluster.RenewDue), besides at its first
	// welcome (1 h).
	RenewCheck time.Duration
	// Now is the agent's clock for that check (time.Now).
	Now func() time.Time
	// Blobs is the blob store every node shares (kiln agent --blob-url):
	// the agent serves only once it finds in it the marker the control
	// plane's Welcome names (BlobStoreError otherwise). nil: none, for a
	// control plane that names no marker either.
	Blobs blob.Store
}

// RefusedError: the control plane answered with a refusal no retry
// changes (a bad join token, a certificate no longer a member's). The
// agent stops with its sentence.
type RefusedError struct {
	Status  int
	Code    string
	Message string
}

func (e *RefusedError) Error() string { return e.Message + " (" + e.Code + ")" }

// Run is kiln agent: it joins the cluster on its first start (the join
// token), then holds a session with the control plane, reconnecting with
// backoff, until ctx ends (nil) or the control plane refuses this node
// (*RefusedError, also for enrollment; or *cluster.FingerprintError when
// the control plane is not the token's). At its first welcome (and at
// any later one naming another marker) it checks that its blob store is
// the control plane's, and stops with *BlobStoreError if not, before it
// serves anything.
func Run(ctx context.Context, cfg Config, log *slog.Logger) error {
	if cfg.MinBackoff <= 0 {
		cfg.MinBackoff = 500 * time.Millisecond
	}
	if cfg.MaxBackoff <= 0 {
		cfg.MaxBackoff = 30 * time.Second
	}
	if cfg.RenewCheck <= 0 {
		cfg.RenewCheck = time.Hour
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return fmt.Errorf("create the data dir: %w", err)
	}
	unlock, err := lockDir(cfg.DataDir)
	if err != nil {
		return err
	}
	defer unlock()
	id, err := loadIdentity(cfg.DataDir)
	if errors.Is(err, errNotEnrolled) {
		if cfg.JoinToken == "" {
			return errors.New("this agent has not joined a cluster yet: give it --join-token (kiln admin node add NAME on the control plane prints one)")
		}
		if id, err = join(ctx, cfg, log); err != nil {
			return err
		}
	} else if err != nil {
		return err
	} else if cfg.JoinToken != "" {
		log.Info("joined already; --join-token is not needed and was not used", "node", id.name)
	}
	log = log.With("node", id.name)
	if cfg.Handler == nil {
		cfg.Handler = pingHandler(id.name, cfg.Version)
	}
	a := &agent{cfg: cfg, log: log, renewed: make(chan struct{}, 1)}
	a.setIdentity(id)
	defer func() { _, c := a.current(); c.CloseIdleConnections() }()
	if cfg.Host != nil {
		records := &noderpc.RecordsClient{Client: func() *http.Client { _, c := a.current(); return c }, Base: cfg.ServerURL}
		host, err := cfg.Host(id.name, records)
		if err != nil {
			return fmt.Errorf("the node's game servers: %w", err)
		}
		a.cfg.Handler = hostHandler(cfg.Handler, host)
		hctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- a.runHost(hctx, host, records) }()
		defer func() {
			cancel()
			if err := <-done; err != nil {
				log.Error("the node's game servers", "err", err)
			}
		}()
	}
	return a.run(ctx)
}

// runHost runs host once its records can be read (the control plane
// answers): its recovery needs the node's servers.
func (a *agent) runHost(ctx context.Context, host *gameserver.Host, records *noderpc.RecordsClient) error {
	b := newBackoff(a.cfg.MinBackoff, a.cfg.MaxBackoff)
	for {
		_, err := records.NodeServers(ctx, "")
		if err == nil {
			break
		}
		d := b.next()
		a.log.Warn("cannot read this node's servers from the control plane yet; trying again", "err", err, "in", d.Round(time.Millisecond))
		if !sleep(ctx, d) {
			return nil
		}
	}
	return host.Run(ctx)
}

// hostHandler serves the Host's operations beside base (GET /v1/ping),
// answering 503 until the Host has recovered the node's servers.
func hostHandler(base http.Handler, host *gameserver.Host) http.Handler {
	ops := noderpc.HostHandler(host)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == cluster.PathPing {
			base.ServeHTTP(w, r)
			return
		}
		select {
		case <-host.Recovered():
		default:
			writeJSON(w, http.StatusServiceUnavailable, cluster.ErrorBody{Error: noderpc.ErrRecovering.Error(), Code: noderpc.CodeRecovering})
			return
		}
		ops.ServeHTTP(w, r)
	})
}

// nodeClient is the HTTP/2 client of the node endpoint with id's
// certificate.
func nodeClient(id identity) *http.Client {
	return &http.Client{Transport: &http.Transport{
		TLSClientConfig:   cluster.NodeTLS(id.ca, id.cert),
		ForceAttemptHTTP2: true,
		HTTP2:             &http.HTTP2Config{SendPingTimeout: 15 * time.Second, PingTimeout: 15 * time.Second},
	}}
}

// join enrolls with the join token, retrying while the control plane
// cannot be reached; a refusal or a control plane that is not the
// token's ends it.
func join(ctx context.Context, cfg Config, log *slog.Logger) (identity, error) {
	tok, err := cluster.ParseJoinToken(cfg.JoinToken)
	if err != nil {
		return identity{}, fmt.Errorf("--join-token: %w", err)
	}
	key, err := nodeKey(cfg.DataDir)
	if err != nil {
		return identity{}, err
	}
	csr, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: tok.Node}}, key)
	if err != nil {
		return identity{}, fmt.Errorf("make the certificate request: %w", err)
	}
	body, _ := json.Marshal(cluster.EnrollRequest{Token: tok.String(), CSR: string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: csr}))})
	tr := &http.Transport{TLSClientConfig: cluster.EnrollTLS(tok.CAFingerprint), ForceAttemptHTTP2: true}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	b := newBackoff(cfg.MinBackoff, cfg.MaxBackoff)
	for {
		resp, err := post(ctx, client, cfg.ServerURL+cluster.PathEnroll, body)
		if fe, ok := errors.AsType[*cluster.FingerprintError](err); ok {
			return identity{}, fe
		}
		if err == nil {
			return enrolled(cfg.DataDir, tok, key.Public(), resp, log)
		}
		if _, ok := errors.AsType[*RefusedError](err); ok || ctx.Err() != nil {
			return identity{}, fmt.Errorf("join the cluster: %w", err)
		}
		d := b.next()
		log.Warn("cannot reach the control plane to join; trying again", "err", err, "in", d.Round(time.Millisecond))
		if !sleep(ctx, d) {
			return identity{}, fmt.Errorf("join the cluster: %w", ctx.Err())
		}
	}
}

// enrolled checks the control plane's answer and keeps it: the CA it
// sends must be the one the token pins, the certificate of our key and
// name. The certificate is written last: its presence means enrolled.
func enrolled(dir string, tok cluster.JoinToken, pub crypto.PublicKey, body []byte, log *slog.Logger) (identity, error) {
	var er cluster.EnrollResponse
	if err := json.Unmarshal(body, &er); err != nil {
		return identity{}, fmt.Errorf("join the cluster: the control plane's answer: %w", err)
	}
	ca, err := cluster.ParseCertificatePEM([]byte(er.CA))
	if err != nil || cluster.Fingerprint(ca) != tok.CAFingerprint {
		return identity{}, errors.New("join the cluster: the control plane sent a CA other than the join token's")
	}
	cert, err := cluster.ParseCertificatePEM([]byte(er.Certificate))
	if err != nil {
		return identity{}, fmt.Errorf("join the cluster: the certificate sent: %w", err)
	}
	if eq, ok := pub.(interface{ Equal(crypto.PublicKey) bool }); !ok || !eq.Equal(cert.PublicKey) || cert.Subject.CommonName != tok.Node {
		return identity{}, errors.New("join the cluster: the certificate sent is not of this node's key and name")
	}
	if err := checkNodeCert(cert, ca); err != nil {
		return identity{}, fmt.Errorf("join the cluster: %w", err)
	}
	if err := writeFile(filepath.Join(dir, CAFile), []byte(er.CA)); err != nil {
		return identity{}, err
	}
	if err := writeFile(filepath.Join(dir, CertFile), []byte(er.Certificate)); err != nil {
		return identity{}, err
	}
	log.Info("joined the cluster", "node", tok.Node, "ca_fingerprint", tok.CAFingerprint, "certificate_expires", cert.NotAfter.UTC().Format(time.RFC3339))
	return loadIdentity(dir)
}

// post sends a JSON body and returns the answer's body when it is 200;
// an error answer becomes *RefusedError for 4xx, a plain error otherwise.
func post(ctx context.Context, client *http.Client, url string, body []byte) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, cluster.MaxMessage))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode == http.StatusOK {
		return data, nil
	}
	return nil, answerError(resp.StatusCode, data)
}

// answerError reads an error answer: *RefusedError when it is a refusal
// (4xx), a plain error (worth retrying) otherwise.
func answerError(status int, data []byte) error {
	var eb cluster.ErrorBody
	if json.Unmarshal(data, &eb) != nil || eb.Error == "" {
		eb = cluster.ErrorBody{Error: "HTTP " + strconv.Itoa(status), Code: "HTTP_" + strconv.Itoa(status)}
	}
	if status >= 400 && status < 500 {
		return &RefusedError{Status: status, Code: eb.Code, Message: eb.Error}
	}
	return fmt.Errorf("the control plane answered %d: %s", status, eb.Error)
}

// agent is an enrolled node's connection to the control plane.
type agent struct {
	cfg Config
	log *slog.Logger

	// mu guards the identity and the client made with it: a renewal
	// replaces both (renew.go).
	mu     sync.Mutex
	id     identity
	client *http.Client
	// renewed asks the session to end, so that the next connects with
	// the renewed certificate.
	renewed chan struct{}

	// started starts the channel and the renewal check at the first
	// welcome; loops owns their goroutines (run waits for them).
	started sync.Once
	loops   sync.WaitGroup
	// marker is the blob store marker found in Config.Blobs (sessions
	// run one at a time: no lock).
	marker *cluster.BlobMarker
}

// current is the node's identity and the client made with it.
func (a *agent) current() (identity, *http.Client) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.id, a.client
}

// setIdentity makes id the node's identity, with a client of its own;
// the older client's idle connections are closed (its session's when
// the session ends).
func (a *agent) setIdentity(id identity) {
	a.mu.Lock()
	old := a.client
	a.id, a.client = id, nodeClient(id)
	a.mu.Unlock()
	if old != nil {
		old.CloseIdleConnections()
	}
}

// run holds sessions until ctx ends or the control plane refuses the
// node; from the first welcome it also holds the channel (channel.go),
// which ends with it.
func (a *agent) run(ctx context.Context) error {
	defer a.loops.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	b := newBackoff(a.cfg.MinBackoff, a.cfg.MaxBackoff)
	for {
		welcomed, err := a.session(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if re, ok := errors.AsType[*RefusedError](err); ok {
			return fmt.Errorf("the control plane refused this node: %w", re)
		}
		if be, ok := errors.AsType[*BlobStoreError](err); ok {
			return be
		}
		if welcomed {
			b.reset()
		}
		if errors.Is(err, errRenewed) {
			continue
		}
		d := b.next()
		a.log.Warn("session with the control plane ended; reconnecting", "err", err, "in", d.Round(time.Millisecond))
		if !sleep(ctx, d) {
			return nil
		}
	}
}

// session opens one session: Hello up, Welcome down, then a heartbeat
// every interval the control plane asked for, each acknowledged. It ends
// when either side goes, or when the control plane has acknowledged
// nothing for three intervals (a control plane that hangs). welcomed
// says whether the session was open.
func (a *agent) session(ctx context.Context) (welcomed bool, err error) {
	runCtx := ctx // the channel's: it outlives this session
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// A renewal done between sessions asked for nothing this one needs:
	// it connects with the renewed certificate already.
	select {
	case <-a.renewed:
	default:
	}
	_, client := a.current()
	defer func() {
		// A renewal replaced the client: its connection, idle now, goes.
		if _, cur := a.current(); cur != client {
			client.CloseIdleConnections()
		}
	}()
	pr, pw := io.Pipe()
	defer pw.Close()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, a.cfg.ServerURL+cluster.PathSession, pr)
	if err != nil {
		return false, err
	}
	req.Header.Set("Content-Type", "application/x-ndjson")
	enc := json.NewEncoder(pw)
	hello := cluster.Up{Type: cluster.TypeHello, Hello: &cluster.Hello{
		Version: a.cfg.Version, PublicHost: a.cfg.PublicHost, SFTPAddr: a.cfg.SFTPAddr,
		PortFirst: a.cfg.Ports.First, PortLast: a.cfg.Ports.Last, Runtime: a.cfg.Runtime,
	}}
	// The body is written as the request goes: the hello now, the beats
	// once the welcome said how often.
	intervals := make(chan time.Duration, 1)
	writeErr := make(chan error, 1)
	go func() { writeErr <- a.beat(ctx, enc, hello, intervals) }()
	resp, err := client.Do(req)
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		data, _ := io.ReadAll(io.LimitReader(resp.Body, cluster.MaxMessage))
		return false, answerError(resp.StatusCode, data)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 4096), cluster.MaxMessage)
	var interval time.Duration
	lines := make(chan cluster.Down)
	readErr := make(chan error, 1)
	go func() {
		for sc.Scan() {
			var d cluster.Down
			if err := json.Unmarshal(sc.Bytes(), &d); err != nil {
				readErr <- fmt.Errorf("an unreadable message from the control plane: %w", err)
				return
			}
			select {
			case lines <- d:
			case <-ctx.Done():
				return
			}
		}
		err := sc.Err()
		if err == nil {
			err = io.EOF
		}
		readErr <- err
	}()
	// The welcome comes at once; later, an ack at least every interval.
	quiet := time.NewTimer(30 * time.Second)
	defer quiet.Stop()
	for {
		select {
		case <-ctx.Done():
			return welcomed, ctx.Err()
		case err := <-readErr:
			return welcomed, fmt.Errorf("the control plane ended the session: %w", err)
		case err := <-writeErr:
			return welcomed, fmt.Errorf("send to the control plane: %w", err)
		case <-quiet.C:
			return welcomed, errors.New("the control plane stopped answering")
		case <-a.renewed:
			return welcomed, errRenewed
		case d := <-lines:
			switch {
			case d.Type == cluster.TypeWelcome && d.Welcome != nil && !welcomed:
				if m := d.Welcome.BlobMarker; a.marker == nil || m == nil || *m != *a.marker {
					if err := checkBlobs(ctx, a.cfg.Blobs, m); err != nil {
						return false, err
					}
					a.marker = m
				}
				interval = time.Duration(d.Welcome.HeartbeatIntervalMS) * time.Millisecond
				interval = min(max(interval, 50*time.Millisecond), time.Minute)
				welcomed = true
				intervals <- interval
				a.log.Info("session with the control plane open", "server", a.cfg.ServerURL, "heartbeat_interval", interval)
				a.started.Do(func() {
					a.loops.Go(func() { a.holdChannel(runCtx, interval) })
					a.loops.Go(func() { a.renewLoop(runCtx) })
				})
			case d.Type == cluster.TypeAck:
			default:
				a.log.Debug("a message from the control plane this agent does not know", "type", d.Type)
			}
			if welcomed {
				quiet.Reset(3 * interval)
			}
		}
	}
}

// beat writes the hello, then, once the interval is known, a heartbeat
// at once and every interval until ctx ends.
func (a *agent) beat(ctx context.Context, enc *json.Encoder, hello cluster.Up, intervals <-chan time.Duration) error {
	if err := enc.Encode(hello); err != nil {
		return err
	}
	var interval time.Duration
	select {
	case <-ctx.Done():
		return nil
	case interval = <-intervals:
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	measure := Measure(a.cfg.DataDir, a.cfg.Ports, a.cfg.Offer)
	for seq := int64(1); ; seq++ {
		hb, err := measure(ctx)
		if err != nil {
			a.log.Warn("cannot measure this node", "err", err)
		}
		hb.Seq = seq
		if err := enc.Encode(cluster.Up{Type: cluster.TypeHeartbeat, Heartbeat: &hb}); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Measure reports a node's memory, the disk of dir and the busy ports of
// its range (node.ReadCapacity, node.ListeningPorts), the sizes as offer
// says (--node-memory, --node-disk); kiln serve's local node reports the
// same way.
func Measure(dir string, ports node.PortRange, offer node.Offer) func(context.Context) (cluster.Heartbeat, error) {
	return func(context.Context) (cluster.Heartbeat, error) {
		c, err := node.ReadCapacity(dir)
		if err != nil {
			return cluster.Heartbeat{}, err
		}
		c = offer.Apply(c)
		busy, err := node.ListeningPorts(ports)
		if err != nil {
			return cluster.Heartbeat{}, err
		}
		return cluster.Heartbeat{MemoryTotal: c.MemoryBytes, MemoryFree: c.MemoryFreeBytes, DiskTotal: c.DiskBytes,
			DiskFree: c.DiskFreeBytes, PortsBusy: busy}, nil
	}
}

// backoff doubles a wait from min to max, with ±20 % jitter so that
// agents cut at once do not all come back at once.
type backoff struct{ cur, min, max time.Duration }

func newBackoff(lo, hi time.Duration) *backoff { return &backoff{cur: lo, min: lo, max: hi} }

func (b *backoff) next() time.Duration {
	d := b.cur
	b.cur = min(b.cur*2, b.max)
	return time.Duration(float64(d) * (0.8 + 0.4*mrand.Float64()))
}

func (b *backoff) reset() { b.cur = b.min }

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// lockDir takes the data dir's lock (agent.lock, flock, not waiting): one
// agent per data dir. It goes with the process.
func lockDir(dir string) (func(), error) {
	path := filepath.Join(dir, "agent.lock")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	for {
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	if errors.Is(err, unix.EWOULDBLOCK) {
		f.Close()
		return nil, fmt.Errorf("data dir %s is in use by another kiln agent", dir)
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return func() { f.Close() }, nil
}
