package sftp

import (
	"bufio"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/kilnhq/kiln/internal/store/storetest"
)

// dialPending connects from the loopback address src and reads the
// server's version line: the connection was accepted and counts as not
// logged in.
func (e *env) dialPending(src string) net.Conn {
	e.t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 10 * time.Second}
	c, err := d.DialContext(e.t.Context(), "tcp", e.addr)
	if err != nil {
		e.t.Fatalf("dial from %s: %v", src, err)
	}
	e.t.Cleanup(func() { c.Close() })
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "SSH-2.0-Kiln") {
		e.t.Fatalf("the server's version line to %s = %q, %v", src, line, err)
	}
	return c
}

// dialRefused connects from src and checks the connection is closed at
// once, before the server says anything (the reset may even beat the end
// of connect).
func (e *env) dialRefused(src string) {
	e.t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 10 * time.Second}
	c, err := d.DialContext(e.t.Context(), "tcp", e.addr)
	if err != nil {
		if !errors.Is(err, syscall.ECONNRESET) {
			e.t.Fatalf("dial from %s: %v, want it refused with a reset", src, err)
		}
		return
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	b, err := io.ReadAll(c)
	if len(b) != 0 || !errors.Is(err, syscall.ECONNRESET) {
		e.t.Fatalf("a connection from %s over the cap read %q, %v; want a reset and nothing else", src, b, err)
	}
}

// waitPending waits until n connections count as not logged in.
func (e *env) waitPending(n int64) {
	e.t.Helper()
	for deadline := time.Now().Add(30 * time.Second); e.srv.Stats().Unauthenticated != n; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			e.t.Fatalf("%d connections not logged in, want %d", e.srv.Stats().Unauthenticated, n)
		}
	}
}

// TestUnauthenticatedCaps: connections not logged in yet are capped per
// address and in all; one over a cap is reset before the handshake; a
// login gives its place back (sessions are not counted), and so does a
// connection that closes or misses the login deadline.
func TestUnauthenticatedCaps(t *testing.T) {
	e := newEnv(t, storetest.SQLite(t), Config{MaxUnauthenticated: 3, MaxUnauthenticatedPerAddr: 2, HandshakeTimeout: time.Hour})
	sv, _ := e.newServer("flood")
	c := e.creds(sv.ID, false)
	p1 := e.dialPending("127.0.0.2")
	e.dialPending("127.0.0.2")
	e.dialRefused("127.0.0.2") // a third from 127.0.0.2
	e.dialPending("127.0.0.3")
	e.dialRefused("127.0.0.4") // a fourth in all
	if _, _, err := e.dial(c.ComputedUsername, c.Password); err == nil {
		t.Fatal("a login got in over the cap of connections not logged in")
	}
	if st := e.srv.Stats(); st.Unauthenticated != 3 || st.Refused != 3 {
		t.Errorf("Stats = %+v, want 3 not logged in, 3 refused", st)
	}
	p1.Close()
	e.waitPending(2)
	// Logged-in sessions leave their place: three in a row with one left.
	for range 3 {
		e.mustDial(c)
	}
	e.waitPending(2)
	if st := e.srv.Stats(); st.Sessions != 3 {
		t.Errorf("Stats = %+v, want 3 sessions", st)
	}

	// The login deadline closes a connection that says nothing.
	e.restart(Config{MaxUnauthenticated: 3, MaxUnauthenticatedPerAddr: 2, HandshakeTimeout: 50 * time.Millisecond})
	silent := e.dialPending("127.0.0.2")
	_ = silent.SetReadDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.ReadAll(silent); err != nil && !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("a connection past the login deadline: %v, want it closed by the server", err)
	}
	e.waitPending(0)
}

// flakyListener fails its first accepts as a process out of descriptors
// does (EMFILE), then accepts.
type flakyListener struct {
	net.Listener
	fails atomic.Int32
}

func (l *flakyListener) Accept() (net.Conn, error) {
	if l.fails.Add(-1) >= 0 {
		return nil, &net.OpError{Op: "accept", Net: "tcp", Addr: l.Addr(), Err: os.NewSyscallError("accept4", syscall.EMFILE)}
	}
	return l.Listener.Accept()
}

// TestAcceptErrorsTransient: accept errors such as EMFILE (descriptors
// exhausted) do not end Serve (it used to return, and kiln serve stopped
// everything): it waits and accepts again; only a closed listener ends it.
func TestAcceptErrorsTransient(t *testing.T) {
	e := newEnv(t, storetest.SQLite(t), Config{})
	sv, _ := e.newServer("emfile")
	c := e.creds(sv.ID, false)
	e.stop()
	ln, err := net.Listen("tcp", e.addr)
	if err != nil {
		t.Fatal(err)
	}
	fl := &flakyListener{Listener: ln}
	fl.fails.Store(8) // 5 ms doubling: 1.3 s of waits in all
	e.start(fl, Config{})
	e.mustDial(c)
	if n := fl.fails.Load(); n >= 0 {
		t.Fatalf("%d failures left, want all 8 seen", n+1)
	}
	// A listener closed under Serve ends it with an error.
	srv, err := NewServer(e.svc, Config{DataDir: t.TempDir()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed.Close()
	if err := srv.Serve(t.Context(), closed); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Serve on a closed listener = %v, want net.ErrClosed", err)
	}
}
