package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kilnhq/kiln/internal/servers/serverstest"
)

// TestSFTPLogin, as the README shows it: credentials from the API, then
// OpenSSH's sftp (password through sshpass) into kiln serve's listener —
// an upload lands in the server's root, a listing shows it, and `..`
// does not lead out. After a rotation the old password is refused.
func TestSFTPLogin(t *testing.T) {
	for _, tool := range []string{"sftp", "sshpass"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("KILN_REQUIRE_SFTP_CLIENT") == "1" {
				t.Fatalf("%s not installed but KILN_REQUIRE_SFTP_CLIENT=1", tool)
			}
			t.Skipf("SKIP SFTP CLIENT: %s is not installed (scripts/test installs openssh-client and sshpass)", tool)
		}
	}
	dir := t.TempDir()
	ports := serverstest.PortRange(t, 5)
	p := startServe(t, "--data-dir", dir, "--dev", "--port-range", ports.String())
	// Logged once servers are recovered, beside "kiln serving" (and the
	// log is flushed every 100 ms).
	sftpRE := regexp.MustCompile(`msg="sftp serving" addr=127\.0\.0\.1:(\d+)`)
	var m []string
	for deadline := time.Now().Add(30 * time.Second); m == nil && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		m = sftpRE.FindStringSubmatch(p.Stderr())
	}
	if m == nil {
		t.Fatalf("no sftp serving line:\n%s", p.Stderr())
	}
	port := m[1]
	token := strings.TrimSpace(string(must(os.ReadFile(filepath.Join(dir, "bootstrap-token")))))
	code, out := call(t, p.addr, token, "POST", "/servers", `{"name":"files","software":"kiln-test","memory_mb":256,"disk_mb":1024}`)
	if code != 202 {
		t.Fatalf("create: %d %v", code, out)
	}
	id := out["server"].(map[string]any)["id"].(string)
	waitServer(t, p.addr, token, id, "offline")
	code, cred := call(t, p.addr, token, "GET", "/servers/"+id+"/sftp", "")
	if code != 200 || strconv.Itoa(int(cred["port"].(float64))) != port {
		t.Fatalf("credentials = %d %v; want port %s", code, cred, port)
	}
	local := filepath.Join(t.TempDir(), "plugin.jar")
	if err := os.WriteFile(local, []byte("a plugin"), 0o644); err != nil {
		t.Fatal(err)
	}
	sftpBatch := func(password, batch string) (string, error) {
		cmd := exec.Command("sshpass", "-p", password, "sftp", "-o", "BatchMode=no", "-b", "-", "-P", port,
			"-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR",
			"-o", "PubkeyAuthentication=no", cred["computedUsername"].(string)+"@127.0.0.1")
		cmd.Stdin = strings.NewReader(batch)
		b, err := cmd.CombinedOutput()
		return string(b), err
	}
	outp, err := sftpBatch(cred["password"].(string), "mkdir plugins\nput "+local+" plugins/plugin.jar\nls plugins\ncd ..\nls\n")
	if err != nil {
		t.Fatalf("sftp session: %v\n%s\n%s", err, outp, p.Stderr())
	}
	if b, err := os.ReadFile(filepath.Join(dir, "servers", id, "plugins", "plugin.jar")); err != nil || string(b) != "a plugin" {
		t.Errorf("uploaded file in the root = %q, %v", b, err)
	}
	if strings.Contains(outp, "bin") || strings.Contains(outp, "etc") {
		t.Errorf("`cd ..` listed something outside the server's root:\n%s", outp)
	}
	code, rot := call(t, p.addr, token, "POST", "/servers/"+id+"/sftp", `{"rotate":true}`)
	if code != 200 || rot["password"] == cred["password"] {
		t.Fatalf("rotate = %d %v", code, rot)
	}
	if outp, err := sftpBatch(cred["password"].(string), "ls\n"); err == nil {
		t.Errorf("the old password still logs in after a rotation:\n%s", outp)
	}
	if outp, err := sftpBatch(rot["password"].(string), "ls plugins\n"); err != nil || !strings.Contains(outp, "plugin.jar") {
		t.Errorf("the new password: %v\n%s", err, outp)
	}
	if err := p.stop(os.Interrupt); err != nil {
		t.Errorf("stop: %v\n%s", err, p.Stderr())
	}
}
