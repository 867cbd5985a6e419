package sftp

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pkg/sftp"
	"golang.org/x/crypto/ssh"

	"github.com/kilnhq/kiln/internal/connlimit"
	"github.com/kilnhq/kiln/internal/files"
)

// Config tunes a Server. Zero fields take the defaults in brackets.
type Config struct {
	DataDir string // holds the host key (HostKeyFile), made on the first start

	CheckInterval    time.Duration // re-check of sessions' credentials and idleness [5 s]
	IdleTimeout      time.Duration // a session without SFTP traffic ends [15 min]
	HandshakeTimeout time.Duration // from connect to logged in [30 s]
	// Connections not logged in yet, in all and from one address (an
	// IPv6 /64) [256, 16]: more are closed at once, before the handshake.
	MaxUnauthenticated        int
	MaxUnauthenticatedPerAddr int
	MaxSessions               int           // per credential [8]
	MaxTeamSessions           int           // per team, all its servers and logins [64]
	MaxNodeSessions           int           // on this node, all teams [512]
	MaxHandles                int           // open files and directories per session [256]
	MaxChannels               int           // SSH channels per connection [4]
	MaxFailures               int           // failed logins from one address… [10]
	FailureWindow             time.Duration // …within this window… [5 min]
	LockoutFor                time.Duration // …lock it out this long [15 min]
	MaxTxPacket               uint32        // largest data packet sent [256 KiB - 1 KiB, what OpenSSH allows]
	MaxInFlight               int           // requests a session works on at once [4]; bounds its buffers

	Now func() time.Time // the clock of the lockout and idle checks [time.Now]
}

func (c *Config) defaults() {
	set := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	setInt := func(d *int, v int) {
		if *d == 0 {
			*d = v
		}
	}
	set(&c.CheckInterval, 5*time.Second)
	set(&c.IdleTimeout, 15*time.Minute)
	set(&c.HandshakeTimeout, 30*time.Second)
	set(&c.FailureWindow, 5*time.Minute)
	set(&c.LockoutFor, 15*time.Minute)
	setInt(&c.MaxSessions, 8)
	setInt(&c.MaxTeamSessions, 64)
	setInt(&c.MaxNodeSessions, 512)
	setInt(&c.MaxHandles, 256)
	setInt(&c.MaxChannels, 4)
	setInt(&c.MaxFailures, 10)
	setInt(&c.MaxInFlight, 4)
	setInt(&c.MaxUnauthenticated, 256)
	setInt(&c.MaxUnauthenticatedPerAddr, 16)
	if c.MaxTxPacket == 0 {
		c.MaxTxPacket = 256<<10 - 1024
	}
	if c.Now == nil {
		c.Now = time.Now
	}
}

// Algorithms offered: key exchanges on curve25519 (and its ML-KEM
// hybrid), AEAD ciphers only (so no MAC is ever used; SHA-2 ones are
// listed for completeness, never SHA-1).
var (
	keyExchanges = []string{ssh.KeyExchangeMLKEM768X25519, ssh.KeyExchangeCurve25519, "curve25519-sha256@libssh.org"}
	ciphers      = []string{ssh.CipherAES128GCM, ssh.CipherAES256GCM, ssh.CipherChaCha20Poly1305}
	macs         = []string{ssh.HMACSHA256ETM, ssh.HMACSHA512ETM}
)

// Stats are the server's counters since it started, and its live
// sessions.
type Stats struct {
	Logins   int64 // successful logins
	Failures int64 // failed logins (wrong name or password, locked out)
	Lockouts int64 // addresses locked out
	Cut      int64 // sessions ended by a revocation, rotation or deletion
	Sessions int64 // live sessions
	// Connections not logged in yet; since the start, connections let
	// in and those refused for being over MaxUnauthenticated or
	// MaxUnauthenticatedPerAddr.
	Unauthenticated, Accepted, Refused int64
}

// Server is Kiln's SSH server: password logins with SFTP credentials, the
// SFTP subsystem only, each session inside its server's root.
type Server struct {
	svc     *Service
	cfg     Config
	log     *slog.Logger
	hostKey ssh.Signer
	locks   *lockout
	pending *connlimit.Limiter // connections not logged in yet

	logins, failures, lockouts, cut atomic.Int64

	mu    sync.Mutex
	conns map[net.Conn]struct{} // every connection, logged in or not
}

// NewServer returns a Server for svc's credentials, reading (or creating)
// its host key in cfg.DataDir.
func NewServer(svc *Service, cfg Config, log *slog.Logger) (*Server, error) {
	if cfg.DataDir == "" {
		return nil, errors.New("sftp: no data directory for the host key")
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	cfg.defaults()
	key, err := loadHostKey(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	return &Server{
		svc: svc, cfg: cfg, log: log.With("component", "sftp"), hostKey: key,
		locks: newLockout(cfg.MaxFailures, cfg.FailureWindow, cfg.LockoutFor),
		pending: connlimit.New(connlimit.Limits{Total: cfg.MaxUnauthenticated, PerAddr: cfg.MaxUnauthenticatedPerAddr},
			connlimit.Options{Log: log.With("component", "sftp", "stage", "unauthenticated")}),
		conns: map[net.Conn]struct{}{},
	}, nil
}

// HostKey is the server's public host key (for known_hosts, and for
// clients checking it).
func (s *Server) HostKey() ssh.PublicKey { return s.hostKey.PublicKey() }

// Stats reads the counters.
func (s *Server) Stats() Stats {
	p := s.pending.Stats()
	return Stats{
		Logins: s.logins.Load(), Failures: s.failures.Load(), Lockouts: s.lockouts.Load(), Cut: s.cut.Load(),
		Sessions: int64(s.sessions()), Unauthenticated: int64(p.Open), Accepted: p.Accepted, Refused: p.Refused,
	}
}

// Counts is Stats by name, in the shape of metrics.CountFunc (register it
// with Metrics.RegisterCounts as kiln_sftp{event=…}).
func (s *Server) Counts(context.Context) (map[string]int, error) {
	st := s.Stats()
	return map[string]int{
		"logins": int(st.Logins), "login_failures": int(st.Failures), "lockouts": int(st.Lockouts),
		"sessions_cut": int(st.Cut), "sessions": int(st.Sessions),
		"unauthenticated": int(st.Unauthenticated), "connections_accepted": int(st.Accepted), "connections_refused": int(st.Refused),
	}, nil
}

func (s *Server) sessions() int {
	return len(s.svc.sessions.matching(func(se *session) bool { return se.srv == s }))
}

// Serve accepts connections on ln until ctx ends, then closes ln and
// every connection (sessions included) and returns once all their
// goroutines are done: nil after ctx ended, an error if ln was closed
// under it. Other accept errors (EMFILE and ENFILE when descriptors run
// out, ECONNABORTED…) are transient: Serve waits, 5 ms doubling to 1 s
// as net/http's server does, and accepts again. A connection over
// MaxUnauthenticated or MaxUnauthenticatedPerAddr is closed at once,
// before the handshake.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer s.pending.Close()
	var wg sync.WaitGroup
	wg.Go(func() {
		<-ctx.Done()
		ln.Close()
		s.closeAll()
	})
	wg.Go(func() { s.recheck(ctx) })
	var serveErr error
	var backoff acceptBackoff
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			if errors.Is(err, net.ErrClosed) {
				serveErr = fmt.Errorf("accept: %w", err)
				break
			}
			if !backoff.wait(ctx, s.log, err) {
				break
			}
			continue
		}
		backoff.ok(ctx, s.log)
		slot, err := s.pending.Take(c.RemoteAddr())
		if err != nil {
			connlimit.Refuse(c) // logged by the limiter, at most every 10 s
			continue
		}
		if !s.track(c) {
			slot.Release()
			c.Close()
			break
		}
		wg.Go(func() {
			defer s.untrack(c)
			s.handle(ctx, c, slot)
		})
	}
	cancel()
	wg.Wait()
	return serveErr
}

// acceptBackoff is the wait between failed accepts: 5 ms, doubling to
// 1 s, back to none after a success. A run of failures is logged when it
// begins and when it ends (not per failure).
type acceptBackoff struct {
	delay  time.Duration
	failed int
}

// wait logs err when a run of failures begins and sleeps the next delay;
// false when ctx ended meanwhile.
func (b *acceptBackoff) wait(ctx context.Context, log *slog.Logger, err error) bool {
	b.delay = min(max(2*b.delay, 5*time.Millisecond), time.Second)
	if b.failed == 0 {
		log.WarnContext(ctx, "sftp accept failed; retrying", "err", err, "retry_in", b.delay.String())
	}
	b.failed++
	t := time.NewTimer(b.delay)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// ok ends a run of failures.
func (b *acceptBackoff) ok(ctx context.Context, log *slog.Logger) {
	if b.failed > 0 {
		log.InfoContext(ctx, "sftp accepting again", "failed_accepts", b.failed)
	}
	b.delay, b.failed = 0, 0
}

// track registers c; false once closeAll has run.
func (s *Server) track(c net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conns == nil {
		return false
	}
	s.conns[c] = struct{}{}
	return true
}

func (s *Server) untrack(c net.Conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.conns, c)
}

// closeAll closes every connection and refuses new ones.
func (s *Server) closeAll() {
	s.mu.Lock()
	conns := s.conns
	s.conns = nil
	s.mu.Unlock()
	for c := range conns {
		c.Close()
	}
}

// addrKey is what the lockout counts by: the client's IP, an IPv6
// client's /64 (one host has a whole /64 to rotate through).
func addrKey(a net.Addr) string {
	ta, ok := a.(*net.TCPAddr)
	if !ok {
		return a.String()
	}
	if ip4 := ta.IP.To4(); ip4 != nil {
		return ip4.String()
	}
	return (&net.IPNet{IP: ta.IP.Mask(net.CIDRMask(64, 128)), Mask: net.CIDRMask(64, 128)}).String()
}

// errLocked refuses every login from a locked-out address.
var errLocked = errors.New("sftp: too many failed logins from this address")

// sshConfig is the SSH server configuration for one connection.
func (s *Server) sshConfig(ctx context.Context) *ssh.ServerConfig {
	c := &ssh.ServerConfig{
		Config:        ssh.Config{KeyExchanges: keyExchanges, Ciphers: ciphers, MACs: macs},
		MaxAuthTries:  6,
		ServerVersion: "SSH-2.0-Kiln",
		PasswordCallback: func(meta ssh.ConnMetadata, password []byte) (*ssh.Permissions, error) {
			return s.authenticate(ctx, meta, password)
		},
	}
	c.AddHostKey(s.hostKey)
	return c
}

// authenticate checks one password login (the username and address are
// logged, never the password).
func (s *Server) authenticate(ctx context.Context, meta ssh.ConnMetadata, password []byte) (*ssh.Permissions, error) {
	addr := addrKey(meta.RemoteAddr())
	now := s.cfg.Now()
	log := s.log.With("username", meta.User(), "addr", meta.RemoteAddr().String())
	if s.locks.locked(addr, now) {
		s.failures.Add(1)
		log.WarnContext(ctx, "sftp login refused: address locked out")
		return nil, &ssh.BannerError{Err: errLocked, Message: "Too many failed logins from your address; try again later.\n"}
	}
	c, err := s.svc.login(ctx, meta.User(), password)
	if err == nil && s.svc.sessions.isClosed(c.serverID) {
		// The password was right: no failure counts towards a lockout.
		log.WarnContext(ctx, "sftp login refused: the server is being deleted", "server_id", c.serverID)
		return nil, &ssh.BannerError{Err: errServerClosed, Message: "This server is being deleted.\n"}
	}
	if err != nil {
		s.failures.Add(1)
		if !errors.Is(err, errBadLogin) {
			log.ErrorContext(ctx, "sftp login failed", "err", err)
			return nil, errBadLogin
		}
		log.WarnContext(ctx, "sftp login failed")
		if s.locks.fail(addr, now) {
			s.lockouts.Add(1)
			log.WarnContext(ctx, "sftp address locked out", "for", s.cfg.LockoutFor.String(), "lock_key", addr)
		}
		return nil, errBadLogin
	}
	return &ssh.Permissions{ExtraData: map[any]any{credKey{}: c}}, nil
}

type credKey struct{}

// handle serves one connection: the handshake and login within
// HandshakeTimeout (counted in slot until then), then its channels until
// it closes or is cut.
func (s *Server) handle(ctx context.Context, c net.Conn, slot *connlimit.Slot) {
	defer c.Close()
	defer slot.Release()
	_ = c.SetDeadline(time.Now().Add(s.cfg.HandshakeTimeout))
	sconn, chans, reqs, err := ssh.NewServerConn(c, s.sshConfig(ctx))
	slot.Release() // logged in, or gone: a session is limited per credential
	if err != nil {
		s.log.DebugContext(ctx, "ssh handshake ended", "addr", c.RemoteAddr().String(), "err", err)
		return
	}
	_ = c.SetDeadline(time.Time{})
	var wg sync.WaitGroup
	var root *files.Root
	defer func() {
		// The connection first (its channels and requests end), then
		// the goroutines serving them, then the root they used.
		sconn.Close()
		wg.Wait()
		if root != nil {
			root.Close()
		}
	}()
	wg.Go(func() { ssh.DiscardRequests(reqs) })

	cred := sconn.Permissions.ExtraData[credKey{}].(credRow)
	log := s.log.With("username", cred.login, "server_id", cred.serverID, "credential_id", cred.id, "addr", c.RemoteAddr().String())
	se := &session{cred: cred, srv: s}
	se.touch(s.cfg.Now())
	se.close = func(reason string) {
		log.InfoContext(ctx, "sftp session ended", "reason", reason)
		s.cut.Add(1)
		sconn.Close()
	}
	if err := s.svc.sessions.add(se, sessionLimits{perCred: s.cfg.MaxSessions, perTeam: s.cfg.MaxTeamSessions, total: s.cfg.MaxNodeSessions}); err != nil {
		msg := "the server is being deleted"
		switch {
		case errors.Is(err, errTooManySessions):
			msg = fmt.Sprintf("too many SFTP sessions for this login (at most %d)", s.cfg.MaxSessions)
		case errors.Is(err, errTeamSessions):
			msg = fmt.Sprintf("too many SFTP sessions for this team (at most %d at once)", s.cfg.MaxTeamSessions)
		case errors.Is(err, errNodeSessions):
			msg = "too many SFTP sessions on this node; try again later"
		}
		log.WarnContext(ctx, "sftp session refused", "reason", msg)
		for nc := range chans {
			_ = nc.Reject(ssh.ResourceShortage, msg)
			break
		}
		return
	}
	defer s.svc.sessions.remove(se)
	a, err := s.svc.servers.Access(ctx, cred.teamID, cred.serverID, false)
	if err == nil {
		root, err = files.Open(a.Root)
	}
	if err != nil {
		log.WarnContext(ctx, "sftp session refused: server root", "err", err)
		return
	}
	s.logins.Add(1)
	log.InfoContext(ctx, "sftp login")

	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	fs := &fsys{ctx: sctx, se: se, root: root, servers: s.svc.servers, maxHandles: s.cfg.MaxHandles, log: log}
	channels := 0
	for nc := range chans {
		if nc.ChannelType() != "session" {
			_ = nc.Reject(ssh.UnknownChannelType, "only sessions (the sftp subsystem) are served")
			continue
		}
		if channels >= s.cfg.MaxChannels {
			_ = nc.Reject(ssh.ResourceShortage, "too many channels")
			continue
		}
		ch, creqs, err := nc.Accept()
		if err != nil {
			continue
		}
		channels++
		wg.Go(func() { s.channel(fs, ch, creqs, &wg) })
	}
}

// channel answers a session channel's requests: the "sftp" subsystem is
// served; shells, commands, ptys and the rest are refused.
func (s *Server) channel(fs *fsys, ch ssh.Channel, reqs <-chan *ssh.Request, wg *sync.WaitGroup) {
	started := false
	for req := range reqs {
		ok := req.Type == "subsystem" && !started && subsystem(req.Payload) == "sftp"
		if req.WantReply {
			_ = req.Reply(ok, nil)
		}
		if !ok {
			continue
		}
		started = true
		wg.Go(func() {
			defer ch.Close()
			conn := newLimitsConn(&activity{ch: ch, se: fs.se, now: s.cfg.Now}, s.cfg.MaxTxPacket, s.cfg.MaxHandles, s.cfg.MaxInFlight)
			// The allocator reuses packet and read buffers: without it
			// every READ allocated a 255 KiB buffer, whatever the file's
			// size (5 GB for a download of 10,000 small files, a garbage
			// collection every ~10 files). limitsConn bounds what it keeps.
			rs := sftp.NewRequestServer(conn,
				sftp.Handlers{FileGet: fs, FilePut: fs, FileCmd: fs, FileList: fs},
				sftp.WithRSMaxTxPacket(s.cfg.MaxTxPacket), sftp.WithRSAllocator())
			if err := rs.Serve(); err != nil && !errors.Is(err, io.EOF) {
				fs.log.DebugContext(fs.ctx, "sftp subsystem ended", "err", err)
			}
			rs.Close()
		})
	}
	if !started {
		ch.Close()
	}
}

// subsystem reads the name of a "subsystem" request's payload.
func subsystem(payload []byte) string {
	if len(payload) < 4 {
		return ""
	}
	n := binary.BigEndian.Uint32(payload)
	if uint64(n) > uint64(len(payload)-4) {
		return ""
	}
	return string(payload[4 : 4+n])
}

// activity is a channel that records when the client last sent
// something (the idle check reads it).
type activity struct {
	ch  ssh.Channel
	se  *session
	now func() time.Time
}

func (a *activity) Read(p []byte) (int, error) {
	n, err := a.ch.Read(p)
	if n > 0 {
		a.se.touch(a.now())
	}
	return n, err
}

func (a *activity) Write(p []byte) (int, error) { return a.ch.Write(p) }
func (a *activity) Close() error                { return a.ch.Close() }

// recheck ends, every CheckInterval, the sessions of this server that
// went idle or whose credentials stopped being valid in the database
// (rotated, their token revoked, their server deleted: also by another
// process, which cannot reach this one's sessions otherwise).
func (s *Server) recheck(ctx context.Context) {
	t := time.NewTicker(s.cfg.CheckInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		s.recheckOnce(ctx)
	}
}

func (s *Server) recheckOnce(ctx context.Context) {
	live := s.svc.sessions.matching(func(se *session) bool { return se.srv == s })
	if len(live) == 0 {
		return
	}
	now := s.cfg.Now()
	seen := map[string]bool{}
	var ids []string
	for _, se := range live {
		if now.Sub(time.Unix(0, se.lastActive.Load())) > s.cfg.IdleTimeout {
			se.end("idle")
			continue
		}
		if !seen[se.cred.id] {
			seen[se.cred.id] = true
			ids = append(ids, se.cred.id)
		}
	}
	states, err := s.svc.states(ctx, ids)
	if err != nil {
		if ctx.Err() == nil {
			s.log.ErrorContext(ctx, "sftp re-check failed; sessions kept until the next one", "err", err)
		}
		return
	}
	for _, se := range live {
		st, ok := states[se.cred.id]
		switch {
		case !ok:
			se.end("credentials removed (server deleted)")
		case st.revoked:
			se.end("token revoked")
		case st.generation != se.cred.generation:
			se.end("credentials rotated")
		}
	}
}
