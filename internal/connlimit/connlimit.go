package connlimit

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
)

// Limits are the caps of a Limiter. A cap of 0 or less is no cap.
type Limits struct {
	Total   int // connections counted at once, from every address
	PerAddr int // connections counted at once from one address (an IPv6 /64)
}

// DefaultLogEvery is how often refusals are logged at most.
const DefaultLogEvery = 10 * time.Second

// Errors of Take.
var (
	ErrTotal   = errors.New("connlimit: too many connections")
	ErrPerAddr = errors.New("connlimit: too many connections from this address")
)

// Limiter counts connections against Limits.
type Limiter struct {
	lim      Limits
	log      *slog.Logger
	logEvery time.Duration

	mu     sync.Mutex
	total  int
	byAddr map[netip.Prefix]int

	accepted, refused atomic.Int64
	rl                refusalLog
}

// Options tune a Limiter. Zero fields take the defaults in brackets.
type Options struct {
	// Log receives the refusals' lines [discarded]; narrow it with what
	// the listener is ("component", "sftp").
	Log *slog.Logger
	// LogEvery is how often refusals are logged at most [DefaultLogEvery].
	LogEvery time.Duration
}

// New returns a Limiter of lim. Close it when its listener is done, so
// the last refusals are logged.
func New(lim Limits, o Options) *Limiter {
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.LogEvery <= 0 {
		o.LogEvery = DefaultLogEvery
	}
	l := &Limiter{lim: lim, log: o.Log, logEvery: o.LogEvery, byAddr: map[netip.Prefix]int{}}
	l.rl.l = l
	return l
}

// Limits returns the caps.
func (l *Limiter) Limits() Limits { return l.lim }

// Key is what a's connections are counted by: its IPv4 address, or the
// /64 of its IPv6 address; the zero Prefix for an address that is not
// TCP.
func Key(a net.Addr) netip.Prefix {
	ta, ok := a.(*net.TCPAddr)
	if !ok {
		return netip.Prefix{}
	}
	ip, ok := netip.AddrFromSlice(ta.IP)
	if !ok {
		return netip.Prefix{}
	}
	ip = ip.Unmap()
	if ip.Is4() {
		return netip.PrefixFrom(ip, 32)
	}
	p, _ := ip.WithZone("").Prefix(64)
	return p
}

// Slot is one counted connection. Release gives it back; only the first
// call counts.
type Slot struct {
	l    *Limiter
	key  netip.Prefix
	done atomic.Bool
}

// Take counts one connection from addr. Errors: ErrTotal when Total are
// counted already, ErrPerAddr when PerAddr from addr's key are; the
// refusal is counted and logged (at most once per LogEvery).
func (l *Limiter) Take(addr net.Addr) (*Slot, error) {
	key := Key(addr)
	l.mu.Lock()
	var err error
	switch {
	case l.lim.Total > 0 && l.total >= l.lim.Total:
		err = ErrTotal
	case l.lim.PerAddr > 0 && l.byAddr[key] >= l.lim.PerAddr:
		err = ErrPerAddr
	default:
		l.total++
		l.byAddr[key]++
	}
	l.mu.Unlock()
	if err == nil {
		l.accepted.Add(1)
	}
	if err != nil {
		l.refused.Add(1)
		l.rl.refuse(key, err)
		return nil, err
	}
	return &Slot{l: l, key: key}, nil
}

// Release gives the slot back (once; later calls do nothing).
func (s *Slot) Release() {
	if s == nil || !s.done.CompareAndSwap(false, true) {
		return
	}
	l := s.l
	l.mu.Lock()
	l.total--
	if n := l.byAddr[s.key] - 1; n > 0 {
		l.byAddr[s.key] = n
	} else {
		delete(l.byAddr, s.key)
	}
	l.mu.Unlock()
}

// Stats are a Limiter's figures.
type Stats struct {
	Open     int   // connections counted now
	Addrs    int   // addresses (IPv6 /64s) with connections counted now
	Accepted int64 // connections let in since New
	Refused  int64 // connections refused since New
}

// Stats reads the figures.
func (l *Limiter) Stats() Stats {
	l.mu.Lock()
	defer l.mu.Unlock()
	return Stats{Open: l.total, Addrs: len(l.byAddr), Accepted: l.accepted.Load(), Refused: l.refused.Load()}
}

// Close writes the summary of the refusals not logged yet and stops the
// timer that would have. Take may still be called: its refusals are
// counted (Stats), no longer logged.
func (l *Limiter) Close() { l.rl.close() }

// Listener returns ln with every accepted connection counted by l: one
// over a cap is closed at once and Accept waits for the next; one let in
// gives its slot back when it is closed. Errors of ln.Accept are returned
// as they are (net/http backs off on a temporary one).
func (l *Limiter) Listener(ln net.Listener) net.Listener { return &listener{Listener: ln, l: l} }

type listener struct {
	net.Listener
	l *Limiter
}

func (ln *listener) Accept() (net.Conn, error) {
	for {
		c, err := ln.Listener.Accept()
		if err != nil {
			return nil, err
		}
		s, err := ln.l.Take(c.RemoteAddr())
		if err != nil {
			Refuse(c)
			continue
		}
		return &conn{Conn: c, slot: s}, nil
	}
}

// Refuse closes a connection over a cap at once: a reset (SO_LINGER 0),
// nothing kept in TIME_WAIT.
func Refuse(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}

// conn is a counted connection: Close gives its slot back.
type conn struct {
	net.Conn
	slot *Slot
}

func (c *conn) Close() error {
	err := c.Conn.Close()
	c.slot.Release()
	return err
}

// ReadFrom keeps the connection's own (sendfile on a *net.TCPConn).
func (c *conn) ReadFrom(r io.Reader) (int64, error) {
	if rf, ok := c.Conn.(io.ReaderFrom); ok {
		return rf.ReadFrom(r)
	}
	return io.Copy(writerOnly{c.Conn}, r)
}

// CloseWrite keeps the connection's own half-close (net/http's graceful
// close after an error answer); without one it does nothing.
func (c *conn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// writerOnly hides a ReadFrom (io.Copy would call back into conn's).
type writerOnly struct{ io.Writer }

// refusalLog logs refusals: the first of a quiet interval at once, the
// rest summed up once the interval is over (a timer), never more than
// one line per LogEvery.
type refusalLog struct {
	l *Limiter

	mu       sync.Mutex
	last     time.Time // when the last line was written
	n        int       // refusals since, not logged yet
	total    int       // of which over the total cap
	addrs    map[netip.Prefix]struct{}
	lastAddr netip.Prefix
	timer    *time.Timer
	closed   bool // no more lines, no more timers
}

func (r *refusalLog) refuse(key netip.Prefix, why error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return
	}
	now := time.Now()
	if r.n == 0 && r.timer == nil && now.Sub(r.last) >= r.l.logEvery {
		r.last = now
		r.l.log.Warn("connection refused", "addr", addrString(key), "reason", r.reason(why))
		return
	}
	r.n++
	if errors.Is(why, ErrTotal) {
		r.total++
	}
	if r.addrs == nil {
		r.addrs = map[netip.Prefix]struct{}{}
	}
	if len(r.addrs) < 10_000 { // a count, bounded: "at least" past it
		r.addrs[key] = struct{}{}
	}
	r.lastAddr = key
	if r.timer == nil {
		r.timer = time.AfterFunc(r.last.Add(r.l.logEvery).Sub(now), r.flush)
	}
}

// flush writes the summary of the refusals since the last line.
func (r *refusalLog) flush() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.timer = nil
	r.summaryLocked()
}

func (r *refusalLog) summaryLocked() {
	if r.n == 0 {
		return
	}
	now := time.Now()
	r.l.log.Warn("connections refused", "count", r.n, "over_total", r.total, "over_per_addr", r.n-r.total,
		"addrs", len(r.addrs), "last_addr", addrString(r.lastAddr), "in", now.Sub(r.last).Round(time.Millisecond).String(),
		"max_total", r.l.lim.Total, "max_per_addr", r.l.lim.PerAddr)
	r.last = now
	r.n, r.total, r.addrs = 0, 0, nil
}

func (r *refusalLog) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closed = true
	if r.timer != nil {
		r.timer.Stop()
		r.timer = nil
	}
	r.summaryLocked()
}

func (r *refusalLog) reason(why error) string {
	if errors.Is(why, ErrTotal) {
		return fmt.Sprintf("at most %d connections in all", r.l.lim.Total)
	}
	return fmt.Sprintf("at most %d connections from one address", r.l.lim.PerAddr)
}

// addrString names a key: an IPv4 address without its /32.
func addrString(p netip.Prefix) string {
	if !p.IsValid() {
		return "(not TCP)"
	}
	if p.Addr().Is4() && p.Bits() == 32 {
		return p.Addr().String()
	}
	return p.String()
}
