// Package docker is the docker runtime: it runs each game server in its own
// container on a Docker Engine and satisfies runtime.Runtime and
// runtime.Instance, like the process runtime of the parent package.
//
// What it owns: the containers named kiln-<server id> (and kiln-install-…
// for installer runs) that carry the labels
// kiln.managed=true and kiln.server=<server id>, their console stream (an
// attach of stdin, stdout and stderr) and the goroutine that waits for each
// one's exit; and the bridge network they all join (Options.Network,
// DefaultNetwork "kiln0", labelled kiln.managed=true). Nothing else on the
// engine: no other network, no image (but EnsureKilnImage's), no volume.
//
// What it must never do:
//   - pull an image: a missing image is an error that says so; images are
//     the operator's (or a test's) to load or build;
//   - run a container privileged, add a capability or loosen the engine's
//     default seccomp and AppArmor profiles;
//   - mount anything but the server's root, read-write at /data;
//   - touch a container that lacks its labels, even one named kiln-<id>
//     (that is an error, not something to remove);
//   - set a restart policy: restarts are the servers package's decision,
//     and an engine restarting a container behind kiln's back would fight it;
//   - shell out to the docker CLI;
//   - attach a container to any network but Kiln's (not Docker's default
//     bridge, not the host's), or change or remove a network it did not
//     make.
//
// Decisions:
//   - Installer containers (runtime.InstallRunner, server ids
//     "install-…") are removed when their run ends; those a killed kiln
//     left are removed at the next start once ended (RemoveEndedInstallers);
//     a running one is never touched (it may be another kiln's).
//   - Client: github.com/moby/moby/client, the maintained Engine API client;
//     github.com/docker/docker is deprecated and frozen since Docker v29.
//     The API version is negotiated at New (the client speaks 1.40 to
//     1.56; the engine this was written against speaks 1.41).
//   - Options.Host empty lets the client read DOCKER_HOST, DOCKER_TLS_VERIFY,
//     DOCKER_CERT_PATH and DOCKER_API_VERSION, the convention of every
//     Docker tool, and the one place where this package reads the
//     environment; a --docker-host flag wins over all of them.
//   - Console: Tty is off so stdout and stderr arrive as the engine's
//     multiplexed stream, split with stdcopy (a TTY would echo input and
//     rewrite newlines). Start attaches before it starts the container, so
//     no early line is missed. Adopt (after a restart of kiln) first
//     replays the container's last 2,000 lines from the engine's json-file
//     log (5 MB, one file; also what `docker logs` shows), up to the moment
//     before it attaches, and holds the live lines until that replay is
//     delivered: the console reads as if kiln had never gone (a line said
//     during the attach itself may be missing, none is doubled; the cut is
//     this machine's clock, so a remote engine whose clock is off by more
//     than the attach takes may drop or repeat a few lines). Lines are
//     capped at 8 KiB, as in the process runtime.
//   - Exit: the wait is registered before the start with condition
//     next-exit (not-running would answer at once for a created container).
//     The engine reports 128+N when the main process died of signal N; that
//     is reported as the signal (Code -1) when Kiln sent it (Stop, Kill) or
//     when inspect says the OOM killer struck ("killed (out of memory)"),
//     and as the plain code otherwise.
//   - Detach, not stop: containers outlive kiln serve. Container.Detach and
//     Docker.Close close the console stream and end the goroutines but
//     leave the containers running; the next kiln serve re-attaches with
//     Adopt (by container id, else by name).
//   - The container is told no host path: HOME is /data (where the root is
//     mounted; runtime.WithHome, unless Spec.Env sets one), the working
//     directory /data, and the servers package gives relative paths and
//     the image's own kiln binary in the command.
//   - Errors of Start and of a container's end are *runtime.Error: the
//     team's console reads "the container engine is unavailable" (or did
//     not answer in time, or failed to create/start the server's
//     container, or the image is missing), never the engine's message,
//     which names its socket or address (client.IsErrConnectionFailed),
//     host paths and other containers; that detail is logged.
//   - Stop timeout: the container's (Config.StopTimeout) is
//     Options.StopTimeout, which kiln serve sets to the servers' stop grace
//     (servers.DefaultStopTimeout, 30 s): Stop is Kiln's SIGTERM and Kiln
//     kills after that grace, but when the engine stops a container
//     itself (docker stop, the engine shutting down) it would otherwise
//     kill it after its own 10 s, in the middle of a world save.
//   - The engine going away (a restart, an upgrade, a crash) is not the
//     end of a container. A wait that fails (the engine closed its
//     connection) makes the container's watcher wait for the engine,
//     pinging it after 100 ms, then twice as long each time up to 5 s,
//     for at most Options.EngineWait (DefaultEngineWait, 5 min), then look
//     at the container again: still running (live-restore), the console
//     and the wait are re-attached and a signal Kiln sent meanwhile is
//     sent again; ended (the engine stopped it, or killed it when it came
//     back without live-restore), that end is reported; gone or no engine
//     in time, an error saying so. An engine that is shutting down first
//     closes its listener, then stops its containers, and still answers
//     on the connections already open: so when a container ends without
//     a signal of Kiln's, the engine is pinged on a new connection
//     (answers, never one the client keeps alive), and if it no longer
//     takes one, the end is reported only once it is back. The servers
//     package's restart then finds an engine that answers: the server
//     comes back once, instead of a start failing against the departing
//     engine and leaving it crashed. Start too, when the engine does not
//     answer, waits for it (within ctx and EngineWait) and tries once
//     more. Meanwhile the server's status stays what it was, and its
//     console says that the engine is awaited. A team's console reads
//     those lines, never the engine's address.
//   - Start replaces a leftover container of the same server, even a
//     running one (with a warning): the caller has decided to start, and
//     the leftover would hold the port.
//
// Hardening, for hosts shared by tenants who control what their server runs
// (plugins, mods), each item and why:
//   - CapDrop ALL: a game server needs no capability; this removes among
//     others NET_RAW (forged packets on the bridge), CHOWN, DAC_OVERRIDE,
//     SETUID/SETGID, MKNOD and KILL.
//   - no-new-privileges: a setuid binary in the image cannot raise
//     privileges back.
//   - ReadonlyRootfs with a tmpfs /tmp (64 MiB, nosuid, nodev, mode 1777):
//     the image cannot be altered to persist something across restarts or
//     to fill the engine's disk outside the server's own accounting; writes
//     go to /data (the server root, which Kiln measures) or to /tmp, which
//     is memory charged to the container. /tmp keeps exec because JVMs
//     extract native libraries there (netty, sqlite-jdbc).
//   - PidsLimit (Options.PidsLimit, default 512 as in Wings): a fork bomb
//     stops at the limit instead of taking the host down (Wings advisory
//     CVE-2021-32699).
//   - Memory = MemorySwap = Spec.MemoryMB: a hard limit with no swap, so
//     one server cannot push the host into swapping.
//   - CPUPeriod 100000 and CPUQuota = CPUPercent*1000: CPUPercent is percent
//     of one core, 100 = one core, as in runtime.Spec.
//   - Not privileged; the engine's default seccomp and AppArmor profiles.
//   - Init (the engine's docker-init, tini): PID 1 forwards Stop's SIGTERM
//     (a program as PID 1 without a handler would ignore it) and reaps
//     zombies. It needs docker-init on the host, which Docker packages ship.
//   - The image's entrypoint is cleared: Spec.Argv is the whole command, as
//     in the process runtime, so argv[0] must exist in the image.
//   - A numeric user (Options.User), never a name: a name depends on the
//     image's /etc/passwd, and a bare uid would silently get group 0.
//
// The user: a Spec with a User of its own (servers.Options.Users, kiln
// running as root: the default) runs its container as that uid:gid, the
// owner of its root (servers.runAs made it so, mode 0700, before the
// start): the game server can write its files, and what Kiln writes into
// the root while it runs (internal/files gives new entries the root's
// owner) is the server's too, so the game rewrites it in place (an edited
// whitelist is not lost at the next save). Code that escaped its
// container would still be a user of its own, not root nor another
// server's uid, as on the process runtime. Such a root is never handed
// over (below): runAs did it, files with several links excepted.
//
// Without one (users off, kiln not root, installers): Options.User, empty
// meaning kiln's own uid:gid. The server root is created and filled by
// kiln (installs, the file API, SFTP, backups), so the same owner on both
// sides means the game server can write its files and kiln can read,
// change and delete what the server wrote, with no chown. When kiln runs
// as root without users of their own that would make the game server uid
// 0 (without capabilities, but still root towards any file it can reach),
// so New warns (not with Options.ServerUsers: then only installers run
// so, into a directory of Kiln's); the operator should then set a
// non-root uid:gid (--docker-user, with --uid-range off). Start then hands
// the server root to that uid:gid (lchown of every entry not yet owned by
// it, symlinks never followed), as Wings does at boot: kiln, as root,
// still manages every file, and the game server can write.
//
// Images: kiln never pulls. EnsureKilnImage builds the kiln-test image
// (KilnTestImage) FROM scratch around kiln's own binary, which must then be
// statically linked (CGO_ENABLED=0); kiln serve --dev --runtime docker does
// it at start when the image is missing.
//
// Ports: Spec.Port is published for TCP and UDP (query protocol, Bedrock
// and voice-chat plugins use UDP) on Spec.BindHost:Port to the same port
// inside the container, so the port the server is configured with is the
// one players use. BindHost must be an IP address (empty: every
// interface); a host name is refused rather than resolved, since a public
// name may not resolve to a local address.
//
// Network: every container joins Kiln's bridge network, made by New when
// missing, never Docker's default bridge, where inter-container traffic
// is on and one team's code reached another's RCON. Its options:
//   - com.docker.network.bridge.enable_icc=false: the engine drops traffic
//     between containers of the network; they meet only through published
//     ports, as players do.
//   - com.docker.network.bridge.name = the network's name: the bridge
//     interface has a fixed, known name, so host rules can match the
//     traffic that comes in from it (iifname). That is why the name is at
//     most 15 characters (an interface name) and lower-case.
//
// The rules themselves are not this package's: they are node.Egress with
// its Bridge set (the same "what a server reaches" as the process
// runtime's, on the packets from the bridge instead of the sockets of the
// servers' users), loaded by kiln serve, which also refreshes the
// database hosts in them. The runtime would otherwise need nft, root and
// the node's port range, and a remote engine's bridge is not on this host
// at all. An existing network of the name is used as it is when Kiln made
// it with those options; anything else is an error that says so (a
// network of another's, or one whose containers could meet, is not
// repaired behind its owner's back). The engine picks the subnet from its
// address pools (it avoids the host's routes).
package docker
