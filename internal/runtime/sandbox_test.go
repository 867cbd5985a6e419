package runtime

import (
	"crypto/rand"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// mountEntry is one line of /proc/<pid>/mountinfo.
type mountEntry struct {
	point, fstype, opts, super string
}

// mountsAt returns the mounts of pid's namespace ("self": ours) at point,
// in order (the last one is what is seen there).
func mountsAt(t *testing.T, pid, point string) []mountEntry {
	t.Helper()
	data, err := os.ReadFile("/proc/" + pid + "/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	var out []mountEntry
	for line := range strings.Lines(string(data)) {
		// id parent major:minor root point opts [optional…] - fstype source super
		pre, post, ok := strings.Cut(strings.TrimSpace(line), " - ")
		f, g := strings.Fields(pre), strings.Fields(post)
		if !ok || len(f) < 6 || len(g) < 3 || f[4] != point {
			continue
		}
		out = append(out, mountEntry{point: f[4], fstype: g[0], opts: f[5], super: g[2]})
	}
	return out
}

// sandboxed is a game of a sandbox test: its instance and console.
type sandboxed struct {
	inst Instance
	con  *console
	pid  int
}

// startAsUser starts the helper (no arguments) as uid on p, its root
// the user's (0700), as the servers package makes it; it is ended at the
// end of the test.
func startAsUser(t *testing.T, p *Process, uid uint32) (Spec, *sandboxed) {
	t.Helper()
	spec := testSpec(t)
	spec.User = &User{UID: uid, GID: uid}
	if err := os.Chown(spec.Root, int(uid), int(uid)); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(spec.Root, 0o700); err != nil {
		t.Fatal(err)
	}
	con := &console{}
	inst, err := p.Start(t.Context(), spec, con.add)
	if err != nil {
		t.Fatalf("Start(%q as %d) = %v", spec.Argv, uid, err)
	}
	t.Cleanup(func() {
		if len(p.opts.Holder) > 0 {
			// Its instance may have been let go (Close): its holder
			// is asked.
			endHeld(t, p.opts.StateDir, spec.ServerID)
			return
		}
		_ = inst.Kill()
		select {
		case <-inst.Done():
		case <-time.After(waitLimit):
			t.Errorf("instance %s did not end within %s of Kill", inst.Ref(), waitLimit)
		}
	})
	pid, _, _ := parseRef(strings.TrimPrefix(inst.Ref(), heldRefPrefix))
	con.wait(t, "ready")
	return spec, &sandboxed{inst: inst, con: con, pid: pid}
}

// TestSandboxTmp: as root, a server with a user of its own gets a /tmp
// and a /dev/shm of its own (fresh tmpfs, size-limited, nosuid and
// nodev, /tmp executable, /dev/shm not), under holders and without: a
// file one server leaves there (0644) is seen neither by another
// server nor by the host, whose mounts are unchanged. The game is the
// process started (the instance's pid), as its user with no_new_privs,
// in its cgroup when the host has them; it is re-attached (the
// namespace lives on with it), stopped and killed as before.
func TestSandboxTmp(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("SKIP USERS SUITE: users of their own and mount namespaces need root")
	}
	for _, held := range []bool{true, false} {
		name := "child"
		if held {
			name = "held"
		}
		t.Run(name, func(t *testing.T) {
			opts := ProcessOptions{Sandbox: []string{shim, "sandbox-exec"}}
			if held {
				opts.Holder, opts.StateDir = []string{shim, "shim"}, t.TempDir()
			}
			rec := &records{}
			p := NewProcessWith(slog.New(rec), opts)
			t.Cleanup(func() { p.Close() })
			hostTmp, hostShm := mountsAt(t, "self", "/tmp"), mountsAt(t, "self", "/dev/shm")

			const uidA, uidB = 239901, 239902
			specA, a := startAsUser(t, p, uidA)
			_, b := startAsUser(t, p, uidB)

			hostNS, _ := os.Readlink("/proc/self/ns/mnt")
			for _, g := range []struct {
				s   *sandboxed
				uid uint32
				id  string
			}{{a, uidA, specA.ServerID}, {b, uidB, ""}} {
				st := procStatusOf(t, g.s.pid)
				want := strconv.Itoa(int(g.uid))
				if ids := strings.Fields(st["Uid"] + " " + st["Gid"]); slices.ContainsFunc(ids, func(id string) bool { return id != want }) || len(ids) != 8 {
					t.Errorf("the game %d runs with Uid %q Gid %q; want %s for all", g.s.pid, st["Uid"], st["Gid"], want)
				}
				if st["NoNewPrivs"] != "1" || st["Groups"] != "" {
					t.Errorf("the game %d: NoNewPrivs %q, Groups %q; want 1 and none", g.s.pid, st["NoNewPrivs"], st["Groups"])
				}
				if ns, _ := os.Readlink("/proc/" + strconv.Itoa(g.s.pid) + "/ns/mnt"); ns == hostNS || ns == "" {
					t.Errorf("the game %d is in mount namespace %q, the host's is %q: want one of its own", g.s.pid, ns, hostNS)
				}
				checkTmpfs(t, g.s.pid, "/tmp", "size=65536k", false)
				checkTmpfs(t, g.s.pid, "/dev/shm", "size=16384k", true)
				if g.id != "" {
					if h := p.cgroups(t.Context()); h != nil {
						for c, path := range procCgroups(t, g.s.pid) {
							if slices.Contains(h.controllers(), c) && !strings.HasSuffix(path, "/kiln/"+g.id) {
								t.Errorf("the game's %q cgroup is %q, want .../kiln/%s", c, path, g.id)
							}
						}
					}
				}
			}

			file := "kiln-tmpns-" + strings.ToLower(rand.Text()[:10])
			for _, dir := range []string{"/tmp/", "/dev/shm/"} {
				path := dir + file
				t.Cleanup(func() { os.Remove(path) }) // only if the wall is broken
				if err := a.inst.WriteLine("write:" + path); err != nil {
					t.Fatal(err)
				}
				a.con.wait(t, "wrote "+path)
				if err := a.inst.WriteLine("read:" + path); err != nil {
					t.Fatal(err)
				}
				if got, want := a.con.wait(t, "read "+path), "read "+path+": from "+strconv.Itoa(a.pid); got != want {
					t.Errorf("a reads back %q, want %q", got, want)
				}
				if err := b.inst.WriteLine("read:" + path); err != nil {
					t.Fatal(err)
				}
				if got, want := b.con.wait(t, "read "+path), "read "+path+": error open "+path+": no such file or directory"; got != want {
					t.Errorf("b reads a's %s: %q, want %q", path, got, want)
				}
				if _, err := os.Lstat(path); !errors.Is(err, fs.ErrNotExist) {
					t.Errorf("the host sees a's %s: %v", path, err)
				}
			}
			if got := mountsAt(t, "self", "/tmp"); !slices.Equal(got, hostTmp) {
				t.Errorf("the host's mounts at /tmp changed: %+v, were %+v", got, hostTmp)
			}
			if got := mountsAt(t, "self", "/dev/shm"); !slices.Equal(got, hostShm) {
				t.Errorf("the host's mounts at /dev/shm changed: %+v, were %+v", got, hostShm)
			}

			// b is killed; a is re-attached by another kiln (under a
			// holder), in its namespace still, and stopped.
			if err := b.inst.Kill(); err != nil {
				t.Fatal(err)
			}
			waitExit(t, b.inst, Exit{Code: -1, Signal: "killed"})
			inst := a.inst
			if held {
				ref := a.inst.Ref()
				if err := p.Close(); err != nil {
					t.Fatal(err)
				}
				p2 := NewProcessWith(quietLog(), opts)
				t.Cleanup(func() { p2.Close() })
				con := &console{}
				var err error
				if inst, err = p2.Adopt(t.Context(), specA, ref, con.add); err != nil {
					t.Fatalf("Adopt(%q) = %v", ref, err)
				}
				if err := inst.WriteLine("read:/tmp/" + file); err != nil {
					t.Fatal(err)
				}
				if got, want := con.wait(t, "read /tmp/"), "read /tmp/"+file+": from "+strconv.Itoa(a.pid); got != want {
					t.Errorf("a after the re-attach reads %q, want %q", got, want)
				}
			}
			if err := inst.Stop(); err != nil {
				t.Fatal(err)
			}
			waitExit(t, inst, Exit{Code: -1, Signal: "terminated"})
			if msgs := slices.Concat(rec.at(slog.LevelWarn), rec.at(slog.LevelError)); len(msgs) != 0 {
				t.Errorf("warnings with a sandbox: %q", msgs)
			}
		})
	}
}

// waitExit waits for inst to end and checks how.
func waitExit(t *testing.T, inst Instance, want Exit) {
	t.Helper()
	select {
	case <-inst.Done():
	case <-time.After(waitLimit):
		t.Fatalf("%s did not end within %s", inst.Ref(), waitLimit)
	}
	if got := inst.Exit(); got != want {
		t.Errorf("%s: Exit() = %+v, want %+v", inst.Ref(), got, want)
	}
}

// checkTmpfs checks that the last mount at point in pid's namespace is a
// tmpfs of its own, mode 1777, with size, nosuid and nodev, and noexec
// as told.
func checkTmpfs(t *testing.T, pid int, point, size string, noexec bool) {
	t.Helper()
	ms := mountsAt(t, strconv.Itoa(pid), point)
	if len(ms) == 0 {
		t.Errorf("the game has no mount at %s", point)
		return
	}
	m := ms[len(ms)-1]
	opts, super := strings.Split(m.opts, ","), strings.Split(m.super, ",")
	if m.fstype != "tmpfs" || !slices.Contains(super, size) ||
		!slices.Contains(opts, "rw") || !slices.Contains(opts, "nosuid") || !slices.Contains(opts, "nodev") ||
		slices.Contains(opts, "noexec") != noexec {
		t.Errorf("the game's %s: %+v; want a tmpfs %s, rw,nosuid,nodev, noexec %v", point, m, size, noexec)
	}
	// Seen through the game's root, in its namespace.
	fi, err := os.Stat("/proc/" + strconv.Itoa(pid) + "/root" + point)
	if err != nil || fi.Mode() != fs.ModeDir|fs.ModeSticky|0o777 {
		t.Errorf("the game's %s: %v, %v; want drwxrwxrwt", point, fi.Mode(), err)
	}
}

// procStatusOf reads the fields of /proc/<pid>/status.
func procStatusOf(t *testing.T, pid int) map[string]string {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for line := range strings.Lines(string(b)) {
		if k, v, ok := strings.Cut(line, ":"); ok {
			out[k] = strings.TrimSpace(v)
		}
	}
	return out
}

// TestSandboxRefused: where the host refuses the sandbox's mounts (here
// the kernel: the trampoline runs without CAP_SYS_ADMIN, as in a
// container without it), servers with users of their own still start,
// as their users, sharing the host's /tmp, and kiln says so once, as an
// error in its log.
func TestSandboxRefused(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("SKIP USERS SUITE: users of their own and mount namespaces need root")
	}
	// Without a sandbox the users must pass through the directories the
	// tests made 0700 to reach the helper and their roots.
	for _, d := range []string{filepath.Dir(helper), filepath.Dir(t.TempDir())} {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	rec := &records{}
	// The helper drops CAP_SYS_ADMIN from its bounding set and executes
	// the trampoline, which has it no more.
	p := NewProcessWith(slog.New(rec), ProcessOptions{
		Holder: []string{shim, "shim"}, StateDir: t.TempDir(),
		Sandbox: []string{helper, "nosysadmin", shim, "sandbox-exec"},
	})
	t.Cleanup(func() { p.Close() })
	_, a := startAsUser(t, p, 239903)
	_, b := startAsUser(t, p, 239904)
	path := "/tmp/kiln-tmpns-" + strings.ToLower(rand.Text()[:10])
	t.Cleanup(func() { os.Remove(path) })
	if err := a.inst.WriteLine("write:" + path); err != nil {
		t.Fatal(err)
	}
	a.con.wait(t, "wrote "+path)
	if got, err := os.ReadFile(path); err != nil || string(got) != "from "+strconv.Itoa(a.pid) {
		t.Errorf("the host reads %s: %q, %v; want a's file (no sandbox)", path, got, err)
	}
	if st := procStatusOf(t, b.pid); !strings.HasPrefix(st["Uid"], "239904\t") || st["NoNewPrivs"] != "1" {
		t.Errorf("b without a sandbox: Uid %q NoNewPrivs %q; want its user and 1", st["Uid"], st["NoNewPrivs"])
	}
	errs := rec.at(slog.LevelError)
	if len(errs) != 1 || !strings.HasPrefix(errs[0], "game servers share the host's /tmp and /dev/shm: this host refuses") {
		t.Errorf("errors logged: %q; want one saying that servers share the host's /tmp", errs)
	}
}

// TestSandboxStartErrors: a start through the sandbox that cannot run
// the game fails Start with the reason (the trampoline's, read before
// Start returns), as without one, and leaves no cgroup behind.
func TestSandboxStartErrors(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("SKIP USERS SUITE: users of their own and mount namespaces need root")
	}
	p := NewProcessWith(quietLog(), ProcessOptions{Sandbox: []string{shim, "sandbox-exec"}})
	t.Cleanup(func() { p.Close() })
	tests := []struct {
		name string
		edit func(*Spec)
		want string
	}{
		{"missing binary", func(s *Spec) { s.Argv = []string{"/nonexistent/kiln-test-server"} },
			"start in the sandbox: exec /nonexistent/kiln-test-server: no such file or directory"},
		{"binary not in PATH", func(s *Spec) { s.Argv = []string{"kiln-test-no-such-command"} },
			`exec: "kiln-test-no-such-command": executable file not found in $PATH`},
		// os/exec names the command for a working directory it cannot
		// enter: the trampoline here, the game without a sandbox.
		{"missing root", func(s *Spec) { s.Root = "/nonexistent/kiln-test-root" },
			"no such file or directory"},
		{"root not the user's", func(s *Spec) { os.Chown(s.Root, 0, 0) },
			"start in the sandbox: enter the server's root: permission denied"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := testSpec(t)
			spec.User = &User{UID: 239905, GID: 239905}
			if err := os.Chown(spec.Root, 239905, 239905); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(spec.Root, 0o700); err != nil {
				t.Fatal(err)
			}
			tt.edit(&spec)
			inst, err := p.Start(t.Context(), spec, func(string) {})
			if err == nil {
				_ = inst.Kill()
				t.Fatalf("Start(%q in %s) = nil error, want one", spec.Argv, spec.Root)
			}
			if !strings.HasSuffix(err.Error(), tt.want) {
				t.Errorf("Start(%q in %s) = %v, want …%s", spec.Argv, spec.Root, err, tt.want)
			}
			if h := p.cgroups(t.Context()); h != nil {
				wantGone(t, h.cgroup(spec.ServerID))
			}
		})
	}
}
