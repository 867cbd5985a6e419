package connlimit

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
	"time"
)

func tcp(ip string) net.Addr { return &net.TCPAddr{IP: net.ParseIP(ip), Port: 40000} }

func TestKey(t *testing.T) {
	for _, c := range []struct {
		addr net.Addr
		want string
	}{
		{tcp("192.0.2.7"), "192.0.2.7/32"},
		{tcp("::ffff:192.0.2.7"), "192.0.2.7/32"},
		{tcp("2001:db8:1:2:3:4:5:6"), "2001:db8:1:2::/64"},
		{&net.TCPAddr{IP: net.ParseIP("fe80::1"), Zone: "eth0"}, "fe80::/64"},
		{&net.UnixAddr{Name: "/run/x.sock", Net: "unix"}, "invalid Prefix"},
	} {
		if got := Key(c.addr).String(); got != c.want {
			t.Errorf("Key(%v) = %s, want %s", c.addr, got, c.want)
		}
	}
}

// TestTake: the caps in all and per address (an IPv6 /64 is one
// address), a slot given back once however often it is released, and no
// address kept once its last connection went.
func TestTake(t *testing.T) {
	l := New(Limits{Total: 4, PerAddr: 2}, Options{})
	defer l.Close()
	a1, err := l.Take(tcp("2001:db8::1"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Take(tcp("2001:db8::2")); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Take(tcp("2001:db8::ffff")); !errors.Is(err, ErrPerAddr) {
		t.Errorf("a third from one /64 = %v, want ErrPerAddr", err)
	}
	b, err := l.Take(tcp("192.0.2.1"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Take(tcp("192.0.2.2")); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Take(tcp("192.0.2.3")); !errors.Is(err, ErrTotal) {
		t.Errorf("a fifth = %v, want ErrTotal", err)
	}
	a1.Release()
	a1.Release()
	if st := l.Stats(); st.Open != 3 || st.Addrs != 3 || st.Accepted != 4 || st.Refused != 2 {
		t.Errorf("Stats = %+v, want 3 open from 3 addresses, 4 accepted, 2 refused", st)
	}
	if _, err := l.Take(tcp("2001:db8::3")); err != nil {
		t.Errorf("a slot released twice: %v, want one free slot", err)
	}
	if _, err := l.Take(tcp("192.0.2.3")); !errors.Is(err, ErrTotal) {
		t.Errorf("after one release and one take = %v, want ErrTotal (the release counted once)", err)
	}
	b.Release()
	if st := l.Stats(); st.Addrs != 2 {
		t.Errorf("Stats = %+v after 192.0.2.1's only connection went, want 2 addresses (a /64 and 192.0.2.2)", st)
	}
	unlimited := New(Limits{}, Options{})
	for range 1000 {
		if _, err := unlimited.Take(tcp("192.0.2.1")); err != nil {
			t.Fatalf("no caps: %v", err)
		}
	}
}

// dialFrom connects to addr from the loopback address src.
func dialFrom(t *testing.T, src, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 10 * time.Second}
	c, err := d.DialContext(t.Context(), "tcp", addr)
	if err != nil {
		t.Fatalf("dial from %s: %v", src, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestListener: connections over a cap are closed at once (the client
// reads a reset, nothing else) and Accept goes on to the next; closing an
// accepted one frees its slot. The wrapped connection keeps ReadFrom and
// CloseWrite.
func TestListener(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := New(Limits{Total: 3, PerAddr: 2}, Options{})
	defer l.Close()
	ln := l.Listener(inner)
	defer ln.Close()
	addr := ln.Addr().String()
	accepted := make(chan net.Conn, 10)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer ln.Close()
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				close(accepted)
				return
			}
			accepted <- c
		}
	})
	accept := func(from string) net.Conn {
		t.Helper()
		select {
		case c := <-accepted:
			if got := c.RemoteAddr().(*net.TCPAddr).IP.String(); got != from {
				t.Fatalf("accepted a connection from %s, want %s", got, from)
			}
			return c
		case <-time.After(30 * time.Second):
			t.Fatalf("no connection from %s accepted", from)
			return nil
		}
	}
	// refused dials from src and checks the connection is closed at once
	// (the reset may even beat the end of connect).
	refused := func(src string) {
		t.Helper()
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 10 * time.Second}
		c, err := d.DialContext(t.Context(), "tcp", addr)
		if err != nil {
			if !errors.Is(err, syscall.ECONNRESET) {
				t.Fatalf("dial from %s: %v, want it refused with a reset", src, err)
			}
			return
		}
		defer c.Close()
		_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
		n, err := c.Read(make([]byte, 1))
		if n != 0 || !errors.Is(err, syscall.ECONNRESET) {
			t.Fatalf("read of a refused connection from %s = %d, %v; want a reset at once", src, n, err)
		}
	}
	dialFrom(t, "127.0.0.2", addr)
	s1 := accept("127.0.0.2")
	dialFrom(t, "127.0.0.2", addr)
	accept("127.0.0.2")
	refused("127.0.0.2") // a third from 127.0.0.2
	dialFrom(t, "127.0.0.3", addr)
	accept("127.0.0.3")  // Accept went on past the refused one
	refused("127.0.0.4") // a fourth in all
	s1.Close()
	dialFrom(t, "127.0.0.2", addr)
	accept("127.0.0.2")
	if st := l.Stats(); st.Open != 3 || st.Refused != 2 {
		t.Errorf("Stats = %+v, want 3 open, 2 refused", st)
	}
	if _, ok := s1.(io.ReaderFrom); !ok {
		t.Error("the accepted connection lost ReadFrom (sendfile)")
	}
	if _, ok := s1.(interface{ CloseWrite() error }); !ok {
		t.Error("the accepted connection lost CloseWrite")
	}
}

// logRecords keeps the records logged.
type logRecords struct {
	mu  sync.Mutex
	got []slog.Record
}

func (h *logRecords) Enabled(context.Context, slog.Level) bool { return true }
func (h *logRecords) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	h.got = append(h.got, r.Clone())
	h.mu.Unlock()
	return nil
}
func (h *logRecords) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *logRecords) WithGroup(string) slog.Handler      { return h }

func (h *logRecords) records() []slog.Record {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]slog.Record(nil), h.got...)
}

func attr(r slog.Record, key string) slog.Value {
	var v slog.Value
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == key {
			v = a.Value
			return false
		}
		return true
	})
	return v
}

// TestRefusalLog: a flood of refusals is one line at once and one summary
// per interval, counting every refusal; after a quiet interval the next
// refusal is logged at once again; Close writes what is pending.
func TestRefusalLog(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := &logRecords{}
		l := New(Limits{PerAddr: 1}, Options{Log: slog.New(h)})
		if _, err := l.Take(tcp("192.0.2.1")); err != nil {
			t.Fatal(err)
		}
		flood := func(n int) {
			for i := range n {
				if _, err := l.Take(tcp("192.0.2.1")); !errors.Is(err, ErrPerAddr) {
					t.Fatalf("refusal %d = %v", i, err)
				}
			}
		}
		flood(1000)
		if got := h.records(); len(got) != 1 || got[0].Message != "connection refused" || attr(got[0], "addr").String() != "192.0.2.1" {
			t.Fatalf("records after 1000 refusals = %v, want the first one only", got)
		}
		time.Sleep(DefaultLogEvery)
		synctest.Wait()
		got := h.records()
		if len(got) != 2 || got[1].Message != "connections refused" || attr(got[1], "count").Int64() != 999 || attr(got[1], "addrs").Int64() != 1 {
			t.Fatalf("records after the interval = %v, want a summary of the other 999", got)
		}
		// A flood going on: one summary per interval.
		for range 3 {
			flood(500)
			time.Sleep(DefaultLogEvery / 2)
			flood(500)
			time.Sleep(DefaultLogEvery / 2)
			synctest.Wait()
		}
		got = h.records()
		if len(got) != 5 {
			t.Fatalf("%d records after three more intervals of refusals, want 5", len(got))
		}
		for _, r := range got[2:] {
			if attr(r, "count").Int64() != 1000 {
				t.Errorf("summary %v, want 1000 refusals each", r)
			}
		}
		// Quiet, then one refusal: logged at once.
		time.Sleep(time.Minute)
		flood(3)
		if got := h.records(); len(got) != 6 || got[5].Message != "connection refused" {
			t.Fatalf("records after a quiet minute = %d, want the first refusal logged at once", len(got))
		}
		l.Close()
		got = h.records()
		if len(got) != 7 || attr(got[6], "count").Int64() != 2 {
			t.Fatalf("records after Close = %v, want the pending 2 summed up", got)
		}
		time.Sleep(time.Minute)
		flood(10) // counted, not logged
		time.Sleep(time.Minute)
		synctest.Wait()
		if n := len(h.records()); n != 7 {
			t.Errorf("%d records after Close, want no more", n)
		}
		if st := l.Stats(); st.Refused != 4013 {
			t.Errorf("Stats.Refused = %d, want 4013", st.Refused)
		}
	})
}
