// Package cluster is what the control plane (kiln serve) and its agents
// (kiln agent) share: the cluster's certificate authority and the
// certificates it signs, the join token, the TLS configurations of both
// sides, the messages of the node protocol and the channel's HTTP/2 on
// each side (channel.go), and the reading of the blob store's marker
// (marker.go: the Welcome's BlobMarker, with which an agent proves it
// sees the control plane's store). It holds no state and touches no
// database: the agent imports it (internal/agent's import test
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
//     what the later phases need over the connections an agent keeps:
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
//     backoff (500 ms doubling to 30 s, ±20 % jitter).
//   - The control plane calls the agent over a second connection, the
//     channel (decided in phase 2, replacing phase 1's plan of commands
//     down the session's line stream): the agent dials --cluster-addr
//     again, mutual TLS as the session's, with the ALPN protocol
//     ChannelProto ("kiln-node/1") alone; on it the roles reverse: the
//     agent serves HTTP/2 (ServeChannel) with the handler it is given,
//     the control plane is the HTTP/2 client (ChannelClient). So each
//     call the control plane makes is a standard HTTP request: its own
//     stream with a method, path, status and headers, bodies streamed
//     both ways under HTTP/2 flow control (a 1 GiB download is never
//     held whole), long answers (a console) open as long as they last,
//     and cancellation as a stream reset that ends the agent handler's
//     context; no correlation ids, framing or cancellation of our own,
//     as a command protocol over the session would have needed. The
//     agent still dials every connection (NAT), and the control plane
//     still has one listener: it tells the channel from the HTTP/2 of
//     sessions and enrollment by the negotiated protocol
//     (http.Server.TLSNextProto).
//   - The channel's life and the session's: the agent opens the channel
//     once its first session is welcomed (the control plane took it as
//     a member), then holds each connection apart, each redialed with
//     the same backoff when it drops: a session ending (a control
//     plane whose database stopped acknowledging beats) does not cut a
//     console or a download in flight on the channel, nor the reverse.
//     Both end when the agent stops or is refused (Run returns). The
//     control plane keeps one live channel per node in each process (a
//     newer one replaces an older); a node with none is unavailable to
//     its calls at once, whatever its session says.
//   - net/http does both ends, with no other module:
//     golang.org/x/net/http2's Server.ServeConn and
//     Transport.NewClientConn, which take a connection as it is, are
//     deprecated in the x/net of go.mod in favour of net/http (staticcheck
//     reports each use). net/http speaks HTTP/2 with prior knowledge on
//     a connection it does not take for TLS (Protocols
//     UnencryptedHTTP2); both ends hand it the TLS connection behind a
//     plain net.Conn, the handshake done: the bytes are TLS's, the ALPN
//     protocol having said what follows. The agent serves it with
//     http.Server on a one-connection listener; the control plane makes
//     its client with http.Transport.NewClientConn, whose dial returns
//     the connection the agent dialed.
//   - A channel is checked as a session is (the CA in the handshake,
//     then the row's serial, and every second after) and keeps HTTP/2
//     pings both ways (ChannelKeepalive): a call on a channel whose peer
//     went silent fails within twice the keepalive, 10 s by default.
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
//   - Renewal: an agent renews its certificate when less than a third
//     of its life is left (RenewDue; four months of a year), checking at
//     its first welcome and every hour: a new key, a certificate request
//     sent with the current certificate (PathRenew). The control plane
//     accepts both certificates until it sees the new one, then the new
//     one alone; the agent writes the new pair beside the old and
//     renames it over it (internal/agent), so a kill of either side at
//     any moment leaves the agent a certificate the control plane
//     accepts. An agent whose certificate expired (off for over eight
//     months past its renewal point) cannot renew: it joins again.
//
// Not here yet: rotating the CA.
package cluster
