package nodetest

import (
	"net"
	"net/netip"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
)

// ServeHello listens on addr (port 0: any) and answers "hello\n" to every
// connection, then closes it, until the test ends.
func ServeHello(t testing.TB, addr netip.AddrPort) netip.AddrPort {
	t.Helper()
	ln, err := net.Listen("tcp", addr.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = c.Write([]byte("hello\n"))
			c.Close()
		}
	}()
	return ln.Addr().(*net.TCPAddr).AddrPort()
}

// ConnectAs tries a TCP connection to addr as uid (and gid uid, no
// supplementary groups, as a server runs) with bash's /dev/tcp, and
// returns bash's error output: "" when it connected.
func ConnectAs(t testing.TB, uid uint32, addr netip.AddrPort) string {
	t.Helper()
	cmd := exec.Command("bash", "-c", "exec 3<>/dev/tcp/"+addr.Addr().String()+"/"+strconv.Itoa(int(addr.Port())))
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid, Groups: []uint32{}}}
	cmd.Dir = "/"
	out, err := cmd.CombinedOutput()
	if err == nil {
		return ""
	}
	if len(out) == 0 {
		return err.Error()
	}
	return string(out)
}
