// Package runtime starts, watches and stops the processes of game servers.
// It defines the Runtime interface that a node uses and the process runtime
// (the default): the profile's command as a process group in the server's
// root, under a holder of its own that outlives kiln (`kiln shim`), console
// on stdin/stdout, limits from a cgroup of its own where the host allows
// one, stats from /proc and that cgroup. The docker runtime (subpackage
// docker) satisfies the same interface with a container per server.
//
// What it never does: decide policy. Whether to restart a crashed server,
// what "running" means (a status ping answered), what state to store and
// whether to stop servers when kiln exits are the servers package's
// business; a runtime only reports exits and output. A holder never
// outlives its game's collection, never lets its game outlive it, never
// reads the server's root, and never listens anywhere but its socket.
// The sandbox's trampoline never changes a mount of the host's (its own
// namespace, made private before anything is mounted), never runs
// anything but the game, and never executes it as root.
//
// Decisions for both runtimes:
//   - HOME: Spec.Env without HOME gets HOME set to the server root as the
//     instance sees it (WithHome): Root for the process runtime, the mount
//     point (/data) in a container. Only the runtime knows that path.
//   - Errors a team may read: a failure whose text would name something of
//     the host (an engine's address or socket, a host path, the engine's
//     own message) is an *Error: Reason, a sentence for the server's
//     console, and Err, the detail, which Error() also gives, for the log.
//
// Decisions for the process runtime:
//   - Holders (holder.go, held.go, holderproto.go; what kiln serve uses,
//     ProcessOptions.Holder): each server runs under a holder of its own, a
//     small process (`kiln shim DIR`, RunHolder) in the manner of
//     containerd's shim or conmon, so that game servers outlive kiln serve
//     (a crash, a kill -9, SIGTERM, an upgrade) and the next kiln
//     re-attaches to them without restarting them. kiln runs the holder
//     command (its own binary, /proc/self/exe, so the launch needs no
//     version), which starts itself again in a session of its own and
//     returns: the holder is no child of kiln's, nothing is left to reap,
//     and nothing sent to kiln's process group or session reaches it. The
//     launch (argv, environment, user, stop command, cgroup) comes on its
//     stdin, never on disk, as the environment may hold credentials; its
//     one report (the game's pid and start time, or why it did not start)
//     on its stdout; its environment is PATH alone (the game's command is
//     looked up there, as kiln did); its log is holder.log beside its
//     socket. The holder runs as kiln's user and starts the game exactly as
//     kiln starts a child (spawn: the server's uid and gid, no
//     supplementary groups, no_new_privs, its own process group, its cgroup
//     by CLONE_INTO_CGROUP or moved there, its root as working directory,
//     its private /tmp through the sandbox),
//     with SIGKILL as the parent-death signal relative to the holder: a game
//     never outlives its holder, so a holder gone is a game gone. The holder
//     stays in kiln's cgroup, not the server's: its memory and threads do
//     not count against the server's limits.
//   - A holder holds the game's stdin and its stdout and stderr (one pipe)
//     and keeps the last 1,000 console lines (capped as below), numbered
//     from 1, so that lines printed while kiln is down are replayed when it
//     re-attaches; a reader 1,000 lines behind misses lines, it never slows
//     the game. When the game ends (its output read to the end, its cgroup
//     emptied and removed) the holder records the exit and waits for kiln
//     to collect it, so that an exit while kiln was down is reported at the
//     re-attach; then it removes its socket and exits. kiln collects before
//     it closes Done: killed between the two, the exit is lost, and the next
//     kiln, finding no holder, starts the server again if it should run, as
//     after any lost holder. SIGTERM or SIGINT to a holder (a host shutting
//     down) ends its game with SIGTERM and the holder once the game has
//     ended, uncollected; SIGHUP is ignored.
//   - The socket is <StateDir>/<server id>/holder.sock, in directories only
//     kiln's user can enter (0700; kiln serve's <data-dir>/run, closed like
//     the rest of the data dir), never in the server's root, which its game
//     can write: whoever reaches a socket commands that server. A path too
//     long for a socket address is reached through /proc/self/fd.
//   - The protocol (holderproto.go) is versioned and stable: each
//     connection starts with the holder's greeting (protocol version, kiln
//     version, pid), then kiln's one request and the reply, in JSON lines:
//     status, attach (the console from a line number on, then the exit),
//     write, signal (TERM or KILL to the game's process group), release
//     (the exit is collected). Version 1 is frozen: fields may be added,
//     none removed or changed in meaning; a kiln speaks every version that
//     holders it may find speak, so an upgrade re-attaches. A holder of a
//     version this kiln does not speak (a downgrade) is ended with its game,
//     and the server started again.
//   - Ref is "holder:<game pid>:<start time>". Adopt asks the holder in the
//     server's directory for its status and re-attaches when it holds that
//     very process, its console replayed before Adopt returns (an ended
//     game: an instance already done, with its exit). A holder gone:
//     ErrNotAdoptable (its game went with it). A holder of another process
//     (a start whose ref a killed kiln never recorded) or of another
//     protocol: ended with its game, ErrNotAdoptable; the caller starts the
//     server again, never twice. For the same reason Start ends a holder it
//     finds in the server's directory before it starts one. Stats are read
//     by kiln from /proc and the cgroup of the game's pid, as for a child.
//     Close lets go of the held instances (their Done stays open; they run
//     on); Remove ends a holder still there and removes the directory.
//     StopHeld stops a held game without kiln serve (kiln admin node
//     stop-all): its stop command (Spec.StopCommand, kept by the holder),
//     SIGKILL after a timeout, the exit collected.
//   - An instance's Outlives method (held: true; a child: false) tells
//     the caller what ends with kiln, so must be stopped at its exit.
//   - Without holders (no ProcessOptions.Holder: a library use, the tests
//     of the child start), and for a ref of the older form "<pid>:<start
//     time>" (a kiln before holders, whose children died with it or were
//     stopped at its exit): children run in their own process group with
//     SIGKILL as the parent-death signal, so a kill -9 of kiln takes its
//     game servers with it instead of leaving them orphaned; pid reuse
//     makes the pid alone unsafe, hence the start time (field 22 of
//     /proc/<pid>/stat). Such a process cannot be re-attached: Adopt kills
//     a survivor matching ref, with its group and its cgroup, and reports
//     ErrNotAdoptable; the caller restarts.
//   - Console output lines are capped at 8 KiB (longer lines are split) so
//     a runaway server cannot make Kiln buffer without bound.
//   - Private /tmp (sandbox.go; ProcessOptions.Sandbox, kiln serve's
//     `/proc/self/exe sandbox-exec`). A server with a user of its own
//     (Spec.User: kiln runs as root) gets a mount namespace of its own in
//     which /tmp (64 MiB, exec allowed: a JVM loads native libraries it
//     unpacks there) and /dev/shm (16 MiB, noexec) are fresh tmpfs, both
//     nosuid,nodev, mode 1777, as the docker runtime gives a container:
//     one team's code cannot read what another's (or kiln, or the host's
//     software) leaves there, nor fill them for all, and their pages are
//     charged to the server's memory cgroup. A server without a user of
//     its own shares kiln's user, and so its /tmp: no sandbox.
//     os/exec runs nothing between clone and exec, and an unshare and
//     mounts on a thread of kiln would go back to the pool with it (and
//     the parent-death signal is tied to the thread that started the
//     child), so the game starts through a trampoline, RunSandbox, of
//     this same binary: started as root with CLONE_NEWNS (in the server's
//     cgroup, UseCgroupFD, in its process group, with the parent-death
//     signal and no_new_privs as any child), its environment empty, its
//     launch (command as exec.Command found it, argv, environment, root,
//     uid, gid) on descriptor 3, never on its command line. It makes /
//     rprivate (MS_REC|MS_PRIVATE: nothing propagates either way),
//     mounts the tmpfs, drops the supplementary groups, sets the gid and
//     the uid, sets the parent-death signal again (setuid clears it) and
//     ends if its parent is gone by then, sets no_new_privs, enters the
//     root anew (the inherited working directory may lie in the host's
//     /tmp, and ".." from it would lead back there) and executes the
//     game (syscall.Exec): the game is the process started, same pid,
//     same console pipes. A failure before the exec is written on
//     descriptor 4, closed by the exec: Start reads it to its end, so it
//     returns once the game runs, or fails with the trampoline's reason.
//     A root or a command below /tmp or /dev/shm (a data dir there) is
//     held open before the tmpfs covers it and bound back at its path,
//     below directories made 0711; nothing else of the host's below them
//     is seen. Holders run the same trampoline (their launch carries it;
//     /proc/self/exe is then the holder's binary, kiln's).
//     Where the host refuses it (a container without CAP_SYS_ADMIN, an
//     AppArmor or seccomp profile against mount): servers still start,
//     without a sandbox, and one error is logged. Decided so because
//     the same host refuses it for every server: a refusal would stop
//     every server of a kiln run in such a container, where today they
//     run, isolated by their users; the uid wall holds either way, and
//     the cgroups, which the same hosts often lack, are treated the same.
//     The host is probed once, at the first start with a user
//     (`sandbox-exec --probe` in a mount namespace: the mounts only);
//     once it passed, a trampoline that fails is that server's start
//     failing, with its reason.
//
// Limits of the process runtime. Memory is capped by the JVM flags (the
// servers package sizes the heap below Spec.MemoryMB) and, where the host
// allows, by a cgroup per server, kiln/<server id> under the cgroup kiln
// itself runs in (so nesting is legal in a delegated or containerised
// cgroup, and a non-root kiln with a delegated, writable cgroup gets limits
// too). The cgroup sets, as the docker runtime does:
//   - memory: Spec.MemoryMB MiB, and no swap where the host accounts swap
//     (v2 memory.max and memory.swap.max=0; v1 memory.limit_in_bytes and
//     memory.memsw.limit_in_bytes equal to it);
//   - CPU: a quota of Spec.CPUPercent*1000 µs per 100000 µs period, so 100
//     is one core (v2 cpu.max; v1 cpu.cfs_quota_us and cpu.cfs_period_us);
//   - pids: 512 processes and threads when the pids controller is there.
//
// A zero MemoryMB or CPUPercent leaves that resource unlimited. Kiln's own
// cgroup is found from /proc/self/cgroup and /proc/self/mountinfo (which
// tells where a container's view of the hierarchy starts);
// ProcessOptions.CgroupRoot (default /sys/fs/cgroup) is where the cgroup
// filesystems are looked for, so tests can point at one that is not.
//
// Versions. v2 is chosen when <CgroupRoot>/cgroup.controllers exists (the
// unified hierarchy at /sys/fs/cgroup); kiln's cgroup must list memory and
// cpu in cgroup.controllers, and the runtime enables them (and pids) in the
// subtree_control of kiln's cgroup and of kiln/. v2 forbids that in a
// cgroup that holds processes (other than the root): when kiln is the only
// process in its cgroup (a systemd unit with Delegate=yes) it moves itself
// into the leaf kiln-serve beside kiln/, as systemd asks delegated
// services to do; when others share it, there are no cgroups. Started in a
// cgroup named kiln-serve (the unit says DelegateSubgroup=kiln-serve,
// systemd 254 and later), kiln takes its parent for its own and stays in
// the leaf: that is what lets systemd start kiln again while game servers
// run on in kiln/ under their holders (which stay in kiln-serve), since v2
// lets no process join a cgroup that has controllers enabled for its
// children, such as the unit's once kiln has enabled them; without the
// subgroup, systemd puts the next kiln in the unit's cgroup and fails
// (status 219/CGROUP) until those servers have stopped. On v2 the
// child is created inside its cgroup (SysProcAttr.UseCgroupFD, clone3 with
// CLONE_INTO_CGROUP), so not one allocation or fork escapes the limits; if
// the kernel (before 5.7) or a seccomp filter refuses that, the runtime
// falls back for good to the v1 way. Otherwise (v1: the memory, cpu and
// pids hierarchies mounted at <CgroupRoot>/<controller>; a hybrid host,
// whose /sys/fs/cgroup/unified has no controllers, is v1) the pid is
// written to cgroup.procs of each right after the start.
// In that window, microseconds before a JVM has done anything of note, the
// child runs in kiln's cgroups: a process it forks then stays there, and
// memory it touches then stays charged there. On a loaded host the window
// can be milliseconds (TestProcessStats saw a helper allocate 16 MiB in
// it), so Stats reports the larger of the cgroup's usage and the main
// process's RSS rather than trusting the cgroup alone.
//
// Where the host does not allow cgroups (not root and nothing delegated, a
// read-only cgroupfs, a controller missing, kiln sharing a v2 cgroup with
// other processes), servers run without one: the runtime logs one warning
// (not one per start) that limits are not enforced and why, and never fails
// a start for it. The probe runs at the first Start or Adopt, creates the
// (empty) kiln/ cgroups, which are left in place, and creates and removes
// a cgroup in each (kiln/ made by an earlier kiln as root proves nothing).
// When the host has cgroups but one server's cannot be set up (an id that
// cannot name a directory, a quota the kernel refuses, such as one above
// that of kiln's own v1 cpu cgroup), that server runs without one, with a
// warning of its own at each start: it is about that server, not the host.
//
// Life of a server's cgroup: Start removes a leftover one (killing what
// still ran in it) and creates it with the limits. When the main process
// exits, whatever it left in its cgroup is killed, as the engine does when
// a container's first process ends: the server is over, and an orphan
// holding the console pipe would keep Done from closing. The cgroup is then
// removed (rmdir, retried for up to 5 s while killed processes leave)
// before Done is closed; under a holder the holder does it, before it
// records the exit, kiln running or not. An exit by SIGKILL with the
// cgroup's oom_kill count above zero is told as "killed (out of memory)",
// as by the docker runtime. Adopt of an older ref also empties and removes
// the cgroup of the server.
//
// Stats: memory is that of the cgroup when there is one (every process of
// the server, less the inactive file cache, as docker counts it:
// memory.current or memory.usage_in_bytes minus inactive_file from
// memory.stat), else the resident memory of the main process. CPU comes
// from /proc/<pid>/stat of the main process in both cases (a JVM is one
// process; its threads are counted).
//
// Java (java.go, installer.go; issue 16). Javas are the host's Java
// installations by major: those found under JavaDirs (/usr/lib/jvm,
// /usr/lib64/jvm: each directory with bin/java and a release file naming
// JAVA_VERSION), the one the java on PATH belongs to, and the operator's
// --java-home MAJOR=HOME, which wins. Decisions:
//   - The major a game version needs (the catalog's rule) is used when the
//     host has it; else, for 16 and newer, the lowest newer one (16 → 17,
//     17 → 21, 21 → 25), since Minecraft from 1.17 on runs on newer Java;
//     never a newer one for 8: Minecraft up to 1.16.5, and above all its
//     Forge (whose launcher casts the application class loader to
//     URLClassLoader), break on Java 9+. Without a fit the start fails
//     with a sentence naming the major and --java-home (ErrNoJava).
//   - InstallRunner runs the Forge and NeoForge installers (the Runner
//     seam of internal/catalog/install) with the same rule: on this host
//     with the java of that major (a minimal environment: PATH, HOME,
//     JAVA_HOME, proxy settings, never Kiln's), or, on the docker runtime,
//     in a container of the image for that major, through Runtime.Start
//     (the same mount, user, limits and hardening as the server; no port,
//     since Spec.Port 0 publishes nothing), removed afterwards. The game
//     version is read from the installer jar's install_profile.json
//     ("minecraft", or install.minecraft in the legacy installers of
//     1.7.10–1.12.2) rather than passed in: the jar is the authority, and
//     the Runner seam stays argv only. A crash of kiln mid-install leaves
//     a stopped kiln-install-<hex> container behind (no restart policy);
//     docker container prune removes it.
package runtime
