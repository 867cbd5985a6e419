package sftp

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pkg/sftp"
	"golang.org/x/crypto/ssh"

	"github.com/kilnhq/kiln/internal/auth"
	"github.com/kilnhq/kiln/internal/quota"
	"github.com/kilnhq/kiln/internal/servers"
	"github.com/kilnhq/kiln/internal/store"
	"github.com/kilnhq/kiln/internal/store/storetest"
)

// TestCredentials: get-or-create per (token, server), the seed's fields,
// a rotation, another team's server, and the password sealed at rest.
func TestCredentials(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		e := newEnv(t, db, Config{})
		sv, _ := e.newServer("creds")
		c := e.creds(sv.ID, false)
		prefix := strings.ReplaceAll(sv.ID, "-", "")[:8]
		want := Credentials{Username: "alice", Password: c.Password, ComputedUsername: "alice." + prefix,
			Host: "127.0.0.1", Port: e.port, URI: fmt.Sprintf("sftp://alice.%s@127.0.0.1:%d", prefix, e.port)}
		if c != want {
			t.Errorf("Credentials = %+v, want %+v", c, want)
		}
		if len(c.Password) != passwordLen {
			t.Errorf("password of %d characters, want %d", len(c.Password), passwordLen)
		}
		if again := e.creds(sv.ID, false); again != c {
			t.Errorf("a second get = %+v, want the same %+v", again, c)
		}
		var sealed string
		if err := db.Read().QueryRowContext(t.Context(), `SELECT password_sealed FROM sftp_credentials`).Scan(&sealed); err != nil {
			t.Fatal(err)
		}
		if strings.Contains(sealed, c.Password) || !strings.HasPrefix(sealed, "v1:") {
			t.Errorf("stored password %q is not sealed", sealed)
		}
		if s := c.LogValue().String(); strings.Contains(s, c.Password) {
			t.Errorf("LogValue shows the password: %s", s)
		}
		r := e.creds(sv.ID, true)
		if r.Password == c.Password || r.ComputedUsername != c.ComputedUsername {
			t.Errorf("rotate = %+v, want a new password for the same user", r)
		}
		if _, _, err := e.dial(c.ComputedUsername, c.Password); err == nil {
			t.Error("the old password still logs in after a rotation")
		}
		sc, conn, err := e.dial(r.ComputedUsername, r.Password)
		if err != nil {
			t.Fatalf("login with the rotated password: %v", err)
		}
		sc.Close()
		conn.Close()

		// Another team's server is not found.
		a := e.auth
		other, err := a.CreateTeam(t.Context(), "other")
		if err != nil {
			t.Fatal(err)
		}
		_, err = e.svc.Credentials(t.Context(), other.ID, e.tokenID, "alice", sv.ID, false)
		if !errors.Is(err, servers.ErrNotFound) {
			t.Errorf("Credentials on another team's server = %v, want servers.ErrNotFound", err)
		}
	})
}

// TestSessionsCut: an open session ends at once when its server is
// deleted, when its credentials are rotated, and when its token is
// revoked (in the database only, as another process does).
func TestSessionsCut(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		e := newEnv(t, db, Config{})
		sv, _ := e.newServer("cut")

		sc := e.mustDial(e.creds(sv.ID, false))
		if _, err := sc.ReadDir("/"); err != nil {
			t.Fatal(err)
		}
		e.creds(sv.ID, true)
		waitEnded(t, sc, "a rotation")

		sc = e.mustDial(e.creds(sv.ID, false))
		if err := e.auth.RevokeToken(t.Context(), e.tokenID); err != nil {
			t.Fatal(err)
		}
		waitEnded(t, sc, "the token's revocation")
		if _, _, err := e.dial(e.creds(sv.ID, false).ComputedUsername, e.creds(sv.ID, false).Password); err == nil {
			t.Error("a revoked token's credentials still log in")
		}

		_, tok, err := e.auth.CreateToken(t.Context(), auth.BootstrapTeam, auth.KindUser, "bob")
		if err != nil {
			t.Fatal(err)
		}
		e.tokenID, e.label = tok.ID, "bob"
		c := e.creds(sv.ID, false)
		sc = e.mustDial(c)
		if err := e.servers.Delete(t.Context(), e.teamID, sv.ID); err != nil {
			t.Fatal(err)
		}
		waitEnded(t, sc, "the server's deletion")
		if _, _, err := e.dial(c.ComputedUsername, c.Password); err == nil {
			t.Error("a deleted server's credentials still log in")
		}
		if st := e.srv.Stats(); st.Cut < 3 || st.Sessions != 0 {
			t.Errorf("Stats = %+v, want 3 cut and none live", st)
		}
	})
}

// TestDeleteAborted: a delete cuts the server's sessions and refuses
// logins from its first hook on; when it fails and the server stays, the
// same credentials log in again (they were not forgotten); when it goes
// through, they are gone with the server's row.
func TestDeleteAborted(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		e := newEnv(t, db, Config{})
		failing := true
		e.servers.OnDelete(func(context.Context, string) error {
			if failing {
				return errors.New("the disk is read-only")
			}
			return nil
		})
		sv, _ := e.newServer("kept")
		c := e.creds(sv.ID, false)
		sc := e.mustDial(c)
		if err := e.servers.Delete(t.Context(), e.teamID, sv.ID); err == nil {
			t.Fatal("Delete succeeded with a failing hook")
		}
		waitEnded(t, sc, "the delete's hooks")
		sc = e.mustDial(c) // the same password: the credentials stayed
		sc.Close()

		// While a delete runs (between its hooks and the row's removal),
		// a login with the right password is refused and not counted as
		// a failure.
		if err := e.svc.RevokeServer(t.Context(), sv.ID); err != nil {
			t.Fatal(err)
		}
		failures := e.srv.Stats().Failures
		for range 12 {
			if _, _, err := e.dial(c.ComputedUsername, c.Password); err == nil {
				t.Fatal("a login into a server being deleted succeeded")
			}
		}
		if st := e.srv.Stats(); st.Failures != failures || st.Lockouts != 0 {
			t.Errorf("Stats = %+v after logins into a server being deleted, want no failure counted (had %d)", st, failures)
		}
		e.svc.DeleteEnded(sv.ID)
		e.mustDial(c).Close()

		failing = false
		if err := e.servers.Delete(t.Context(), e.teamID, sv.ID); err != nil {
			t.Fatal(err)
		}
		if _, _, err := e.dial(c.ComputedUsername, c.Password); err == nil {
			t.Error("a deleted server's credentials still log in")
		}
		var n int
		if err := db.Read().QueryRowContext(t.Context(), `SELECT count(*) FROM sftp_credentials WHERE server_id = $1`, sv.ID).Scan(&n); err != nil || n != 0 {
			t.Errorf("credential rows of the deleted server: %d (%v), want 0", n, err)
		}
		e.svc.sessions.mu.Lock()
		marked := e.svc.sessions.closed[sv.ID]
		e.svc.sessions.mu.Unlock()
		if marked {
			t.Error("the deleted server is still marked closed: a mark kept for the process's life (servers.OnDeleteEnded)")
		}
	})
}

// TestHoldCutsSessions: a restore's hold on the server ends its open
// sessions at once (a file open for writing would take writes the
// restore's swap discards); a session opened during the hold reads, its
// writes are refused with the reason, and after the hold they go through.
func TestHoldCutsSessions(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		e := newEnv(t, db, Config{})
		sv, root := e.newServer("held")
		c := e.creds(sv.ID, false)
		sc := e.mustDial(c)
		f, err := sc.Create("/world.dat")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.Write([]byte("before")); err != nil {
			t.Fatal(err)
		}
		held, err := e.servers.Hold(t.Context(), e.teamID, sv.ID)
		if err != nil {
			t.Fatal(err)
		}
		defer held.Release()
		waitEnded(t, sc, "the restore's hold")
		// The cut session's open file gave back its reservation: a
		// restore waits for none (snapshot's drainWriters).
		a, err := held.Access(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(5 * time.Second); a.Disk.Figures().Writers != 0; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("the disk ledger still counts %d writers after the cut", a.Disk.Figures().Writers)
			}
		}

		sc = e.mustDial(c)
		defer sc.Close()
		if _, err := sc.ReadDir("/"); err != nil {
			t.Fatalf("ReadDir during the hold: %v", err)
		}
		if _, err := sc.Create("/during.txt"); err == nil || !strings.Contains(err.Error(), "a snapshot is being restored into the server") {
			t.Fatalf("Create during the hold = %v, want it refused with the reason", err)
		}
		held.Release()
		g, err := sc.Create("/after.txt")
		if err != nil {
			t.Fatalf("Create after the hold: %v", fmtErr(err))
		}
		if _, err := g.Write([]byte("after")); err != nil {
			t.Fatal(err)
		}
		if err := g.Close(); err != nil {
			t.Fatal(err)
		}
		if b := mustRead(t, root, "after.txt"); string(b) != "after" {
			t.Errorf("after.txt = %q", b)
		}
	})
}

// TestHoldRefusesEveryWrite: while a restore holds the server, every
// request that changes its tree (rename, posix-rename, chmod, utimes,
// truncate, mkdir, rmdir, remove, symlink, open for writing) is refused
// with the reason, as the files API answers 409, and changes nothing;
// reads go on.
// TestKilnNames: SFTP refuses to create, write, rename to or change a
// name in Kiln's namespace (".kiln-tmp-…": its temporary files, staging
// trees and restore journals), and lets its owner remove a look-alike
// Kiln did not make (Kiln leaves those in place).
func TestKilnNames(t *testing.T) {
	e := newEnv(t, storetest.SQLite(t), Config{})
	sv, root := e.newServer("names")
	if err := os.WriteFile(filepath.Join(root, "a.txt"), []byte("a"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(root, ".kiln-tmp-restore-x"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, ".kiln-tmp-old"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	sc := e.mustDial(e.creds(sv.ID, false))
	for _, w := range []struct {
		name string
		op   func() error
	}{
		{"Mkdir", func() error { return sc.Mkdir("/.kiln-tmp-restore-y") }},
		{"Mkdir below", func() error { return sc.Mkdir("/.kiln-tmp-restore-x/tree") }},
		{"Create", func() error { _, err := sc.Create("/.kiln-tmp-restore-x/journal"); return err }},
		{"Rename", func() error { return sc.Rename("/a.txt", "/.kiln-tmp-a") }},
		{"PosixRename", func() error { return sc.PosixRename("/a.txt", "/.kiln-tmp-a") }},
		{"Symlink", func() error { return sc.Symlink("a.txt", "/.kiln-tmp-link") }},
		{"Chmod", func() error { return sc.Chmod("/.kiln-tmp-old", 0o600) }},
	} {
		if err := w.op(); err == nil {
			t.Errorf("%s of a Kiln name succeeded", w.name)
		}
	}
	if _, err := os.Lstat(filepath.Join(root, ".kiln-tmp-restore-x", "journal")); err == nil {
		t.Error("a journal was written through SFTP")
	}
	if err := sc.Remove("/.kiln-tmp-old"); err != nil {
		t.Errorf("Remove of a look-alike: %v", err)
	}
	if err := sc.RemoveDirectory("/.kiln-tmp-restore-x"); err != nil {
		t.Errorf("RemoveDirectory of a look-alike: %v", err)
	}
}

func TestHoldRefusesEveryWrite(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		e := newEnv(t, db, Config{})
		sv, root := e.newServer("held-writes")
		for _, name := range []string{"a.txt", "b.txt"} {
			if err := os.WriteFile(filepath.Join(root, name), []byte(name), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Mkdir(filepath.Join(root, "empty"), 0o755); err != nil {
			t.Fatal(err)
		}
		before, err := os.Stat(filepath.Join(root, "a.txt"))
		if err != nil {
			t.Fatal(err)
		}
		c := e.creds(sv.ID, false)
		held, err := e.servers.Hold(t.Context(), e.teamID, sv.ID)
		if err != nil {
			t.Fatal(err)
		}
		defer held.Release()
		sc := e.mustDial(c) // opened during the hold: it reads
		if _, err := sc.ReadDir("/"); err != nil {
			t.Fatalf("ReadDir during the hold: %v", err)
		}
		past := time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC)
		for _, w := range []struct {
			name string
			op   func() error
		}{
			{"Rename", func() error { return sc.Rename("/a.txt", "/c.txt") }},
			{"PosixRename", func() error { return sc.PosixRename("/a.txt", "/b.txt") }},
			{"Chmod", func() error { return sc.Chmod("/a.txt", 0o600) }},
			{"Chtimes", func() error { return sc.Chtimes("/a.txt", past, past) }},
			{"Truncate", func() error { return sc.Truncate("/a.txt", 1) }},
			{"Mkdir", func() error { return sc.Mkdir("/new") }},
			{"RemoveDirectory", func() error { return sc.RemoveDirectory("/empty") }},
			{"Remove", func() error { return sc.Remove("/b.txt") }},
			{"Symlink", func() error { return sc.Symlink("a.txt", "/link") }},
			{"Create", func() error { _, err := sc.Create("/new.txt"); return err }},
			{"OpenFile", func() error { _, err := sc.OpenFile("/a.txt", os.O_WRONLY); return err }},
		} {
			if err := w.op(); err == nil || !strings.Contains(err.Error(), "a snapshot is being restored into the server") {
				t.Errorf("%s during the hold = %v, want it refused with the reason", w.name, err)
			}
		}
		after, err := os.Stat(filepath.Join(root, "a.txt"))
		if err != nil {
			t.Fatalf("a.txt after the refused writes: %v", err)
		}
		if after.Mode() != before.Mode() || !after.ModTime().Equal(before.ModTime()) || after.Size() != before.Size() {
			t.Errorf("a.txt changed during the hold: %v %v %d, was %v %v %d",
				after.Mode(), after.ModTime(), after.Size(), before.Mode(), before.ModTime(), before.Size())
		}
		for _, name := range []string{"b.txt", "empty"} {
			if _, err := os.Lstat(filepath.Join(root, name)); err != nil {
				t.Errorf("%s during the hold: %v, want it kept", name, err)
			}
		}
		for _, name := range []string{"c.txt", "new", "link", "new.txt"} {
			if _, err := os.Lstat(filepath.Join(root, name)); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("%s made during the hold (%v)", name, err)
			}
		}
		held.Release()
		if err := sc.Rename("/a.txt", "/c.txt"); err != nil {
			t.Errorf("Rename after the hold: %v", fmtErr(err))
		}
		if err := sc.Chmod("/c.txt", 0o600); err != nil {
			t.Errorf("Chmod after the hold: %v", fmtErr(err))
		}
	})
}

// TestLockout: 10 failed logins from one address in 5 minutes lock it out
// for 15, the right password included; afterwards it logs in again.
func TestLockout(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		e := newEnv(t, db, Config{})
		sv, _ := e.newServer("lock")
		c := e.creds(sv.ID, false)
		for i := range 10 {
			if _, _, err := e.dial(c.ComputedUsername, "wrong"); err == nil {
				t.Fatalf("wrong password %d logged in", i)
			}
		}
		if _, _, err := e.dial(c.ComputedUsername, c.Password); err == nil {
			t.Fatal("the right password logged in from a locked-out address")
		}
		if st := e.srv.Stats(); st.Lockouts != 1 || st.Failures != 11 {
			t.Errorf("Stats = %+v, want 1 lockout and 11 failures", st)
		}
		e.clock.Advance(15*time.Minute + time.Second)
		sc, conn, err := e.dial(c.ComputedUsername, c.Password)
		if err != nil {
			t.Fatalf("login after the lockout: %v", err)
		}
		sc.Close()
		conn.Close()
	})
}

// TestLimits: 8 sessions per credential, 256 open handles per session,
// and an idle session ends.
func TestLimits(t *testing.T) {
	db := storetest.SQLite(t)
	e := newEnv(t, db, Config{IdleTimeout: time.Hour})
	sv, root := e.newServer("limits")
	c := e.creds(sv.ID, false)
	var clients []*sftp.Client
	for range 8 {
		clients = append(clients, e.mustDial(c))
	}
	if sc, conn, err := e.dial(c.ComputedUsername, c.Password); err == nil {
		sc.Close()
		conn.Close()
		t.Fatal("a 9th session was served")
	} else if !strings.Contains(err.Error(), "too many SFTP sessions") {
		t.Errorf("9th session: %v, want too many SFTP sessions", err)
	}
	if err := os.WriteFile(filepath.Join(root, "h.txt"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	var open []*sftp.File
	for range 256 {
		f, err := clients[0].Open("/h.txt")
		if err != nil {
			t.Fatalf("open %d: %v", len(open), err)
		}
		open = append(open, f)
	}
	if _, err := clients[0].Open("/h.txt"); err == nil || !strings.Contains(err.Error(), "too many open files") {
		t.Errorf("257th open = %v, want too many open files", err)
	}
	open[0].Close()
	if f, err := clients[0].Open("/h.txt"); err != nil {
		t.Errorf("open after a close: %v", err)
	} else {
		f.Close()
	}
	for _, f := range open[1:] {
		f.Close()
	}
	// Idle: the clock jumps past the timeout, the next check ends them.
	e.clock.Advance(time.Hour + time.Minute)
	waitEnded(t, clients[1], "an hour idle")
}

// TestQuota: an upload past the disk limit fails at the write that would
// pass it, with a "no space" failure; the partial file stays and the
// ledger matches what is on disk.
func TestQuota(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		e := newEnv(t, db, Config{})
		sv, root := e.newServer("quota")
		c := e.creds(sv.ID, false)
		// Leave 2 MiB free under the 1 GiB limit (a sparse file's size counts).
		used, err := quota.Usage(root)
		if err != nil {
			t.Fatal(err)
		}
		const free = 2 << 20
		size := int64(1024<<20) - used - free
		size -= size % quota.BlockSize
		f, err := os.Create(filepath.Join(root, "fill.bin"))
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Truncate(size); err != nil {
			t.Fatal(err)
		}
		f.Close()
		e.servers.DiskChanged(sv.ID)

		sc := e.mustDial(c)
		w, err := sc.Create("/up.bin")
		if err != nil {
			t.Fatal(err)
		}
		chunk := bytes.Repeat([]byte("q"), 64<<10)
		written := 0
		var werr error
		for written < 4<<20 {
			n, err := w.Write(chunk)
			written += n
			if err != nil {
				werr = err
				break
			}
		}
		w.Close()
		if werr == nil {
			t.Fatalf("4 MiB written with 2 MiB free")
		}
		// The status message names the limit (OpenSSH's client prints only
		// the code, "Failure"; other clients show the message).
		const msg = `"no space left: the server's disk limit (1024 MiB) would be exceeded; this request wrote nothing"`
		if code := statusCode(werr); code != 4 || !strings.Contains(werr.Error(), msg) {
			t.Errorf("write past the limit = %s, want SSH_FX_FAILURE (4) with the message %s", fmtErr(werr), msg)
		}
		fi, err := os.Stat(filepath.Join(root, "up.bin"))
		if err != nil {
			t.Fatalf("the partial file is gone: %v", err)
		}
		if fi.Size() == 0 || fi.Size() > free {
			t.Errorf("partial file of %d bytes, want some, at most %d", fi.Size(), free)
		}
		// The ledger is exact: what it says is what a walk finds.
		a, err := e.servers.Access(t.Context(), e.teamID, sv.ID, true)
		if err != nil {
			t.Fatal(err)
		}
		walked, err := quota.Usage(root)
		if err != nil {
			t.Fatal(err)
		}
		if fig := a.Disk.Figures(); fig.Used != walked || fig.Reserved != 0 {
			t.Errorf("ledger %+v, want used %d (the walk) and nothing reserved", fig, walked)
		}
		// statvfs reports the limit.
		vfs, err := sc.StatVFS("/")
		if err != nil {
			t.Fatal(err)
		}
		if vfs.TotalSpace() != 1024<<20 || vfs.FreeSpace() > free {
			t.Errorf("statvfs total %d free %d, want the 1 GiB limit and at most %d free", vfs.TotalSpace(), vfs.FreeSpace(), free)
		}
		// Removing the partial file gives its bytes back.
		if err := sc.Remove("/up.bin"); err != nil {
			t.Fatal(err)
		}
		walked, _ = quota.Usage(root)
		if fig := a.Disk.Figures(); fig.Used != walked {
			t.Errorf("after remove: ledger used %d, walk %d", fig.Used, walked)
		}
	})
}

// TestConcurrentTransfers: 8 sessions of 4 files each at once, as
// FileZilla transfers; sizes and SHA-256 checked on disk and downloaded.
func TestConcurrentTransfers(t *testing.T) {
	db := storetest.SQLite(t)
	e := newEnv(t, db, Config{})
	sv, root := e.newServer("many")
	c := e.creds(sv.ID, false)
	local := t.TempDir()
	type file struct {
		name string
		sum  [32]byte
		size int
	}
	var want []file
	for s := range 8 {
		for f := range 4 {
			name := fmt.Sprintf("s%d-f%d.bin", s, f)
			b := writeRandom(t, filepath.Join(local, name), (s*4+f)*37_000+1, int64(s*4+f+10))
			want = append(want, file{name, sha256.Sum256(b), len(b)})
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	var first *sftp.Client
	for s := range 8 {
		sc := e.mustDial(c)
		if first == nil {
			first = sc
		}
		if err := sc.MkdirAll(fmt.Sprintf("/s%d", s)); err != nil {
			t.Fatal(err)
		}
		for f := range 4 {
			wg.Go(func() {
				fl := want[s*4+f]
				src, err := os.Open(filepath.Join(local, fl.name))
				if err != nil {
					errs <- err
					return
				}
				defer src.Close()
				dst, err := sc.Create(fmt.Sprintf("/s%d/%s", s, fl.name))
				if err != nil {
					errs <- err
					return
				}
				if _, err := dst.ReadFrom(src); err != nil {
					errs <- fmt.Errorf("upload %s: %w", fl.name, err)
				}
				if err := dst.Close(); err != nil {
					errs <- err
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	sc := first
	for i, fl := range want {
		rel := fmt.Sprintf("s%d/%s", i/4, fl.name)
		b := mustRead(t, root, rel)
		if len(b) != fl.size || sha256.Sum256(b) != fl.sum {
			t.Errorf("%s on disk: %d bytes, want %d with its sha256", rel, len(b), fl.size)
		}
		r, err := sc.Open("/" + rel)
		if err != nil {
			t.Fatal(err)
		}
		h := sha256.New()
		n, err := io.Copy(h, r)
		r.Close()
		if err != nil || int(n) != fl.size || !bytes.Equal(h.Sum(nil), fl.sum[:]) {
			t.Errorf("%s downloaded: %d bytes (%v), want %d with its sha256", rel, n, err, fl.size)
		}
	}
}

// TestHostKeyStable: the host key is made once (0600) and kept across a
// restart; a client that trusted it connects again.
func TestHostKeyStable(t *testing.T) {
	db := storetest.SQLite(t)
	e := newEnv(t, db, Config{})
	sv, _ := e.newServer("key")
	c := e.creds(sv.ID, false)
	first := e.srv.HostKey()
	fi, err := os.Stat(filepath.Join(e.dataDir, HostKeyFile))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("host key file: %v %v, want mode 0600", fi, err)
	}
	if first.Type() != ssh.KeyAlgoED25519 {
		t.Errorf("host key type %s, want ed25519", first.Type())
	}
	e.restart(Config{})
	if !bytes.Equal(e.srv.HostKey().Marshal(), first.Marshal()) {
		t.Fatal("the host key changed across a restart")
	}
	sc, conn, err := e.dial(c.ComputedUsername, c.Password) // FixedHostKey of the new server
	if err != nil {
		t.Fatal(err)
	}
	sc.Close()
	conn.Close()
	// And with OpenSSH, strictly checking a known_hosts of the first key.
	needClients(t)
	{
		kh := filepath.Join(t.TempDir(), "known_hosts")
		line := fmt.Sprintf("[127.0.0.1]:%d %s", e.port, ssh.MarshalAuthorizedKey(first))
		if err := os.WriteFile(kh, []byte(line), 0o600); err != nil {
			t.Fatal(err)
		}
		out, err := e.openssh(c, t.TempDir(), "pwd\n", "-oStrictHostKeyChecking=yes", "-oUserKnownHostsFile="+kh)
		if err != nil {
			t.Fatalf("OpenSSH with the first key in known_hosts: %v\n%s", err, out)
		}
	}
}
