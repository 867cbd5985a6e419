package main

import (
	"net"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestPing: kiln ping answers with what a Minecraft server says in its
// server list (here the bundled test server), and a closed port fails.
func TestPing(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	srv := exec.Command(kilnBin, "testserver", "--host", "127.0.0.1", "--port", strconv.Itoa(port), "--dir", t.TempDir(),
		"--motd", "Hello from the test", "--startup-delay", "0s")
	stdin, _ := srv.StdinPipe()
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stdin.Close(); _ = srv.Process.Kill(); _ = srv.Wait() })
	addr := "127.0.0.1:" + strconv.Itoa(port)
	var out, errOut string
	var code int
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if out, errOut, code = kiln(t, "ping", addr); code == 0 {
			break
		}
	}
	if code != 0 || !strings.HasPrefix(out, "Hello from the test\n") || !strings.Contains(out, "players") {
		t.Errorf("kiln ping = %d %q %q", code, out, errOut)
	}
	stdin.Close()
	_ = srv.Process.Kill()
	_ = srv.Wait()
	if _, errOut, code := kiln(t, "ping", addr, "--timeout", "1s"); code != 1 || !strings.Contains(errOut, "ping "+addr) {
		t.Errorf("kiln ping of a closed port = %d %q; want exit 1 naming it", code, errOut)
	}
	if _, _, code := kiln(t, "ping", "nonsense"); code != 2 {
		t.Errorf("kiln ping nonsense = exit %d, want 2", code)
	}
}
