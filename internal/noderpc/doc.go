// Package noderpc carries the node-local lifecycle of game servers
// (internal/gameserver) between the control plane and an agent, over the
// connections of internal/cluster:
//
//   - Down, on the channel the agent dials (cluster.ChannelProto, the
//     control plane the HTTP client): the Host's operations — power,
//     console command, console lines and their stream, install,
//     reinstall, remove and forget, live figures. HostHandler serves them
//     on the agent from its gameserver.Host; Remote is the control
//     plane's side, a servers.Driver for the servers of one agent node.
//   - Up, on the agent's own mutual-TLS client to the node endpoint: the
//     records the agent's Host reads and writes (gameserver.Records).
//     RecordsClient is the agent's side; RecordsHandler the control
//     plane's, answering from the database only for servers of the node
//     whose certificate made the call, so a game host reaches no other
//     node's servers and no team's anything else.
//
// The wire is plain HTTP/1.1-style requests over HTTP/2 with JSON bodies;
// a console stream is one JSON object a line (NDJSON), flushed as lines
// come. Errors travel as {error, code[, issues, software]} and are made
// again on the other side into the very values errors.Is and errors.As
// know (serverroot's and gameserver's sentinels, *gameserver.EULAError,
// *validate.Error), so internal/api answers a remote server's refusal as
// it answers a local one's. An error without a code reaches the caller as
// a plain error (500 INTERNAL in the API): its text is the agent's, which
// may name host paths, so it goes to the log, never to a team.
//
// Decisions:
//   - Live figures (CPU, memory, disk, uptime) of an agent's servers are
//     fetched together every few seconds by Remote.Run and read from that
//     copy (Resources), as the local Host samples in the background: a
//     list never waits on an agent. A node that does not answer keeps no
//     figures (zeros), and its servers read status "unknown" from the API
//     (the node's status, not this cache, says so).
//   - Operations on a root's files (Access, Reading, Hold, DiskUsage) are
//     not carried: files, SFTP and snapshots of an agent's servers run on
//     the agent itself (the next phase); until then Remote refuses them
//     with ErrNotHere.
//
// What it must never do: import the database layer (the agent links it:
// internal/agent's import test), or let a node name a server that is not
// its own in RecordsHandler.
package noderpc
