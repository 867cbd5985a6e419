package node

import (
	"net"
	"slices"
	"testing"
)

// TestListeningPorts: a port listened on (IPv4 and IPv6) is in the list
// when in the range; the local port of a connected socket, which listens
// on nothing, is not.
func TestListeningPorts(t *testing.T) {
	l4, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l4.Close()
	p4 := l4.Addr().(*net.TCPAddr).Port
	got, err := ListeningPorts(PortRange{First: p4, Last: p4})
	if err != nil || !slices.Equal(got, []int{p4}) {
		t.Errorf("ListeningPorts(%d-%d) = %v, %v; want [%d]", p4, p4, got, err, p4)
	}
	if l6, err := net.Listen("tcp6", "[::1]:0"); err == nil {
		defer l6.Close()
		p6 := l6.Addr().(*net.TCPAddr).Port
		lo, hi := min(p4, p6), max(p4, p6)
		got, err := ListeningPorts(PortRange{First: lo, Last: hi})
		if err != nil || !slices.Contains(got, p4) || !slices.Contains(got, p6) {
			t.Errorf("ListeningPorts(%d-%d) = %v, %v; want %d and %d among them", lo, hi, got, err, p4, p6)
		}
	}
	c, err := net.Dial("tcp4", l4.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cp := c.LocalAddr().(*net.TCPAddr).Port
	if got, err := ListeningPorts(PortRange{First: cp, Last: cp}); err != nil || len(got) != 0 {
		t.Errorf("ListeningPorts of a connected socket's port %d = %v, %v; want none", cp, got, err)
	}
}
