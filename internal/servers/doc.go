// Package servers owns game servers' records: who owns them, their
// limits, what the user asked for, where placement put them; and, for
// every operation on a server, the check of its team before its node's
// Driver is asked to act on it. The lifecycle of the servers of a node
// (installs, power, supervision, recovery, consoles, live figures, the
// users they run as, what an operation on a root is given) is
// internal/gameserver's: the local node's gameserver.Host, which
// NewService builds on this package's records (sqlRecords). It knows
// nothing of HTTP.
//
// What it must never do: run, stop or watch a game server itself (its
// node's Driver does), open a user-named path (the files package's
// resolver does that under the root), or hand a node a secret sealed (the
// records it gives a node hold the env opened, so no node needs the
// secret key).
//
// Decisions:
//   - The Driver seam: every operation on a server's processes, console or
//     root reads its record first (target/getLocal: the team's check),
//     then calls the Driver of the server's node by id (driverOf): the
//     local node's *gameserver.Host, or an agent's (Options.Remote:
//     noderpc.Remote over its channel, which answers
//     *nodes.UnavailableError at once when the agent is away); a node
//     this process drives neither way (another replica's local node) is
//     *OtherNodeError. Live figures come from the same driver. An agent
//     keeps its servers' records here through NodeRecords (its node's
//     servers only), and an agent's servers' addresses name its public
//     host (hostOf, read from the nodes table at most once a minute). The host reads the record again
//     where it needs it (a write's Access, Power, Reading, Hold): two
//     point reads, both of prepared statements (Get's and
//     sqlRecords.Server's).
//   - The lifecycle's errors and types (ErrOffline, ErrTooManyStreams,
//     ErrInstallFailed, ErrEULANotAccepted, EULAError, Event, Resources,
//     Disk, Reader, Held, UIDRange) are gameserver's, and those of a root
//     (Access, ErrNotFound, ErrInstalling, ErrRestoring, ErrSnapshotting)
//     internal/serverroot's, aliased here (the same types and values): the
//     node-local packages name them there, internal/api's error table and
//     the callers that hold a *Service keep these names, and errors.Is
//     matches either.
//   - Installs and reinstalls are recorded here (the insert; a reinstall
//     checked as Create checks, then recorded through
//     gameserver.Records.Reinstalling once the node has marked it) and run
//     by the node in the background after Create/Reinstall answer 202.
//   - A delete, once begun, runs to its end when its caller goes away
//     (bounded, 5 min): the OnDelete hooks, the node's Remove (the server
//     killed, its runtime state gone), the row, then the node's Forget
//     (streams, root, user). A crash after the row leaves a root no row
//     names, which the node removes at its next start.
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
//   - The Minecraft EULA (issue 16): a server whose software needs it is
//     created and installed whatever its env; its node refuses to start it
//     until its env says EULA=true (gameserver's doc.go).
//   - SetEnv (PATCH /servers/{id}) merges into env (nil unsets) with the
//     checks of Create, for servers made by hand (an owned one is changed
//     through its spec: ErrOwned). The update is conditional on the env
//     it was computed from (stored env = the marshalled map read), so two
//     concurrent PATCHes never lose one; it takes effect at the next
//     start, as a running server keeps its process.
//   - Secret variables (RCON_PASSWORD) are sealed by Options.Secrets (the
//     data dir's secret key) in the servers table: the row holds
//     "\x00sealed:v1:…" (NUL is refused in user values, so nothing a user
//     sets can pass for one); scan opens them (sealenv.go), and the
//     records a node is given (gameserver.Record) hold them opened.
//   - Every query is scoped by team id: a server of another team is simply
//     not found (ErrNotFound), never "forbidden".
package servers
