// Package servers owns game servers: their records (who owns them, their
// limits, what the user asked for), their lifecycle on a node, their
// console and their live figures. It knows nothing of HTTP.
//
// Lifecycle: installing → offline → starting → running → stopping →
// offline; crashed when an instance ends unasked. "running" means the
// server answered a Server List Ping on its game port, not merely that a
// process exists. Every status change is written to the database before it
// is announced, and desired_state (running/stopped) records what the user
// asked for, so a restart of kiln serve knows what to bring back.
//
// What it must never do: open a user-named path (the files package's
// resolver does that under Root), pick a runtime (the node has one), or
// report a status it has not verified.
//
// Decisions:
//   - Installs run in the background after Create/Reinstall answer 202; a
//     failed install leaves offline plus install_error (the reason, as a
//     sentence) and refuses power start with ErrInstallFailed until a
//     reinstall succeeds. The installer writes whole files only, so a
//     failure never leaves half a jar. A reinstall is refused
//     (ErrSnapshotting) while a snapshot reads the root whole (Reading),
//     and a reading is refused while an install runs (ErrInstalling): the
//     check and the mark are one step under the server's lock, so a
//     snapshot never holds some files of each install. The Reader also
//     counts the server's status changes under the walk (Changed), and
//     the batches of files moved into the root meanwhile (a staged tree
//     committed: the disk ledger counts them), so the snapshot can walk
//     again rather than keep files a process changed or half a modpack.
//   - A restore's hold (Hold) is checked and taken under the same lock as
//     Reinstall's check and mark: one of the two refuses. While held, no
//     process of the server starts: Power refuses a start, and a start
//     accepted just before the hold (or an automatic restart) is refused
//     when its turn comes, said in the console; the holder stops the
//     server through Held.Stop, which waits for a start in flight and
//     says whether the server ran or was asked to.
//   - What a team reads of a failure (its console, install_error) is a
//     sentence: an error in the chain that carries one (Public(): a
//     *runtime.Error of the container engine, a *blob.Error of the object
//     store behind the artifact cache) is told by it, its detail (engine
//     socket, host paths, S3 endpoint) going only to the log; other errors
//     are told as they are.
//   - Restart policy: an unasked exit is restarted after a backoff
//     (Options.RestartBackoff, doubling) at most 3 times in 10 minutes; the
//     4th crash leaves the server crashed until a start by hand, which
//     resets the budget. A crashed server stays crashed across restarts of
//     kiln serve.
//   - The runtime's engine away longer than the runtime waits for it
//     (runtime.ErrEngineAway from a start or an instance's end) is not a
//     crash: the server waits offline, its desired state running and its
//     budget untouched, and is started once when the engine answers again
//     (awaitEngine; a restarted kiln starts it as any offline server meant
//     to run).
//   - Background work reads a server's record again after a transient
//     database error (getRetried) rather than taking it for deleted: an
//     install or a crash is never silently dropped. A delete, once begun,
//     runs to its end when its caller goes away (bounded, 5 min). Nothing
//     new is added to the service's wait group once shutdown waits on it
//     (track).
//   - Recovery (Run, before Recovered is closed, and before kiln serve
//     answers any request): what runs on without kiln is re-adopted: a
//     process-runtime server under its holder, a live docker container
//     (console re-attached, its last lines replayed first: the holder's
//     last 1,000, or the engine's log; then "[kiln] re-attached to the
//     running server"). One whose game ended while kiln was down is
//     adopted already ended: its exit is recorded then as any exit (a
//     crash restarts it). A server the runtime cannot re-adopt (its
//     holder gone, a process a kiln without holders left: killed by the
//     runtime, never adopted twice) is started again when its desired
//     state is running. Stored statuses are made true first: a killed
//     kiln leaves "running" behind. Roots without a server row (a delete
//     interrupted after the row went) are removed, and holders without
//     one are ended with their games.
//   - Shutdown (SIGTERM of kiln serve, or its kill -9, crash or upgrade):
//     servers that run on without kiln (under holders, docker containers;
//     an instance says so: Outlives, where a container's says nothing)
//     keep running, so players stay connected, and are re-adopted by the
//     next start. Options.StopServersOnExit (--stop-servers-on-exit)
//     stops every server instead, as servers that end with kiln (a
//     process runtime without holders) always are: their stop command,
//     then a kill after StopTimeout. Their desired state stays running,
//     so the next start brings them back.
//   - Placement (Options.Placement, internal/nodes' Placer) chooses the
//     node and game port of every new server, made by hand or by a run
//     (Create, CreateOwned; NewServer.Node asks for one): servers never
//     chooses them itself. Its only candidate is this service's node until
//     servers run on agents. The port is the lowest of the node's range
//     that no server holds and the node's last report does not call busy;
//     servers then probes it on this host (every interface), and one that
//     is busy is marked taken and placement asked again. The insert's
//     transaction calls Reserve, which checks the node's room again under
//     the node's lock, and the unique (node, port) index settles a race
//     between replicas for a port: either way placement is asked again.
//     A disk_mb beyond the node's disk finds no node at creation; a change
//     of an owned server's limits is checked against its node's disk
//     (checkNodeDisk).
//   - Memory: memory_mb is the Java heap (Xms = Xmx); the runtime's hard
//     limit adds a quarter (at least 128 MiB) for the JVM's own needs.
//   - Console: a ring buffer of the last 2,000 lines per server (kept only
//     in memory; a restart of kiln starts it afresh with what the runtime
//     replays at the re-adoption) and subscribers for
//     the SSE stream; a subscriber that falls 512 events behind is dropped
//     rather than slowing the server. Deleting a server ends its streams.
//   - Live figures: CPU and memory are sampled every 5 s, disk every
//     minute, in the background, so a list never waits on a runtime or a
//     directory walk. Uptime counts from the attach, or from the
//     instance's own start when it says (StartedAt: a held process), so
//     that a re-adoption does not reset it. DiskUsage measures on demand; Access gives writers
//     (files, SFTP, snapshot restore) the free space from the last walk
//     plus Kiln's own writes since, and asks the sampler for a new walk
//     when that figure is older than 5 s: a save never waits for a walk of
//     a big world, at the price of a limit checked against a figure up to
//     one walk late for what the game server itself wrote. Access and
//     the errors of a root (ErrNotFound, ErrInstalling, ErrRestoring,
//     ErrSnapshotting) are internal/serverroot's, aliased here (the same
//     type and values): files, archives, snapshot restore, pull's
//     transfers and sftp's handlers import serverroot, not this package
//     and its database.
//   - Ownership (owned.go): a server a deployment run makes carries its
//     configuration id and resource key ("server/lobby"); CreateOwned finds
//     the one made for a key before making one, and the partial unique
//     index servers_owned settles a race, so a step resumed after a crash
//     never makes a second. It is an ordinary server in the API (files,
//     console, power work on it); a delete by hand is refused with an
//     OwnedError naming the configuration and key (409), and only
//     DeleteOwned — a run — removes it.
//   - Team limits (limits.go): servers, total memory and total disk per
//     team, checked in the insert's transaction (an advisory lock per team
//     on PostgreSQL: the team row itself is updated by the servers_version
//     trigger, and locking it FOR UPDATE deadlocked with status updates).
//   - The Minecraft EULA (issue 16): a server whose software needs it
//     (catalog.Profile.NeedsEULA) is created and installed whatever its
//     env, but Power start and restart refuse it with an *EULAError
//     (ErrEULANotAccepted; 409 EULA_NOT_ACCEPTED in the API) until its env
//     says EULA=true; checked before the install's outcome, since a
//     reinstall would not help. A start that does not come from Power (a
//     crash restart, recovery, after a reinstall) is refused the same way:
//     the sentence in the console, status offline, nothing run.
//   - SetEnv (PATCH /servers/{id}) merges into env (nil unsets) with the
//     checks of Create, for servers made by hand (an owned one is changed
//     through its spec: ErrOwned). The update is conditional on the env
//     it was computed from (stored env = the marshalled map read), so two
//     concurrent PATCHes never lose one; it takes effect at the next
//     start, as a running server keeps its process.
//   - Java on the process runtime: Options.Javas picks the java of the
//     major the install recorded (runtime.Javas.Home's rule), passed as
//     JAVA and JAVA_HOME; without a fit the start fails with the sentence
//     naming the major. Secret variables (RCON_PASSWORD) are left out of
//     the process environment, and sealed by Options.Secrets (the data
//     dir's secret key) in the servers table: the row holds
//     "\x00sealed:v1:…" (NUL is refused in user values, so nothing a user
//     sets can pass for one); scan opens them (sealenv.go).
//   - Every query is scoped by team id: a server of another team is simply
//     not found (ErrNotFound), never "forbidden".
//   - A user per server (users.go, Options.Users): on the process runtime
//     with kiln as root, each server runs as a uid of the operator's range
//     (gid the same number), recorded nowhere but as its root directory's
//     owner: only root can chown, so the game cannot change it, and the
//     record moves with the files. The root is 0700; before every start
//     the whole tree is given to that user (node.OwnTree), which is how
//     installers, restores and roots of older versions catch up, and
//     internal/files gives what it creates to the root's owner, so a file
//     written while the game runs is the game's to rewrite. Not in the
//     database: a second source of truth could disagree with the disk, and
//     uids are a node's business (another node picks its own when a server
//     moves there).
package servers
