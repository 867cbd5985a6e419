package netguardtest

import (
	"net"
	"testing"
	"time"
)

// Recorder is a TCP listener that records the connections it accepts and
// closes them.
type Recorder struct {
	ln       net.Listener
	accepted chan string // remote addresses, in accept order
}

// Listen starts a Recorder on addr (a loopback address; port 0 for any).
// It skips the test, saying why, when the address cannot be bound here.
// The listener closes when the test ends.
func Listen(t testing.TB, addr string) *Recorder {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("SKIP: listen %s: %v (this test needs that loopback address)", addr, err)
	}
	r := &Recorder{ln: ln, accepted: make(chan string, 64)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			select {
			case r.accepted <- c.RemoteAddr().String():
			default:
			}
			c.Close()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
	})
	return r
}

// Addr is the address the Recorder listens on (host:port).
func (r *Recorder) Addr() string { return r.ln.Addr().String() }

// Port is the port the Recorder listens on.
func (r *Recorder) Port() int { return r.ln.Addr().(*net.TCPAddr).Port }

// AssertNoConnection proves that r has accepted no connection so far: it
// connects to r itself and checks that its own connection is the first r
// accepts. The kernel queues completed connections in order, so one made
// earlier would be accepted first — no sleeping, no counting after the
// fact.
func (r *Recorder) AssertNoConnection(t testing.TB) {
	t.Helper()
	c, err := net.Dial("tcp", r.ln.Addr().String())
	if err != nil {
		t.Fatalf("probe %s: %v", r.ln.Addr(), err)
	}
	defer c.Close()
	select {
	case got := <-r.accepted:
		if want := c.LocalAddr().String(); got != want {
			t.Errorf("listener %s accepted a connection from %s before the probe from %s: the refused address was connected", r.ln.Addr(), got, want)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("listener %s did not accept the probe within 10s", r.ln.Addr())
	}
}
