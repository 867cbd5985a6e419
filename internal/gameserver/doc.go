// Package gameserver runs the game servers of one node (Host): their
// lifecycle (installs, power, supervision with status pings, the crash
// restart policy, recovery after a restart of kiln, shutdown), their
// consoles, their live figures (CPU, memory, disk), the users they run as
// and what an operation on a root is given (Access, Reading, Hold). It
// reads and writes the servers' records only through Records, which
// internal/servers implements on the database for the local node of kiln
// serve; kiln agent will implement it over the node channel, so that a
// game host runs its servers without the database.
//
// Lifecycle: installing → offline → starting → running → stopping →
// offline; crashed when an instance ends unasked. "running" means the
// server answered a Server List Ping on its game port, not merely that a
// process exists. Every status change is recorded (Records.SetStatus)
// before it is announced, and the desired state (running/stopped) records
// what the user asked for, so a restart of kiln knows what to bring back.
//
// What it must never do: import the database layer, the secret box or a
// package that links them (internal/servers, internal/store:
// TestNodeLocalImportsNoDatabase in internal/serverroot checks it); write
// a record other than through Records; know teams (whoever names a server
// to a Host has checked its team) or HTTP; open a user-named path (the
// files package's resolver does that under the root); pick a runtime (the
// node has one); or report a status it has not verified.
//
// Decisions:
//   - The API is keyed by server id, with no team: internal/servers reads
//     the record to check the team, then calls the Host (its Driver), and
//     the Host reads the record again where it needs it (Power, a write's
//     Access, Reading, Hold) rather than trust a copy a caller passed: a
//     node another process drives will be asked by id too. A read's Access
//     reads no record at all.
//   - Record has exported fields with JSON names and no team, and holds
//     the env opened: sealing secrets is the keeper of the records'
//     business (internal/servers, with the control plane's secret key), so
//     a node never holds the key. A Record can travel to an agent as it is.
//   - Installs run in the background (Install, Reinstall) once the record
//     says installing; a failed install leaves offline plus install_error
//     (the reason, as a sentence) and refuses power start with
//     ErrInstallFailed until a reinstall succeeds. The installer writes
//     whole files only, so a failure never leaves half a jar. A reinstall
//     is recorded through Records.Reinstalling after its check and mark,
//     so the node, which holds the marks, decides whether it may begin. A
//     reinstall is refused (ErrSnapshotting) while a snapshot reads the
//     root whole (Reading), and a reading is refused while an install runs
//     (ErrInstalling): the check and the mark are one step under the
//     server's lock, so a snapshot never holds some files of each install.
//     The Reader also counts the server's status changes under the walk
//     (Changed), and the batches of files moved into the root meanwhile (a
//     staged tree committed: the disk ledger counts them), so the snapshot
//     can walk again rather than keep files a process changed or half a
//     modpack.
//   - A restore's hold (Hold) is checked and taken under the same lock as
//     Reinstall's check and mark: one of the two refuses. While held, no
//     process of the server starts: Power refuses a start, and a start
//     accepted just before the hold (or an automatic restart) is refused
//     when its turn comes, said in the console; the holder stops the
//     server through Held.Stop, which waits for a start in flight and
//     says whether the server ran or was asked to. The writers a hold must
//     end (SFTP sessions) are the caller's hooks (servers.Service.OnHold).
//   - What a team reads of a failure (its console, install_error) is a
//     sentence: an error in the chain that carries one (Public(): a
//     *runtime.Error of the container engine, a *blob.Error of the object
//     store behind the artifact cache) is told by it, its detail (engine
//     socket, host paths, S3 endpoint) going only to the log; other errors
//     are told as they are, the host's paths taken out.
//   - Restart policy: an unasked exit is restarted after a backoff
//     (Options.RestartBackoff, doubling) at most 3 times in 10 minutes; the
//     4th crash leaves the server crashed until a start by hand, which
//     resets the budget. A crashed server stays crashed across restarts of
//     kiln.
//   - The runtime's engine away longer than the runtime waits for it
//     (runtime.ErrEngineAway from a start or an instance's end) is not a
//     crash: the server waits offline, its desired state running and its
//     budget untouched, and is started once when the engine answers again
//     (awaitEngine; a restarted kiln starts it as any offline server meant
//     to run).
//   - Background work reads a server's record again after a transient
//     error of the records (getRetried) rather than taking it for deleted:
//     an install or a crash is never silently dropped. Nothing new is
//     added to the host's wait group once shutdown waits on it (track).
//   - A delete is two calls around the record's removal: Remove (desired
//     state stopped, an install cancelled, the server killed, its runtime
//     state removed) before, Forget (its streams ended, its root and user
//     removed) after; a crash between the two leaves only a root no record
//     names, which the next Run removes.
//   - Recovery (Run, before Recovered is closed, and before kiln serves
//     any request): what runs on without kiln is re-adopted: a
//     process-runtime server under its holder, a live docker container
//     (console re-attached, its last lines replayed first: the holder's
//     last 1,000, or the engine's log; then "[kiln] re-attached to the
//     running server"). One whose game ended while kiln was down is
//     adopted already ended: its exit is recorded then as any exit (a
//     crash restarts it). A server the runtime cannot re-adopt (its
//     holder gone, a process a kiln without holders left: killed by the
//     runtime, never adopted twice) is started again when its desired
//     state is running. Stored statuses are made true first: a killed
//     kiln leaves "running" behind. Roots without a record (a delete
//     interrupted after the record went) are removed, and holders without
//     one are ended with their games. The log says, one line a server,
//     what the start and the stop did (issue 33).
//   - Shutdown (the end of Run: SIGTERM, or a kill -9, crash or upgrade of
//     kiln): servers that run on without kiln (under holders, docker
//     containers; an instance says so: Outlives, where a container's says
//     nothing) keep running, so players stay connected, and are
//     re-adopted by the next start. Options.StopServersOnExit
//     (--stop-servers-on-exit) stops every server instead, as servers that
//     end with kiln (a process runtime without holders) always are: their
//     stop command, then a kill after StopTimeout. Their desired state
//     stays running, so the next start brings them back.
//   - Memory: memory_mb is the Java heap (Xms = Xmx); the runtime's hard
//     limit adds a quarter (at least 128 MiB) for the JVM's own needs.
//   - Console: a ring buffer of the last 2,000 lines per server (kept only
//     in memory; a restart of kiln starts it afresh with what the runtime
//     replays at the re-adoption) and subscribers for the SSE stream; a
//     subscriber that falls 512 events behind is dropped rather than
//     slowing the server. Deleting a server ends its streams.
//   - Live figures: CPU and memory are sampled every 5 s, disk every
//     minute, in the background, so a list never waits on a runtime or a
//     directory walk. Uptime counts from the attach, or from the
//     instance's own start when it says (StartedAt: a held process), so
//     that a re-adoption does not reset it. DiskUsage measures on demand;
//     Access gives writers (files, SFTP, snapshot restore) the free space
//     from the last walk plus Kiln's own writes since, and asks the
//     sampler for a new walk when that figure is older than 5 s: a save
//     never waits for a walk of a big world, at the price of a limit
//     checked against a figure up to one walk late for what the game
//     server itself wrote. Access and the errors of a root are
//     internal/serverroot's.
//   - The Minecraft EULA (issue 16): Power start and restart refuse a
//     server whose software needs it (catalog.Profile.NeedsEULA) with an
//     *EULAError (ErrEULANotAccepted) until its env says EULA=true;
//     checked before the install's outcome, since a reinstall would not
//     help. A start that does not come from Power (a crash restart,
//     recovery, after a reinstall) is refused the same way: the sentence
//     in the console, status offline, nothing run.
//   - Java on the process runtime: Options.Javas picks the java of the
//     major the install recorded (runtime.Javas.Home's rule), passed as
//     JAVA and JAVA_HOME; without a fit the start fails with the sentence
//     naming the major. Secret variables (RCON_PASSWORD) are left out of
//     the process environment: they reach the software through its config
//     file only.
//   - A user per server (users.go, Options.Users): on the process runtime
//     with kiln as root, each server runs as a uid of the operator's range
//     (gid the same number), recorded nowhere but as its root directory's
//     owner: only root can chown, so the game cannot change it, and the
//     record moves with the files. The root is 0700; before every start
//     the whole tree is given to that user (node.OwnTree), which is how
//     installers, restores and roots of older versions catch up, and
//     internal/files gives what it creates to the root's owner, so a file
//     written while the game runs is the game's to rewrite. Not in the
//     records: a second source of truth could disagree with the disk, and
//     uids are a node's business (another node picks its own when a server
//     moves there).
//   - The name: the game servers of a node, what every type is about; not
//     "server" (the HTTP and SFTP servers) nor "lifecycle" (the roots,
//     users and figures are more), and no name of the standard library.
package gameserver
