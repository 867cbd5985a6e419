package instance_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kilnhq/kiln/internal/instance"
)

func TestLockDirIsExclusive(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data") // created by LockDir
	first, err := instance.LockDir(dir, 4242)
	if err != nil {
		t.Fatalf("LockDir: %v", err)
	}
	b, err := os.ReadFile(filepath.Join(dir, instance.LockFile))
	if err != nil || strings.TrimSpace(string(b)) != "4242" {
		t.Fatalf("lock file holds %q, %v; want the pid 4242", b, err)
	}
	// flock is per open file: a second open in this process conflicts as
	// another process's would.
	_, err = instance.LockDir(dir, 1)
	inUse, ok := errors.AsType[*instance.InUseError](err)
	if !ok || inUse.PID != 4242 || inUse.Dir != dir {
		t.Fatalf("second LockDir = %v, want *InUseError naming pid 4242 and %s", err, dir)
	}
	if want := "data dir " + dir + " is in use by another kiln serve (pid 4242)"; err.Error() != want {
		t.Errorf("error = %q, want %q", err, want)
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	again, err := instance.LockDir(dir, 7)
	if err != nil {
		t.Fatalf("LockDir after Close: %v", err)
	}
	defer again.Close()
	if b, _ := os.ReadFile(filepath.Join(dir, instance.LockFile)); strings.TrimSpace(string(b)) != "7" {
		t.Errorf("lock file holds %q after the second holder, want 7", b)
	}
}
