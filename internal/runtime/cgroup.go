package runtime

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

const (
	// DefaultCgroupRoot is where the cgroup filesystems are mounted.
	DefaultCgroupRoot = "/sys/fs/cgroup"
	// cpuPeriod is the CPU bandwidth period in µs; a server's quota is
	// CPUPercent*1000 µs of it, so 100 % is one core.
	cpuPeriod = 100_000
	// pidsLimit caps the processes and threads of one server, as the docker
	// runtime does by default: a fork bomb stops there.
	pidsLimit = 512
	// cgroupRemoveWait bounds the wait for killed processes to leave a
	// cgroup so that it can be removed.
	cgroupRemoveWait = 5 * time.Second
)

// cgroupHost is where the process runtime makes its servers' cgroups, as
// probeCgroups found it.
type cgroupHost struct {
	v2 bool
	// kiln holds the kiln cgroup under kiln's own: on v2 one directory; on
	// v1 one per hierarchy, memory, cpu and (when there is one) pids, in
	// that order.
	kiln []string
	// noCloneInto is set once a start with CLONE_INTO_CGROUP failed where
	// one without succeeded (a kernel before 5.7, a seccomp filter that
	// refuses clone3): later starts attach the pid after the start.
	noCloneInto atomic.Bool
}

// cgroup is the cgroup of one server: kiln/<server id> in every directory
// of cgroupHost.kiln.
type cgroup struct {
	host *cgroupHost
	dirs []string
}

// probeCgroups finds out whether servers can get cgroups under root (where
// the cgroup filesystems are mounted) and makes the kiln cgroup under the
// one kiln runs in. The error says why not.
func probeCgroups(root string) (*cgroupHost, error) {
	self, err := selfCgroups()
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(filepath.Join(root, "cgroup.controllers")); err == nil {
		path, ok := self[""]
		if !ok {
			return nil, errors.New("kiln's cgroup v2 path is missing from /proc/self/cgroup")
		}
		return probeV2(root, path)
	}
	return probeV1(root, self)
}

// probeV2 prepares the unified hierarchy mounted at root: kiln's cgroup
// (parent) must have the memory and cpu controllers, enables them (and pids
// when it can) for its children and for kiln/ below it.
func probeV2(root, self string) (*cgroupHost, error) {
	dir, err := cgroupDir(root, "cgroup2", "", self)
	if err != nil {
		return nil, err
	}
	parent := delegatedCgroup(dir)
	avail, err := readFields(filepath.Join(parent, "cgroup.controllers"))
	if err != nil {
		return nil, err
	}
	want := []string{"memory", "cpu"}
	for _, c := range want {
		if !slices.Contains(avail, c) {
			return nil, fmt.Errorf("the %s controller is not available in %s (not delegated to kiln's cgroup)", c, parent)
		}
	}
	if slices.Contains(avail, "pids") {
		want = append(want, "pids")
	}
	kiln := filepath.Join(parent, "kiln")
	if err := mkdirCgroup(kiln); err != nil {
		return nil, err
	}
	err = enableControllers(parent, want)
	if errors.Is(err, syscall.EBUSY) {
		// "No internal processes": a cgroup (other than the root) that holds
		// processes cannot enable controllers for its children, and kiln
		// itself is in parent. Alone there (a systemd unit with
		// Delegate=yes), it moves itself into a leaf, as systemd asks of
		// delegated services.
		if err = leaveCgroup(parent); err == nil {
			err = enableControllers(parent, want)
		}
	}
	if err != nil {
		return nil, err
	}
	if err := enableControllers(kiln, want); err != nil {
		return nil, err
	}
	if err := tryCgroup(kiln); err != nil {
		return nil, err
	}
	return &cgroupHost{v2: true, kiln: []string{kiln}}, nil
}

// probeV1 prepares the memory, cpu and pids hierarchies mounted under root;
// memory and cpu are required.
func probeV1(root string, self map[string]string) (*cgroupHost, error) {
	h := &cgroupHost{}
	for _, c := range []string{"memory", "cpu", "pids"} {
		required := c != "pids"
		path, ok := self[c]
		if !ok {
			if !required {
				continue
			}
			return nil, fmt.Errorf("no %s controller in /proc/self/cgroup (cgroup v1)", c)
		}
		parent, err := cgroupDir(filepath.Join(root, c), "cgroup", c, path)
		if err != nil {
			if !required {
				continue
			}
			return nil, err
		}
		if c == "cpu" {
			if _, err := os.Stat(filepath.Join(parent, "cpu.cfs_quota_us")); err != nil {
				return nil, fmt.Errorf("no CPU bandwidth control in %s (CONFIG_CFS_BANDWIDTH): %w", parent, err)
			}
		}
		kiln := filepath.Join(parent, "kiln")
		err = mkdirCgroup(kiln)
		if err == nil {
			err = tryCgroup(kiln)
		}
		if err != nil {
			if !required {
				continue
			}
			return nil, err
		}
		h.kiln = append(h.kiln, kiln)
	}
	return h, nil
}

// selfCgroups reads /proc/self/cgroup: the path of kiln's cgroup for each
// v1 controller, and under "" for the v2 hierarchy.
func selfCgroups() (map[string]string, error) {
	data, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return nil, err
	}
	m := map[string]string{}
	for line := range strings.Lines(string(data)) {
		// hierarchy-ID:controller-list:cgroup-path
		parts := strings.SplitN(strings.TrimSuffix(line, "\n"), ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[1] == "" {
			m[""] = parts[2]
			continue
		}
		for c := range strings.SplitSeq(parts[1], ",") {
			m[c] = parts[2]
		}
	}
	return m, nil
}

// cgroupDir returns the directory of the cgroup self (a path as
// /proc/self/cgroup gives it) in the filesystem of type fstype mounted at
// mount, which must carry controller (v1). A mount of a cgroup below the
// hierarchy's root (a container's view) is allowed for.
func cgroupDir(mount, fstype, controller, self string) (string, error) {
	mp, err := filepath.EvalSymlinks(mount)
	if err != nil {
		return "", fmt.Errorf("no cgroup filesystem at %s: %w", mount, err)
	}
	mroot, ok, err := cgroupMount(mp, fstype, controller)
	if err != nil {
		return "", err
	}
	if !ok {
		what := fstype
		if controller != "" {
			what += " " + controller
		}
		return "", fmt.Errorf("no %s filesystem is mounted at %s", what, mp)
	}
	rel := self
	if mroot != "/" {
		r, found := strings.CutPrefix(self, mroot)
		if !found || (r != "" && r[0] != '/') {
			return "", fmt.Errorf("kiln's cgroup %s is not inside the one mounted at %s (%s)", self, mp, mroot)
		}
		rel = r
	}
	dir := filepath.Join(mp, rel)
	if _, err := os.Stat(dir); err != nil {
		return "", fmt.Errorf("kiln's cgroup: %w", err)
	}
	return dir, nil
}

// cgroupMount reads /proc/self/mountinfo for the filesystem mounted at mp:
// whether it is of type fstype (and has controller among its options when
// that is set) and which directory of its hierarchy it shows.
func cgroupMount(mp, fstype, controller string) (root string, ok bool, err error) {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return "", false, err
	}
	for line := range strings.Lines(string(data)) {
		// id parent major:minor root mount-point options [optional...] - fstype source super-options
		pre, post, found := strings.Cut(strings.TrimSuffix(line, "\n"), " - ")
		f, g := strings.Fields(pre), strings.Fields(post)
		if !found || len(f) < 5 || len(g) < 3 || unescapeMount(f[4]) != mp {
			continue
		}
		// The last mount at a point is the one in sight.
		ok = g[0] == fstype && (controller == "" || slices.Contains(strings.Split(g[2], ","), controller))
		root = unescapeMount(f[3])
	}
	return root, ok, nil
}

// unescapeMount undoes the octal escapes (\040 for a space) of mountinfo.
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// mkdirCgroup creates a cgroup directory that may already exist.
func mkdirCgroup(dir string) error {
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("create cgroup: %w", err)
	}
	return nil
}

// tryCgroup creates and removes a cgroup in kiln: kiln/ may exist (made by
// an earlier kiln as root) where this one cannot create servers' cgroups.
func tryCgroup(kiln string) error {
	dir := filepath.Join(kiln, "probe-"+strconv.Itoa(os.Getpid()))
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("create cgroup: %w", err)
	}
	if err := syscall.Rmdir(dir); err != nil {
		return fmt.Errorf("remove cgroup %s: %w", dir, err)
	}
	return nil
}

// enableControllers enables the controllers want for the children of the
// v2 cgroup dir, those not yet enabled one at a time; only memory and cpu
// must succeed.
func enableControllers(dir string, want []string) error {
	on, err := readFields(filepath.Join(dir, "cgroup.subtree_control"))
	if err != nil {
		return err
	}
	for _, c := range want {
		if slices.Contains(on, c) {
			continue
		}
		if err := writeCgroup(dir, "cgroup.subtree_control", "+"+c); err != nil && c != "pids" {
			return fmt.Errorf("enable the %s controller: %w", c, err)
		}
	}
	return nil
}

// serveLeaf is the leaf of the delegated cgroup that kiln serve runs in
// (and the holders it starts), beside kiln/.
const serveLeaf = "kiln-serve"

// delegatedCgroup is the cgroup whose children kiln makes, given the v2
// cgroup dir kiln runs in: dir itself, or its parent when dir is the leaf
// kiln-serve. systemd puts kiln there when the unit says
// DelegateSubgroup=kiln-serve (docs/kiln.service), and must be able to
// start the next kiln there while game servers run on under their holders
// (KillMode=process): a process can only join a cgroup with no controllers
// enabled for its children, so the leaf must stay one, and the unit's
// cgroup, where the controllers are enabled, must hold no process.
func delegatedCgroup(dir string) string {
	if filepath.Base(dir) == serveLeaf {
		return filepath.Dir(dir)
	}
	return dir
}

// leaveCgroup moves kiln out of the v2 cgroup dir into the leaf
// dir/kiln-serve, when kiln is the only process in dir.
func leaveCgroup(dir string) error {
	procs, err := readFields(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return err
	}
	self := strconv.Itoa(os.Getpid())
	if !slices.Equal(procs, []string{self}) {
		return fmt.Errorf("cgroup %s holds processes other than kiln (give kiln a cgroup of its own, e.g. a systemd unit with Delegate=yes)", dir)
	}
	leaf := filepath.Join(dir, serveLeaf)
	if err := mkdirCgroup(leaf); err != nil {
		return err
	}
	if err := writeCgroup(leaf, "cgroup.procs", self); err != nil {
		return fmt.Errorf("move kiln into %s: %w", leaf, err)
	}
	return nil
}

// validCgroupName reports whether a server id can name a cgroup directory.
func validCgroupName(id string) bool {
	return id != "" && id != "." && id != ".." && len(id) <= 255 && !strings.ContainsAny(id, "/\x00\n")
}

// cgroup returns the cgroup of server id (which may not exist).
func (h *cgroupHost) cgroup(id string) *cgroup {
	cg := &cgroup{host: h}
	for _, k := range h.kiln {
		cg.dirs = append(cg.dirs, filepath.Join(k, id))
	}
	return cg
}

// create makes the cgroup of spec's server with its limits, after removing
// one left by a previous run (and killing what still ran in it).
func (h *cgroupHost) create(spec Spec) (*cgroup, error) {
	if !validCgroupName(spec.ServerID) {
		return nil, fmt.Errorf("server id %q cannot name a cgroup", spec.ServerID)
	}
	cg := h.cgroup(spec.ServerID)
	if err := cg.remove(); err != nil {
		return nil, fmt.Errorf("remove a leftover cgroup: %w", err)
	}
	for _, d := range cg.dirs {
		if err := os.Mkdir(d, 0o755); err != nil {
			_ = cg.remove()
			return nil, fmt.Errorf("create cgroup: %w", err)
		}
	}
	if err := cg.limit(spec); err != nil {
		_ = cg.remove()
		return nil, err
	}
	return cg, nil
}

// setting is one limit: value written to file in dir. An optional one is
// skipped when the file does not exist (no swap accounting).
type setting struct {
	dir, file, value string
	optional         bool
}

// limit writes the limits of spec: memory (and no swap), CPU quota, pids.
// A zero MemoryMB or CPUPercent leaves that resource unlimited.
func (cg *cgroup) limit(spec Spec) error {
	mem := strconv.FormatInt(int64(spec.MemoryMB)<<20, 10)
	quota := strconv.Itoa(spec.CPUPercent * 1000)
	var set []setting
	if cg.host.v2 {
		d := cg.dirs[0]
		if spec.MemoryMB > 0 {
			set = append(set, setting{d, "memory.max", mem, false}, setting{d, "memory.swap.max", "0", true})
		}
		if spec.CPUPercent > 0 {
			set = append(set, setting{d, "cpu.max", quota + " " + strconv.Itoa(cpuPeriod), false})
		}
		set = append(set, setting{d, "pids.max", strconv.Itoa(pidsLimit), true})
	} else {
		if spec.MemoryMB > 0 {
			// memsw (memory+swap) cannot be below the memory limit: set it after.
			set = append(set, setting{cg.dirs[0], "memory.limit_in_bytes", mem, false},
				setting{cg.dirs[0], "memory.memsw.limit_in_bytes", mem, true})
		}
		if spec.CPUPercent > 0 {
			set = append(set, setting{cg.dirs[1], "cpu.cfs_period_us", strconv.Itoa(cpuPeriod), false},
				setting{cg.dirs[1], "cpu.cfs_quota_us", quota, false})
		}
		if len(cg.dirs) > 2 {
			set = append(set, setting{cg.dirs[2], "pids.max", strconv.Itoa(pidsLimit), false})
		}
	}
	for _, s := range set {
		err := writeCgroup(s.dir, s.file, s.value)
		if err != nil && !(s.optional && errors.Is(err, fs.ErrNotExist)) {
			return fmt.Errorf("set %s: %w", s.file, err)
		}
	}
	return nil
}

// attach moves process pid (all its threads) into the cgroup.
func (cg *cgroup) attach(pid int) error {
	for _, d := range cg.dirs {
		if err := writeCgroup(d, "cgroup.procs", strconv.Itoa(pid)); err != nil {
			return fmt.Errorf("move process %d into %s: %w", pid, d, err)
		}
	}
	return nil
}

// memory is the memory charged to the cgroup (every process in it, page
// cache included) less the inactive file cache, as the docker runtime
// counts it: only that part of the cache is readily reclaimed.
func (cg *cgroup) memory() (int64, error) {
	usage, inactive := "memory.usage_in_bytes", "total_inactive_file"
	if cg.host.v2 {
		usage, inactive = "memory.current", "inactive_file"
	}
	data, err := os.ReadFile(filepath.Join(cg.dirs[0], usage))
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseInt(string(bytes.TrimSpace(data)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("read %s: %w", usage, err)
	}
	if v, ok := cg.stat("memory.stat", inactive); ok && v < n {
		n -= v
	}
	return n, nil
}

// oomKilled reports whether the kernel's OOM killer has killed a process
// in the cgroup for reaching its memory limit.
func (cg *cgroup) oomKilled() bool {
	file := "memory.oom_control" // oom_kill since Linux 4.13
	if cg.host.v2 {
		file = "memory.events"
	}
	n, ok := cg.stat(file, "oom_kill")
	return ok && n > 0
}

// stat reads the value of key in a flat-keyed file ("key value" lines) of
// the memory cgroup.
func (cg *cgroup) stat(file, key string) (int64, bool) {
	f, err := os.Open(filepath.Join(cg.dirs[0], file))
	if err != nil {
		return 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), " ")
		if k == key {
			n, err := strconv.ParseInt(v, 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}

// kill sends SIGKILL to every process in the cgroup: through cgroup.kill
// on v2 (Linux 5.14), which also catches processes forking meanwhile, else
// to each pid of cgroup.procs.
func (cg *cgroup) kill() {
	if cg.host.v2 && writeCgroup(cg.dirs[0], "cgroup.kill", "1") == nil {
		return
	}
	for _, d := range cg.dirs {
		pids, _ := readFields(filepath.Join(d, "cgroup.procs"))
		for _, s := range pids {
			if pid, err := strconv.Atoi(s); err == nil && pid > 0 {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
}

// remove kills what still runs in the cgroup and removes its directories,
// retrying while the killed processes leave (rmdir fails with EBUSY while a
// cgroup has tasks). A cgroup that does not exist is not an error.
func (cg *cgroup) remove() error {
	deadline := time.Now().Add(cgroupRemoveWait)
	for _, d := range cg.dirs {
		for {
			err := syscall.Rmdir(d)
			if err == nil || errors.Is(err, syscall.ENOENT) {
				break
			}
			if !errors.Is(err, syscall.EBUSY) || time.Now().After(deadline) {
				return fmt.Errorf("remove cgroup %s: %w", d, err)
			}
			cg.kill()
			time.Sleep(10 * time.Millisecond)
		}
	}
	return nil
}

// writeCgroup writes value to an existing control file of cgroup dir.
func writeCgroup(dir, file, value string) error {
	f, err := os.OpenFile(filepath.Join(dir, file), os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(value)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// readFields returns the whitespace-separated words of a control file.
func readFields(path string) ([]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return strings.Fields(string(data)), nil
}
