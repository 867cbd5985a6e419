package runtime

import (
	"crypto/rand"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// procCgroups reads /proc/<pid>/cgroup: the cgroup path of each v1
// controller, and under "" the v2 one.
func procCgroups(t *testing.T, pid int) map[string]string {
	t.Helper()
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]string{}
	for line := range strings.Lines(string(data)) {
		parts := strings.SplitN(strings.TrimSpace(line), ":", 3)
		if len(parts) != 3 {
			continue
		}
		for c := range strings.SplitSeq(parts[1], ",") {
			m[c] = parts[2]
		}
	}
	return m
}

// startInCgroup starts spec on p and fails at once unless it got a cgroup.
func startInCgroup(t *testing.T, p *Process, spec Spec) *server {
	t.Helper()
	s := start(t, p, spec)
	if s.inst.cg == nil {
		t.Fatal("the instance has no cgroup")
	}
	return s
}

// controllers are the keys of procCgroups that the cgroups of h are in.
func (h *cgroupHost) controllers() []string {
	if h.v2 {
		return []string{""}
	}
	return []string{"memory", "cpu", "pids"}[:len(h.kiln)]
}

// wantGone fails unless every directory of cg has been removed.
func wantGone(t *testing.T, cg *cgroup) {
	t.Helper()
	for _, d := range cg.dirs {
		if _, err := os.Stat(d); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("cgroup %s still there (stat: %v)", d, err)
		}
	}
}

func readTrim(t *testing.T, path string) (string, bool) {
	t.Helper()
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return "", false
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(data)), true
}

// TestProcessCgroup runs servers in cgroups of the host (as root, or with a
// delegated cgroup); it is one test so that a host without gives one SKIP.
func TestProcessCgroup(t *testing.T) {
	h, err := probeCgroups(DefaultCgroupRoot)
	if err != nil {
		t.Skipf("no cgroup limits on this host: %v", err)
	}
	rec := &records{}
	p := NewProcess(slog.New(rec))
	t.Cleanup(func() { // after the parallel subtests
		if msgs := rec.at(slog.LevelWarn); len(msgs) != 0 {
			t.Errorf("warnings with cgroups available: %q", msgs)
		}
	})

	t.Run("placement and limits", func(t *testing.T) {
		t.Parallel()
		spec := testSpec(t)
		spec.MemoryMB, spec.CPUPercent = 64, 50
		s := startInCgroup(t, p, spec)
		s.con.wait(t, "ready")
		pid := s.inst.cmd.Process.Pid
		got := procCgroups(t, pid)
		for _, c := range h.controllers() {
			if !strings.HasSuffix(got[c], "/kiln/"+spec.ServerID) {
				t.Errorf("/proc/%d/cgroup: %q is in %q, want .../kiln/%s", pid, c, got[c], spec.ServerID)
			}
		}

		cg := h.cgroup(spec.ServerID)
		type limit struct {
			dir, file, want string
			optional        bool // absent without swap accounting
		}
		var limits []limit
		if h.v2 {
			d := cg.dirs[0]
			limits = []limit{
				{d, "memory.max", "67108864", false},
				{d, "memory.swap.max", "0", true},
				{d, "cpu.max", "50000 100000", false},
				{d, "pids.max", "512", true},
			}
		} else {
			limits = []limit{
				{cg.dirs[0], "memory.limit_in_bytes", "67108864", false},
				{cg.dirs[0], "memory.memsw.limit_in_bytes", "67108864", true},
				{cg.dirs[1], "cpu.cfs_quota_us", "50000", false},
				{cg.dirs[1], "cpu.cfs_period_us", "100000", false},
			}
			if len(cg.dirs) > 2 {
				limits = append(limits, limit{cg.dirs[2], "pids.max", "512", false})
			}
		}
		for _, l := range limits {
			v, ok := readTrim(t, filepath.Join(l.dir, l.file))
			if !ok && l.optional {
				t.Logf("%s: not on this host", l.file)
				continue
			}
			if v != l.want {
				t.Errorf("%s = %q, want %q", filepath.Join(l.dir, l.file), v, l.want)
			}
		}

		// Memory counts from the cgroup once the child is in it.
		if err := s.inst.WriteLine("alloc:24"); err != nil {
			t.Fatal(err)
		}
		s.con.wait(t, "allocated")
		st, err := s.inst.Stats(t.Context())
		if err != nil || st.MemoryBytes < 24<<20 {
			t.Errorf("Stats = %+v, %v; want memory >= 24 MiB", st, err)
		}

		if err := s.inst.Kill(); err != nil {
			t.Fatal(err)
		}
		s.exit(t)
		wantGone(t, cg)
	})

	t.Run("what the server leaves is killed at its exit", func(t *testing.T) {
		t.Parallel()
		spec := testSpec(t)
		s := startInCgroup(t, p, spec)
		s.con.wait(t, "ready")
		// An orphan in a session of its own escapes the process group and
		// holds the console pipe: only the cgroup can end it.
		if err := s.inst.WriteLine("orphan"); err != nil {
			t.Fatal(err)
		}
		orphan := pidOf(t, s.con.wait(t, "orphan "))
		ticks := startTime(t, orphan)
		if err := s.inst.WriteLine("exit:0"); err != nil {
			t.Fatal(err)
		}
		if got := s.exit(t); got != (Exit{}) {
			t.Errorf("Exit() = %+v, want code 0", got)
		}
		eventually(t, "the orphan ends", func() bool { return !procAlive(orphan, ticks) })
		wantGone(t, h.cgroup(spec.ServerID))
	})

	t.Run("out of memory", func(t *testing.T) {
		t.Parallel()
		if swaps, _ := os.ReadFile("/proc/swaps"); strings.Count(string(swaps), "\n") > 1 && !h.noSwapLimit() {
			t.Skip("the host swaps and cannot limit swap: the helper would swap, not be killed")
		}
		spec := testSpec(t)
		spec.MemoryMB = 32
		s := startInCgroup(t, p, spec)
		s.con.wait(t, "ready")
		if err := s.inst.WriteLine("alloc:128"); err != nil {
			t.Fatal(err)
		}
		want := Exit{Code: -1, Signal: "killed (out of memory)"}
		if got := s.exit(t); got != want {
			t.Errorf("Exit() = %+v, want %+v", got, want)
		}
		wantGone(t, h.cgroup(spec.ServerID))
	})

	t.Run("start error leaves no cgroup", func(t *testing.T) {
		t.Parallel()
		spec := testSpec(t)
		spec.Argv = []string{"/nonexistent/kiln-test-server"}
		if _, err := p.Start(t.Context(), spec, func(string) {}); err == nil {
			t.Fatal("Start of a missing binary = nil error")
		}
		wantGone(t, h.cgroup(spec.ServerID))
	})

	t.Run("adopt empties the cgroup", func(t *testing.T) {
		t.Parallel()
		spec := testSpec(t)
		cg, err := p.cgroups(t.Context()).create(spec)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cg.remove() })
		o := startOutside(t)
		if err := cg.attach(o.pid); err != nil {
			t.Fatal(err)
		}
		if _, err := p.Adopt(t.Context(), spec, "nonsense", func(string) {}); !errors.Is(err, ErrNotAdoptable) {
			t.Fatalf("Adopt = %v, want ErrNotAdoptable", err)
		}
		select {
		case <-o.exited:
		case <-time.After(waitLimit):
			t.Error("the process in the server's cgroup still runs after Adopt")
		}
		wantGone(t, cg)
	})

	t.Run("leftover cgroup replaced at start", func(t *testing.T) {
		t.Parallel()
		spec := testSpec(t)
		cg, err := p.cgroups(t.Context()).create(spec)
		if err != nil {
			t.Fatal(err)
		}
		o := startOutside(t)
		if err := cg.attach(o.pid); err != nil {
			t.Fatal(err)
		}
		s := startInCgroup(t, p, spec)
		s.con.wait(t, "ready")
		select {
		case <-o.exited:
		case <-time.After(waitLimit):
			t.Error("a process left in the server's cgroup survived a start")
		}
	})
}

// noSwapLimit reports whether the host can forbid swap to a cgroup.
func (h *cgroupHost) noSwapLimit() bool {
	file := "memory.memsw.limit_in_bytes"
	if h.v2 {
		file = "memory.swap.max"
	}
	_, err := os.Stat(filepath.Join(h.kiln[0], file))
	return err == nil
}

// TestProcessCgroupClone starts a server inside its cgroup (clone3 with
// CLONE_INTO_CGROUP) in a cgroup v2 hierarchy that has no controllers, as
// the unified hierarchy of a hybrid host: the placement of v2 without its
// limits, where TestProcessCgroup runs v1.
func TestProcessCgroupClone(t *testing.T) {
	if _, err := os.Stat(filepath.Join(DefaultCgroupRoot, "cgroup.controllers")); err == nil {
		t.Skip("cgroup v2 host: TestProcessCgroup covers it")
	}
	self, err := selfCgroups()
	if err != nil {
		t.Fatal(err)
	}
	parent, err := cgroupDir(filepath.Join(DefaultCgroupRoot, "unified"), "cgroup2", "", self[""])
	if err != nil {
		t.Skipf("no unified cgroup hierarchy: %v", err)
	}
	kiln := filepath.Join(parent, "kiln-test-"+strings.ToLower(rand.Text()[:12]))
	if err := os.Mkdir(kiln, 0o755); err != nil {
		t.Skipf("cannot create a cgroup in the unified hierarchy: %v", err)
	}
	t.Cleanup(func() { _ = syscall.Rmdir(kiln) })
	h := &cgroupHost{v2: true, kiln: []string{kiln}}
	p := NewProcess(quietLog())
	p.probe.Do(func() { p.cg = h })

	spec := testSpec(t)
	s := startInCgroup(t, p, spec)
	s.con.wait(t, "ready")
	pid := s.inst.cmd.Process.Pid
	if got, want := procCgroups(t, pid)[""], "/"+filepath.Base(kiln)+"/"+spec.ServerID; !strings.HasSuffix(got, want) {
		t.Errorf("/proc/%d/cgroup v2 path = %q, want .../%s", pid, got, want)
	}
	if h.noCloneInto.Load() {
		t.Error("the start fell back to moving the process (CLONE_INTO_CGROUP refused)")
	}
	if err := s.inst.WriteLine("orphan"); err != nil {
		t.Fatal(err)
	}
	orphan := pidOf(t, s.con.wait(t, "orphan "))
	ticks := startTime(t, orphan)
	if err := s.inst.WriteLine("exit:0"); err != nil {
		t.Fatal(err)
	}
	s.exit(t)
	eventually(t, "the orphan ends", func() bool { return !procAlive(orphan, ticks) })
	wantGone(t, h.cgroup(spec.ServerID))
}

// TestProcessCgroupAttachFallback makes clone3 refuse the cgroup (a v1
// cgroup as CgroupFD gets EBADF, as a kernel without CLONE_INTO_CGROUP or a
// seccomp filter refuses): the start is retried without, and the process
// moved into its cgroup after it.
func TestProcessCgroupAttachFallback(t *testing.T) {
	if _, err := os.Stat(filepath.Join(DefaultCgroupRoot, "cgroup.controllers")); err == nil {
		t.Skip("cgroup v2 host: no v1 hierarchy to make clone3 fail with")
	}
	self, err := selfCgroups()
	if err != nil {
		t.Fatal(err)
	}
	parent, err := cgroupDir(filepath.Join(DefaultCgroupRoot, "pids"), "cgroup", "pids", self["pids"])
	if err != nil {
		t.Skipf("no v1 pids hierarchy: %v", err)
	}
	kiln := filepath.Join(parent, "kiln-test-"+strings.ToLower(rand.Text()[:12]))
	if err := os.Mkdir(kiln, 0o755); err != nil {
		t.Skipf("cannot create a v1 cgroup: %v", err)
	}
	t.Cleanup(func() { _ = syscall.Rmdir(kiln) })
	h := &cgroupHost{v2: true, kiln: []string{kiln}}
	p := NewProcess(quietLog())
	p.probe.Do(func() { p.cg = h })

	spec := testSpec(t)
	s := startInCgroup(t, p, spec)
	s.con.wait(t, "ready")
	if !h.noCloneInto.Load() {
		t.Error("clone3 into a v1 cgroup succeeded; want the fallback taken")
	}
	pid := s.inst.cmd.Process.Pid
	if got, want := procCgroups(t, pid)["pids"], "/"+filepath.Base(kiln)+"/"+spec.ServerID; !strings.HasSuffix(got, want) {
		t.Errorf("/proc/%d/cgroup pids path = %q, want .../%s", pid, got, want)
	}
	if err := s.inst.Kill(); err != nil {
		t.Fatal(err)
	}
	s.exit(t)
	wantGone(t, h.cgroup(spec.ServerID))
}

// TestProcessNoCgroup runs servers where cgroups cannot be had: they start
// all the same, and one warning says the limits are not enforced.
func TestProcessNoCgroup(t *testing.T) {
	t.Parallel()
	rec := &records{}
	p := NewProcessWith(slog.New(rec), ProcessOptions{CgroupRoot: t.TempDir()})
	for range 2 {
		spec := testSpec(t)
		spec.MemoryMB, spec.CPUPercent = 64, 50
		s := start(t, p, spec)
		s.con.wait(t, "ready")
		if s.inst.cg != nil {
			t.Errorf("instance has a cgroup under a root that is no cgroup filesystem")
		}
		if got := procCgroups(t, s.inst.cmd.Process.Pid); strings.Contains(got["memory"]+got[""], "/kiln/") {
			t.Errorf("/proc/<pid>/cgroup = %q, want no kiln cgroup", got)
		}
		if st, err := s.inst.Stats(t.Context()); err != nil || st.MemoryBytes <= 0 {
			t.Errorf("Stats = %+v, %v; want memory > 0", st, err)
		}
	}
	warns := rec.at(slog.LevelWarn)
	if len(warns) != 1 || !strings.Contains(warns[0], "not enforced") {
		t.Errorf("warnings = %q, want one that says limits are not enforced", warns)
	}
}

func TestUnescapeMount(t *testing.T) {
	tests := []struct{ in, want string }{
		{"/sys/fs/cgroup", "/sys/fs/cgroup"},
		{`/mnt/a\040b`, "/mnt/a b"},
		{`/mnt/tab\011`, "/mnt/tab\t"},
		{`/mnt/odd\04`, `/mnt/odd\04`},
	}
	for _, tt := range tests {
		if got := unescapeMount(tt.in); got != tt.want {
			t.Errorf("unescapeMount(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestValidCgroupName(t *testing.T) {
	tests := []struct {
		id   string
		want bool
	}{
		{"0b6c3c2e-7d7f-4a53-9c7c-1b1e8e3c2a11", true},
		{"", false},
		{".", false},
		{"..", false},
		{"a/b", false},
		{strings.Repeat("a", 256), false},
	}
	for _, tt := range tests {
		if got := validCgroupName(tt.id); got != tt.want {
			t.Errorf("validCgroupName(%q) = %v, want %v", tt.id, got, tt.want)
		}
	}
}

// Started by systemd in the leaf kiln-serve (DelegateSubgroup=kiln-serve),
// kiln makes its servers' cgroups beside the leaf, in the unit's cgroup,
// never below the leaf, which must stay one for the next kiln to join it.
func TestDelegatedCgroup(t *testing.T) {
	for _, c := range []struct{ dir, want string }{
		{"/sys/fs/cgroup/system.slice/kiln.service/kiln-serve", "/sys/fs/cgroup/system.slice/kiln.service"},
		{"/sys/fs/cgroup/system.slice/kiln.service", "/sys/fs/cgroup/system.slice/kiln.service"},
		{"/sys/fs/cgroup/user.slice/kiln-serve.scope", "/sys/fs/cgroup/user.slice/kiln-serve.scope"},
		{"/sys/fs/cgroup", "/sys/fs/cgroup"},
	} {
		if got := delegatedCgroup(c.dir); got != c.want {
			t.Errorf("delegatedCgroup(%q) = %q, want %q", c.dir, got, c.want)
		}
	}
}
