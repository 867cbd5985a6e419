// Package cluster is what the control plane (kiln serve) and its agents
// (kiln agent) share: the cluster's certificate authority and the
// certificates it signs, the join token, the TLS configurations of both
// sides and the messages of the node protocol. It holds no state and
// touches no database: the agent imports it (internal/agent's import test
// keeps the agent free of the database layer), the control plane's
// records of nodes are internal/nodes'.
//
// Who dials, and over what (decided for phase 1, meant to carry the
// later phases):
//   - The agent dials the control plane, never the reverse: a game host
//     behind NAT, or with no inbound port but its game ports, joins the
//     same way as any (Nomad's clients and k3s's agents dial their
//     servers too). The control plane needs one listener
//     (--cluster-addr), agents none.
//   - HTTP/2 over mutual TLS (TLS 1.3 only), with the standard library's
//     net/http on both sides: no home-made framing, and HTTP/2 gives
//     what the later phases need over the one connection an agent keeps:
//     many streams at once, each with its own flow control and
//     cancellation, so a 1 GiB download, a console stream and a power
//     call share the connection without one stalling the others, and
//     pings that notice a peer gone silent.
//   - Each agent holds one long-lived session (POST /v1/session): one
//     JSON object a line each way on one HTTP/2 stream. Up: a Hello (what
//     the node is: version, public host, SFTP address, port range,
//     runtime), then a Heartbeat every interval (memory and disk, total
//     and free, the busy ports of its range). Down: a Welcome (the
//     interval the control plane wants, from how soon it calls a silent
//     node unreachable: a sixth of it, at most 5 s), then an ack per
//     heartbeat recorded. An agent that hears nothing for three
//     intervals takes the control plane for gone and reconnects, with
//     backoff (500 ms doubling to 30 s, ±20 % jitter). The next phase
//     sends commands down the same stream; an operation carrying data
//     (a file, an archive, a console) gets its own stream, opened by the
//     agent in answer to the command and named by it, so data never
//     waits behind the session's small messages and the agent still
//     dials every connection.
//
// Trust:
//   - One CA per cluster, ECDSA P-256, valid 10 years, made by the first
//     kiln serve; its key is sealed with the control plane's secret key
//     in the database (internal/nodes) and never leaves the control
//     plane. The CA signs the control plane's server certificate (a
//     fresh key at each start, in memory only, 90 days, made again when
//     30 are left) and the nodes' client certificates (1 year).
//   - The server certificate names ServerName, one fixed DNS name, and
//     agents verify that name whatever address they dial (as Nomad's
//     "server.<region>.nomad"): a control plane behind NAT, a load
//     balancer or a changed address needs no new certificate. A node
//     certificate can never pass for it: the CA signs a node's request
//     for its key only — the subject is the node's name, the use client
//     authentication, nothing of the request is copied.
//   - Joining, as k3s's K10<ca-hash>::… tokens and kubeadm's
//     --discovery-token-ca-cert-hash do: the token is
//     KILN1<SHA-256 of the CA certificate's DER, hex>::<node>:<secret>.
//     The enrolling agent has no CA yet; in the TLS handshake it finds,
//     among the certificates the control plane sends, the CA whose
//     fingerprint is the token's, and checks the server certificate
//     against it (EnrollTLS). A control plane that is not the token's
//     fails the handshake, before any byte of the request — the token —
//     is written. The agent makes its key itself and sends a
//     certificate request (PKCS #10) with the token; the key never
//     leaves the agent. It pins the CA and keeps key and certificate in
//     its data dir.
//   - Every later call is mutual TLS: the agent verifies the control
//     plane against the pinned CA, the control plane the node's
//     certificate against its CA and then against its records (the
//     node's current certificate serial): removing a node revokes it at
//     once, with no revocation list to distribute.
//
// Not here yet: renewing a node's certificate before its year is out
// (the next phase renews it over the session), rotating the CA.
package cluster
