package sftp

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kilnhq/kiln/internal/store"
	"github.com/kilnhq/kiln/internal/store/storetest"
)

// TestOpenSSHClient drives the server with OpenSSH's own sftp client, as
// a user would: uploads and downloads, resumed transfers, renames over a
// file, removals, directories, modes, links inside and outside, ".."
// paths, and the logins that must fail.
func TestOpenSSHClient(t *testing.T) {
	needClients(t)
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		e := newEnv(t, db, Config{})
		sv, root := e.newServer("one")
		other, _ := e.newServer("two")
		c := e.creds(sv.ID, false)
		local := t.TempDir()
		big := writeRandom(t, filepath.Join(local, "big.bin"), 3<<20+123, 1)
		writeRandom(t, filepath.Join(local, "small.txt"), 1000, 2)

		t.Run("upload and download", func(t *testing.T) {
			e.mustOpenSSH(c, local, "put big.bin\nmkdir plugins\nput small.txt plugins/small.txt\nget big.bin back.bin\n")
			if got := mustRead(t, root, "big.bin"); !bytes.Equal(got, big) {
				t.Fatalf("uploaded big.bin: %d bytes, want %d identical", len(got), len(big))
			}
			if got := mustRead(t, local, "back.bin"); !bytes.Equal(got, big) {
				t.Fatalf("downloaded back.bin: %d bytes, want %d identical", len(got), len(big))
			}
			out := e.mustOpenSSH(c, local, "ls -l plugins\n")
			if !strings.Contains(out, "small.txt") {
				t.Errorf("ls plugins = %q, want small.txt", out)
			}
		})

		t.Run("resume upload and download", func(t *testing.T) {
			// A partial upload (the first MiB), finished by reput.
			if err := os.WriteFile(filepath.Join(root, "resume.bin"), big[:1<<20], 0o644); err != nil {
				t.Fatal(err)
			}
			e.mustOpenSSH(c, local, "reput big.bin resume.bin\n")
			if got := mustRead(t, root, "resume.bin"); !bytes.Equal(got, big) {
				t.Fatalf("reput: %d bytes, want %d identical", len(got), len(big))
			}
			if err := os.WriteFile(filepath.Join(local, "part.bin"), big[:2<<20], 0o644); err != nil {
				t.Fatal(err)
			}
			e.mustOpenSSH(c, local, "reget big.bin part.bin\n")
			if got := mustRead(t, local, "part.bin"); !bytes.Equal(got, big) {
				t.Fatalf("reget: %d bytes, want %d identical", len(got), len(big))
			}
		})

		t.Run("rename over a file", func(t *testing.T) {
			e.mustOpenSSH(c, local, "put small.txt a.txt\nput big.bin b.txt\nrename a.txt b.txt\n")
			if _, err := os.Lstat(filepath.Join(root, "a.txt")); !os.IsNotExist(err) {
				t.Errorf("a.txt still there after rename: %v", err)
			}
			if got := mustRead(t, root, "b.txt"); len(got) != 1000 {
				t.Errorf("b.txt after rename over it: %d bytes, want 1000", len(got))
			}
		})

		t.Run("remove mkdir rmdir chmod", func(t *testing.T) {
			e.mustOpenSSH(c, local, "mkdir d\nmkdir d/e\nput small.txt d/e/f.txt\nchmod 600 d/e/f.txt\n")
			fi, err := os.Stat(filepath.Join(root, "d/e/f.txt"))
			if err != nil || fi.Mode().Perm() != 0o600 {
				t.Fatalf("chmod 600: %v %v", fi, err)
			}
			if out, err := e.openssh(c, local, "rmdir d/e\n"); err == nil {
				t.Errorf("rmdir of a non-empty directory succeeded: %s", out)
			}
			if out, err := e.openssh(c, local, "chmod 4755 d/e/f.txt\n"); err == nil {
				t.Errorf("chmod 4755 succeeded: %s", out)
			}
			e.mustOpenSSH(c, local, "rm d/e/f.txt\nrmdir d/e\nrmdir d\n")
			if _, err := os.Lstat(filepath.Join(root, "d")); !os.IsNotExist(err) {
				t.Errorf("d still there: %v", err)
			}
		})

		t.Run("symlinks", func(t *testing.T) {
			for _, target := range []string{"../../../../etc/passwd", "../outside", "/../../etc"} {
				if out, err := e.openssh(c, local, "symlink "+target+" evil\n"); err == nil {
					if l, err := os.Readlink(filepath.Join(root, "evil")); err == nil && !strings.HasPrefix(l, "..") {
						os.Remove(filepath.Join(root, "evil"))
						continue // "/../../etc" is the server's /etc: inside
					}
					t.Errorf("symlink to %s succeeded: %s", target, out)
				}
			}
			e.mustOpenSSH(c, local, "symlink plugins/small.txt link.txt\nget link.txt vialink.txt\n")
			if l, err := os.Readlink(filepath.Join(root, "link.txt")); err != nil || l != "plugins/small.txt" {
				t.Errorf("link.txt -> %q (%v), want plugins/small.txt", l, err)
			}
			if got := mustRead(t, local, "vialink.txt"); len(got) != 1000 {
				t.Errorf("read through an inside link: %d bytes", len(got))
			}
			// A link planted outside by the game server is not followed.
			if err := os.Symlink("/etc", filepath.Join(root, "planted")); err != nil {
				t.Fatal(err)
			}
			if out, err := e.openssh(c, local, "get planted/passwd x\n"); err == nil {
				t.Errorf("read through a link leading out succeeded: %s", out)
			}
			if out, err := e.openssh(c, local, "put small.txt planted/x\n"); err == nil {
				t.Errorf("write through a link leading out succeeded: %s", out)
			}
		})

		t.Run("dot-dot paths stay inside", func(t *testing.T) {
			out, err := e.openssh(c, local, "get ../../../../etc/passwd pw\n")
			if err == nil {
				t.Errorf("get ../../etc/passwd succeeded: %s", out)
			}
			out = e.mustOpenSSH(c, local, "cd ../../..\npwd\nls\n")
			if !strings.Contains(out, "Remote working directory: /") || !strings.Contains(out, "big.bin") {
				t.Errorf("cd ../../.. left the root: %s", out)
			}
		})

		t.Run("wrong logins", func(t *testing.T) {
			bad := c
			bad.Password = "wrong" + c.Password[5:]
			if out, err := e.openssh(bad, local, "ls\n"); err == nil {
				t.Errorf("login with a wrong password succeeded: %s", out)
			}
			// Another server's username with this server's password.
			oc := e.creds(other.ID, false)
			mixed := c
			mixed.ComputedUsername = oc.ComputedUsername
			if out, err := e.openssh(mixed, local, "ls\n"); err == nil {
				t.Errorf("login as another server's user with this password succeeded: %s", out)
			}
			// The other server's own credentials land in its root.
			out := e.mustOpenSSH(oc, local, "ls\n")
			if strings.Contains(out, "big.bin") {
				t.Errorf("the other server's login sees this server's files: %s", out)
			}
		})
	})
}
