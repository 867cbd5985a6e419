package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/kilnhq/kiln/internal/store/storetest"
)

// A second kiln serve on a data dir that one already serves is refused at
// once, naming the holder, with SQLite and with PostgreSQL (the data dir
// still holds the server roots).
func TestOneServePerDataDir(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) { oneServePerDataDir(t) })
	t.Run("postgres", func(t *testing.T) { oneServePerDataDir(t, "--database-url", storetest.PostgresURL(t)) })
}

func oneServePerDataDir(t *testing.T, extra ...string) {
	dir := t.TempDir()
	args := append([]string{"--data-dir", dir}, extra...)
	first := startServe(t, args...)
	if b, err := os.ReadFile(filepath.Join(dir, "kiln.lock")); err != nil || strings.TrimSpace(string(b)) != fmt.Sprint(first.cmd.Process.Pid) {
		t.Errorf("kiln.lock holds %q, %v; want the pid %d", b, err, first.cmd.Process.Pid)
	}
	out, errOut, code := kiln(t, append([]string{"serve", "--addr", "127.0.0.1:0", "--sftp-addr", "127.0.0.1:0"}, args...)...)
	want := fmt.Sprintf("kiln: data dir %s is in use by another kiln serve (pid %d); stop it or pass another --data-dir\n", dir, first.cmd.Process.Pid)
	if code != 1 || !strings.HasSuffix(errOut, want) {
		t.Errorf("second kiln serve: exit %d, stderr %q; want exit 1 ending in %q", code, errOut, want)
	}
	if strings.Contains(errOut, "kiln serving") || out != "" {
		t.Errorf("the refused process went on: stdout %q, stderr %q", out, errOut)
	}
	// The first one is untouched, and its lock ends with it.
	if status, _, _ := get(t, first.addr, "/healthz", ""); status != 200 {
		t.Errorf("first kiln serve after the refusal: /healthz %d", status)
	}
	if err := first.stop(syscall.SIGTERM); err != nil {
		t.Fatalf("first kiln serve: %v\n%s", err, first.Stderr())
	}
	second := startServe(t, args...)
	if err := second.stop(syscall.SIGTERM); err != nil {
		t.Errorf("kiln serve after the first stopped: %v\n%s", err, second.Stderr())
	}
}
