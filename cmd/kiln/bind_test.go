package main

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A taken port fails the start before the database is created and before
// the bootstrap token (shown once) is made and printed.
func TestTakenPortFailsBeforeBootstrap(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	dir := t.TempDir()
	out, errOut, code := kiln(t, "serve", "--data-dir", dir, "--addr", taken.Addr().String(), "--sftp-addr", "127.0.0.1:0")
	if code == 0 || !strings.Contains(errOut, "listen on "+taken.Addr().String()) {
		t.Errorf("kiln serve on a taken port: exit %d, stderr %q; want non-zero naming the address", code, errOut)
	}
	if tokenRE.MatchString(out) || tokenRE.MatchString(errOut) || strings.Contains(out, "first token") {
		t.Errorf("a token was printed:\n%s", out)
	}
	for _, name := range []string{"bootstrap-token", "kiln.db"} {
		if _, err := os.Stat(filepath.Join(dir, name)); !os.IsNotExist(err) {
			t.Errorf("%s after the failed start: %v, want it absent", name, err)
		}
	}
}

// A taken SFTP port fails the start as a taken API port does.
func TestTakenSFTPPortFailsBeforeBootstrap(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	dir := t.TempDir()
	_, errOut, code := kiln(t, "serve", "--data-dir", dir, "--addr", "127.0.0.1:0", "--sftp-addr", taken.Addr().String())
	if code == 0 || !strings.Contains(errOut, "--sftp-addr") {
		t.Errorf("kiln serve on a taken SFTP port: exit %d, stderr %q; want non-zero naming --sftp-addr", code, errOut)
	}
	if _, err := os.Stat(filepath.Join(dir, "kiln.db")); !os.IsNotExist(err) {
		t.Errorf("kiln.db after the failed start: %v, want it absent", err)
	}
}
