// Package nodes is the control plane's record of the cluster's nodes and
// its side of the node protocol (internal/cluster): the CA's custody, the
// nodes table, join tokens, enrollment, reports, and the node endpoint
// agents dial (kiln serve --cluster-addr). kiln admin node … works on the
// same tables, also while kiln serve runs.
//
// What it keeps:
//   - The CA (cluster_ca): made by the first kiln serve, its key sealed
//     with the secret key (internal/secretbox), opened only by a kiln
//     serve that serves the node endpoint (--cluster-addr): replicas
//     sharing PostgreSQL with different secret keys ran before clusters
//     and still do, as long as they do not serve it. kiln admin needs
//     only its certificate (the fingerprint a join token carries), not
//     the secret key.
//   - One row a node (nodes): the local node of each kiln serve (kind
//     local, named by --node-name, reported by RunLocal in-process) and
//     the agents (kind agent). An agent is added with a join token, of
//     which only the SHA-256 of its secret is kept, for an hour; it is
//     used by the first key that enrolls with it: that key may fetch its
//     certificate again (an agent killed between the control plane's
//     answer and its own write), any other is refused. The row holds
//     the serial of the node's current certificate: that is what makes
//     a certificate the CA signed a member's. Removing the row revokes
//     it, with no list to distribute: every call checks the serial, and
//     the endpoint checks the connections it holds every second, so a
//     removal by kiln admin (another process, maybe another machine)
//     cuts an open connection at once. A renewal (Renew, asked with the
//     current certificate) signs a certificate for the node's new key and
//     records its serial as pending (cert_next_serial): both are
//     accepted until a call comes with the pending one (Authorize), which
//     then becomes the current one and the older is refused (its
//     connections cut by the member check). A renewal whose answer was
//     lost is replaced by the next; the current certificate stays
//     accepted throughout, so no kill of either side leaves the agent a
//     certificate the row refuses.
//   - Reports: each heartbeat sets heartbeat_at and reachable_until =
//     now + the silence after which the control plane that took it calls
//     the node unreachable (--node-unreachable-after): a status is read
//     from the row alone, by kiln admin too, with no knowledge of the
//     flag and no process marking nodes down. Pending (not enrolled),
//     unreachable (past reachable_until), draining, ready — in that
//     order.
//   - Free ports are counted here: the ports of a node's range, less
//     those its servers hold and those its report says something on the
//     host listens on.
//
// The blob store marker (marker.go): a control plane serving the node
// endpoint writes an object of random bytes into its blob store once
// (cluster.MarkerKey, put if absent, so replicas sharing the store keep
// one) and names it, with its SHA-256, in every Welcome; agents refuse
// to serve when their own --blob-url does not hold it.
//
// It reads the servers table (internal/servers owns it) only to count
// what a node holds — servers, allocated memory, ports — for listing,
// placement and to refuse removing a node with servers (in the delete's own statement,
// so a server placed meanwhile keeps its node). It never writes it.
//
// What it must never do: send the CA's key anywhere, keep a join token's
// secret or log it, trust what a node says of itself beyond checking it
// (Hello and Heartbeat are validated: a game host runs code from the
// internet), or take a certificate the CA signed for a member's without
// its serial matching the row.
//
// Placement (placement.go) is the one place the node of a new server is
// chosen (servers.Create and CreateOwned call it):
//   - Candidates are the nodes this process can drive: the local node of
//     the kiln serve asked (NewPlacer's list) and the agents whose channel
//     reaches it (AlsoCandidates: Endpoint.Connected, asked at each
//     placement). A ready agent that is not one is refused with a sentence
//     saying so (its channel is elsewhere; or kiln serve has no
//     --cluster-addr), another replica's local node with one of its own.
//   - Of the candidates, a node takes a server when it is ready (not
//     pending, unreachable or draining) and: memory — its servers'
//     memory_mb (the heap asked; the JVM's own quarter is the margin an
//     operator leaves with --node-memory or an overcommit below 1) plus
//     the request at most its reported total (--node-memory, or the
//     machine's) × --memory-overcommit; disk — the request at most its
//     disk's total, not its free space: disk_mb is a ceiling the disk
//     ledger enforces, not space taken at creation, so limits add up past
//     the disk as a thin-provisioned volume's do, and a node whose disk is
//     full refuses writes (ENOSPC, 507) rather than servers; a game port
//     of its range that no server holds, its last report does not call
//     busy and the caller did not find taken (Request.Taken), or the one
//     asked; its runtime, when the request needs one. Of those, the most
//     memory free, then the first by name.
//   - None fits: *NoCapacityError, one refusal a node by name, every node
//     listed (the team learns why, as the API's NO_CAPACITY says). The
//     node asked for: *UnknownNodeError when there is none (400 at
//     node), else its own refusal.
//   - Place reads outside any transaction; the insert's transaction calls
//     Reserve, which takes the node's lock (a PostgreSQL advisory lock;
//     SQLite has one writer) and checks again what its servers hold, so
//     servers placed at once by several requests or replicas never take
//     more memory than the node has (ErrNoLongerFits: place again). The
//     unique (node, port) index settles a port.
//   - The software's runtime: every catalog profile runs on both
//     runtimes today (each lists docker images, and the process runtime
//     runs its start command with the host's Java; a chosen image is what
//     a docker node runs and a process node ignores), so servers asks for
//     none; Request.Runtime is honoured for the day one does.
//
// Calls down to agents (channel.go): each agent's channel (ALPN
// cluster.ChannelProto on the endpoint's listener) is checked as a
// session is — the CA, the row's serial, the member check every second —
// and kept as the node's channel in this process, a newer replacing an
// older. Client(node) is an HTTP client over it; a node without a live
// channel here is *UnavailableError at once, as is a call whose channel
// breaks under it (a silent peer within twice cluster.ChannelKeepalive);
// the caller's context bounds every call. Connected(node) says whether a
// node has one. Nothing waits for a node to come back: callers decide.
//
// The records of agents' game servers are served here too
// (EndpointOptions.Records, under PathRecordsPrefix), admitted as the
// session is; NodeName names the calling node to the handler, which
// answers only that node's servers (noderpc.RecordsHandler over
// servers.Service.NodeRecords).
//
// Not yet: several control-plane replicas sharing agents (an agent's
// session and channel are with the replica its --server reaches: the
// others answer UnavailableError for it).
package nodes
