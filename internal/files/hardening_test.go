package files

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/kilnhq/kiln/internal/validate"
)

// TestChmodKeepsServersUsable: the root's mode cannot be changed, a
// directory keeps its owner's rwx whatever is asked, and a file with
// other hard links (perhaps outside the root) is never changed.
func TestChmodKeepsServersUsable(t *testing.T) {
	r, dir := newRoot(t)
	write(t, dir, "plugins/a.yml", "a")
	if err := r.Chmod(".", 0o000); !isValidation(err) {
		t.Errorf("Chmod(root) = %v, want a validation error", err)
	}
	for _, m := range []os.FileMode{0o000, 0o055, 0o500, 0o644} {
		if err := r.Chmod("plugins", m); err != nil {
			t.Fatalf("Chmod(plugins, %o) = %v", m, err)
		}
		fi, _ := os.Lstat(filepath.Join(dir, "plugins"))
		if got, want := fi.Mode().Perm(), m|0o700; got != want {
			t.Errorf("Chmod(plugins, %o): mode %o, want %o (owner rwx kept)", m, got, want)
		}
	}
	// A file may be made unreadable by its owner (that is the user's
	// choice); deleting it stays possible through its directory.
	if err := r.Chmod("plugins/a.yml", 0o000); err != nil {
		t.Fatal(err)
	}
	if err := r.Delete("plugins"); err != nil {
		t.Errorf("Delete after chmod 000 = %v", err)
	}

	// A hard link planted by a game server to a file outside the root.
	outside := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(outside, []byte("host secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(outside, filepath.Join(dir, "planted")); err != nil {
		t.Skipf("SKIP hard-link cases: the temporary directories are on different file systems: %v", err)
	}
	if err := r.Chmod("planted", 0o644); !errors.Is(err, ErrHardLink) {
		t.Errorf("Chmod(hard link) = %v, want ErrHardLink", err)
	}
	if fi, _ := os.Stat(outside); fi.Mode().Perm() != 0o600 {
		t.Errorf("the outside file's mode became %o", fi.Mode().Perm())
	}
	if _, _, err := r.OpenRead("planted"); !errors.Is(err, ErrHardLink) {
		t.Errorf("OpenRead(hard link) = %v, want ErrHardLink", err)
	}
	if _, err := r.ReadFile("planted", 1<<20); !errors.Is(err, ErrHardLink) {
		t.Errorf("ReadFile(hard link) = %v, want ErrHardLink", err)
	}
	if _, err := r.Copy("planted", budget(1<<20)); !errors.Is(err, ErrHardLink) {
		t.Errorf("Copy(hard link) = %v, want ErrHardLink", err)
	}
	// Deleting the link removes the name, never the outside file.
	if err := r.Delete("planted"); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(outside); err != nil || string(b) != "host secret" {
		t.Errorf("outside file after deleting the link = %q, %v", b, err)
	}
}

func isValidation(err error) bool {
	_, ok := errors.AsType[*validate.Error](err)
	return ok
}

// TestDeleteWhateverTheModes: a tree whose directories a game server made
// 000 (and deeper than PATH_MAX) is deleted, by descriptor.
func TestDeleteWhateverTheModes(t *testing.T) {
	r, dir := newRoot(t)
	write(t, dir, "w/a/b/c.dat", "x")
	fd, err := unix.Open(filepath.Join(dir, "w"), unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	name := strings.Repeat("d", 200)
	for range 40 { // 40 × 201 bytes: past PATH_MAX
		if err := unix.Mkdirat(fd, name, 0o755); err != nil {
			t.Fatal(err)
		}
		nfd, err := unix.Openat(fd, name, unix.O_RDONLY|unix.O_DIRECTORY, 0)
		unix.Close(fd)
		if err != nil {
			t.Fatal(err)
		}
		fd = nfd
	}
	unix.Close(fd)
	for _, p := range []string{"w/a/b", "w/a", "w"} {
		os.Chmod(filepath.Join(dir, p), 0o000)
	}
	if err := r.Delete("w"); err != nil {
		t.Fatalf("Delete = %v", err)
	}
	if _, err := os.Lstat(filepath.Join(dir, "w")); !os.IsNotExist(err) {
		t.Errorf("w still there: %v", err)
	}
}
