package runtime

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The sandbox (doc.go, "Private /tmp"): a server with a user of its own
// starts through a trampoline, RunSandbox (`kiln sandbox-exec`), cloned
// into a mount namespace of its own (CLONE_NEWNS) as root. The
// trampoline makes its mount tree private, mounts fresh tmpfs on /tmp and
// /dev/shm, becomes the server's user and executes the game: the game is
// the process kiln (or its holder) started, same pid, same stdio.

const (
	// sandboxLaunchFD is where the trampoline reads its sandboxLaunch
	// (JSON; never on its command line, where every user could read the
	// game's environment).
	sandboxLaunchFD = 3
	// sandboxStatusFD is where it writes why it failed; it is closed on
	// exec, so that the end of it unread is the game running.
	sandboxStatusFD = 4
	// sandboxTimeout bounds the wait for the trampoline to exec the game.
	sandboxTimeout = 30 * time.Second
	// sandboxProbeArg asks the trampoline only to make its mounts (the
	// probe of a host, Process.sandbox).
	sandboxProbeArg = "--probe"
)

// sandboxLaunch is what the trampoline is given.
type sandboxLaunch struct {
	Path string   `json:"path"` // the game's command, as exec.Command found it
	Argv []string `json:"argv"`
	Env  []string `json:"env"`
	Dir  string   `json:"dir"` // the server's root, its working directory
	UID  uint32   `json:"uid"`
	GID  uint32   `json:"gid"`
}

// sandboxMount is one fresh tmpfs of the sandbox.
type sandboxMount struct {
	target string
	flags  uintptr
	data   string
}

// sandboxMounts are the sandbox's tmpfs, sized like the docker runtime's
// /tmp; /tmp allows exec (a JVM loads native libraries it unpacks there),
// /dev/shm does not. Their pages are charged to the memory cgroup of the
// process that writes them, the server's.
func sandboxMounts() []sandboxMount {
	return []sandboxMount{
		{target: "/tmp", flags: unix.MS_NOSUID | unix.MS_NODEV, data: "size=64m,mode=1777"},
		{target: "/dev/shm", flags: unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC, data: "size=16m,mode=1777"},
	}
}

// RunSandbox is what `kiln sandbox-exec` does: the trampoline a process
// runtime starts a server with a user of its own through
// (ProcessOptions.Sandbox). It is started as root in a mount namespace of
// its own, with its launch on descriptor 3 and descriptor 4 for its
// failure. It makes the mount tree private (nothing propagates to the
// host or from it), mounts the sandbox's tmpfs, becomes the server's
// user (no supplementary groups, its gid, its uid), sets no_new_privs
// and executes the game; it returns only on a failure, which it has
// written on descriptor 4. With --probe it makes the mounts and returns:
// the host allows the sandbox when that succeeds.
func RunSandbox(args []string) error {
	// Every step from here to the exec runs on this thread: the parent
	// death signal and no_new_privs belong to a thread, and the exec
	// must be made by the thread that has them.
	goruntime.LockOSThread()
	// Started by hand, it would mount on the host's /tmp.
	if err := ownMountNS(); err != nil {
		return err
	}
	if len(args) == 1 && args[0] == sandboxProbeArg {
		return mountSandbox(nil)
	}
	// Its launch and status come on pipes kiln made: by hand, 3 and 4
	// are whatever the shell has, and nothing is read or written there.
	if len(args) != 0 || os.Geteuid() != 0 || !isPipe(sandboxLaunchFD) || !isPipe(sandboxStatusFD) {
		return errors.New("usage: kiln sandbox-exec (run as root by kiln serve, not by hand)")
	}
	unix.CloseOnExec(sandboxStatusFD)
	err := sandboxExec()
	status := os.NewFile(sandboxStatusFD, "status")
	_, _ = io.WriteString(status, err.Error())
	status.Close()
	return err
}

// ownMountNS fails unless this process is in another mount namespace
// than its parent: the one it was cloned into.
func ownMountNS() error {
	self, err := os.Readlink("/proc/self/ns/mnt")
	if err != nil {
		return fmt.Errorf("read the mount namespace: %w", err)
	}
	parent, err := os.Readlink("/proc/" + strconv.Itoa(os.Getppid()) + "/ns/mnt")
	if err != nil {
		return fmt.Errorf("read the parent's mount namespace: %w", err)
	}
	if self == parent {
		return errors.New("kiln sandbox-exec runs in a mount namespace of its own, started by kiln serve, not by hand")
	}
	return nil
}

// isPipe reports whether descriptor fd is open on a pipe.
func isPipe(fd int) bool {
	var st unix.Stat_t
	return unix.Fstat(fd, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFIFO
}

// sandboxExec reads the launch, builds the sandbox and executes the game;
// it returns only on a failure.
func sandboxExec() error {
	// The parent that started us: if it dies before the game runs, so
	// must we (the parent-death signal is cleared by setuid, below).
	ppid := os.Getppid()
	f := os.NewFile(sandboxLaunchFD, "launch")
	var l sandboxLaunch
	err := json.NewDecoder(io.LimitReader(f, 16<<20)).Decode(&l)
	f.Close()
	if err != nil {
		return fmt.Errorf("read the launch: %w", err)
	}
	if l.Path == "" || len(l.Argv) == 0 || !filepath.IsAbs(l.Dir) {
		return errors.New("read the launch: no command or no root")
	}
	if l.UID == 0 || l.GID == 0 {
		return errors.New("read the launch: a server's user is never root")
	}
	exe := l.Path
	if !filepath.IsAbs(exe) {
		exe = filepath.Join(l.Dir, exe)
	}
	// The game's umask is kiln's; the directories made for the binds
	// (mountSandbox) are not to depend on it.
	umask := unix.Umask(0)
	err = mountSandbox([]string{l.Dir, exe})
	unix.Umask(umask)
	if err != nil {
		return err
	}
	if err := syscall.Setgroups([]int{}); err != nil {
		return fmt.Errorf("drop the supplementary groups: %w", err)
	}
	if err := syscall.Setgid(int(l.GID)); err != nil {
		return fmt.Errorf("set gid %d: %w", l.GID, err)
	}
	if err := syscall.Setuid(int(l.UID)); err != nil {
		return fmt.Errorf("set uid %d: %w", l.UID, err)
	}
	if err := unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(syscall.SIGKILL), 0, 0, 0); err != nil {
		return fmt.Errorf("set the parent-death signal: %w", err)
	}
	if os.Getppid() != ppid {
		return errors.New("the process that started the server has ended")
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("set no_new_privs: %w", err)
	}
	// Entered anew, as the server's user (as os/exec does) and in the
	// new mount tree: the working directory inherited was reached
	// through the host's /tmp when the root is below it, and ".." from
	// there would lead back into it.
	if err := unix.Chdir(l.Dir); err != nil {
		return fmt.Errorf("enter the server's root: %w", err)
	}
	err = syscall.Exec(l.Path, l.Argv, l.Env) // returns only on a failure
	return fmt.Errorf("exec %s: %w", l.Path, err)
}

// mountSandbox makes the mount tree private and mounts the sandbox's
// tmpfs. A mount point the host does not have is left out (there is
// nothing of the host's there to share). keep are paths (the server's
// root, its command) that stay visible where they are when they lie
// below a mount point: each is bound onto its path in the new tmpfs,
// below directories made for it (root's, 0711: passed through, nothing
// listed).
func mountSandbox(keep []string) error {
	if err := unix.Mount("none", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make the mount tree private: %w", err)
	}
	for _, m := range sandboxMounts() {
		target, err := filepath.EvalSymlinks(m.target)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return fmt.Errorf("mount a tmpfs on %s: %w", m.target, err)
		}
		var binds []heldPath
		for _, p := range keep {
			real, err := filepath.EvalSymlinks(p)
			if err != nil {
				continue // a missing command fails at the exec, as without a sandbox
			}
			if !below(real, target) || coveredBy(real, binds) {
				continue
			}
			hp, err := holdPath(real)
			if err != nil {
				closePaths(binds)
				return err
			}
			binds = append(binds, hp)
		}
		err = unix.Mount("tmpfs", target, "tmpfs", m.flags, m.data)
		if err == nil {
			for _, b := range binds {
				if err = b.bindBack(); err != nil {
					break
				}
			}
		} else {
			err = fmt.Errorf("mount a tmpfs on %s: %w", m.target, err)
		}
		closePaths(binds)
		if err != nil {
			return err
		}
	}
	return nil
}

// heldPath is a path below a mount point, held open (O_PATH) while a
// tmpfs covers it.
type heldPath struct {
	path string
	fd   int
	dir  bool
}

func holdPath(path string) (heldPath, error) {
	fd, err := unix.Open(path, unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		return heldPath{}, fmt.Errorf("keep %s: %w", path, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return heldPath{}, fmt.Errorf("keep %s: %w", path, err)
	}
	return heldPath{path: path, fd: fd, dir: st.Mode&unix.S_IFMT == unix.S_IFDIR}, nil
}

// bindBack binds the held path onto its own path, which a tmpfs covers
// now.
func (h heldPath) bindBack() error {
	if err := os.MkdirAll(filepath.Dir(h.path), 0o711); err != nil {
		return fmt.Errorf("keep %s: %w", h.path, err)
	}
	if h.dir {
		if err := os.Mkdir(h.path, 0o700); err != nil {
			return fmt.Errorf("keep %s: %w", h.path, err)
		}
	} else {
		f, err := os.OpenFile(h.path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
		if err != nil {
			return fmt.Errorf("keep %s: %w", h.path, err)
		}
		f.Close()
	}
	src := "/proc/self/fd/" + strconv.Itoa(h.fd)
	if err := unix.Mount(src, h.path, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("keep %s: %w", h.path, err)
	}
	return nil
}

func closePaths(hs []heldPath) {
	for _, h := range hs {
		unix.Close(h.fd)
	}
}

// below reports whether path lies strictly below dir.
func below(path, dir string) bool {
	return strings.HasPrefix(path, strings.TrimSuffix(dir, "/")+"/")
}

// coveredBy reports whether path is, or lies below, one of hs.
func coveredBy(path string, hs []heldPath) bool {
	for _, h := range hs {
		if path == h.path || below(path, h.path) {
			return true
		}
	}
	return false
}

// probeSandbox runs the trampoline sandbox with --probe in a mount
// namespace of its own: nil when the host lets it make the sandbox's
// mounts.
func probeSandbox(sandbox []string) error {
	cmd := exec.Command(sandbox[0], append(sandbox[1:], sandboxProbeArg)...)
	cmd.Dir = "/"
	cmd.Env = []string{}
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNS}
	out, err := cmd.CombinedOutput()
	if err != nil {
		if msg := strings.TrimSpace(string(out)); msg != "" {
			return fmt.Errorf("%w: %s", err, msg)
		}
		return err
	}
	return nil
}

// startSandboxed starts cmd (the trampoline, stdio and SysProcAttr set)
// with l and waits until it has executed the game, or returns why not.
func startSandboxed(cmd *exec.Cmd, l *sandboxLaunch) error {
	lr, lw, err := os.Pipe()
	if err != nil {
		return err
	}
	sr, sw, err := os.Pipe()
	if err != nil {
		lr.Close()
		lw.Close()
		return err
	}
	defer sr.Close()
	cmd.ExtraFiles = []*os.File{lr, sw} // descriptors 3 and 4
	cmd.SysProcAttr.Cloneflags |= syscall.CLONE_NEWNS
	err = startNoNewPrivs(cmd)
	lr.Close()
	sw.Close()
	if err != nil {
		lw.Close()
		return err
	}
	_ = lw.SetWriteDeadline(time.Now().Add(sandboxTimeout))
	werr := json.NewEncoder(lw).Encode(l)
	lw.Close()
	_ = sr.SetReadDeadline(time.Now().Add(sandboxTimeout))
	status, rerr := io.ReadAll(io.LimitReader(sr, 64<<10))
	if len(status) == 0 && rerr == nil && werr == nil {
		return nil // the status closed by the exec: the game runs
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	_ = cmd.Wait()
	switch {
	case len(status) > 0:
		return &sandboxError{msg: string(status)}
	case rerr != nil:
		return fmt.Errorf("start the server's sandbox: %w", rerr)
	}
	return fmt.Errorf("give the sandbox its launch: %w", werr)
}

// sandboxError is why the trampoline could not start the game in its
// sandbox, as it wrote it. It wraps no Errno: spawn must not take it for
// a refusal of CLONE_INTO_CGROUP.
type sandboxError struct{ msg string }

func (e *sandboxError) Error() string { return "start in the sandbox: " + e.msg }
