// Package node describes one host that runs game servers: its name, its
// capacity (memory, disk), the game ports it hands out and where server
// roots live, and the runtime that starts servers there.
//
// Local is the only implementation today: the machine kiln serve runs on.
// The servers and gameserver packages reach a node only through the small
// interfaces they declare, so that a remote implementation (an HTTP client
// of `kiln agent` on another host) can stand in later without changing the
// lifecycle code.
//
// ReadCapacity and ListeningPorts measure a host for the cluster's
// reports (kiln serve's local node and kiln agent alike): memory total and
// available, the data file system's size and free space, and the ports of
// a range something listens on, read from /proc/net/tcp{,6} rather than by
// binding each port (which could take one from a server starting).
//
// It must never touch the database: which ports are taken is the servers
// table's business; a node only says which ports exist.
//
// It also owns two walls around the servers of the host: giving a root
// to its server's user (OwnTree, owner.go) and the network rules of the
// servers' users and containers (Egress, egress.go).
//
// Decisions:
//   - Egress is enforced by the kernel, on the servers' uids (nftables
//     meta skuid): a game server is arbitrary code, so no check inside
//     Kiln or the JVM can hold it. The rules are written as an nft script
//     and loaded with the nft command (nft -f: one transaction, so never a
//     moment without rules) rather than through a netlink library
//     (github.com/google/nftables): the script is what an operator reads
//     with nft list ruleset, the expressions used (fib, ct, skuid ranges,
//     anonymous sets, reject icmpx) are one line each in it and dozens of
//     hand-built expression structs in the library, and nft is Debian's
//     maintained tool for exactly this. Only packets of sockets a server's
//     user owns jump to the servers chain; packets without a socket (the
//     kernel's replies) never match.
//   - What servers reach: the internet, the node's game ports on any
//     local address (a proxy and its backends), port 53 of the name
//     servers, database hosts and the operator's entries. Refused: every
//     other local address and port, and the ranges remote downloads
//     refuse (internal/netguard's table), all of IPv6 outside 2000::/3.
//     Answers to connections players opened pass (ct established).
//   - One wall, two ways of finding whose traffic it is: the process
//     runtime's servers by their uids (output hook, meta skuid), the
//     docker runtime's containers by the bridge their packets come in
//     from (Egress.Bridge: the input hook for the host, the forward hook
//     for the rest, iifname). A container's uid is no use on the host
//     (the packet is forwarded, not sent by a local socket), and a
//     bridge of its own is what Docker gives a fixed name. Through the
//     host, connections translated to a published port pass (ct status
//     dnat) and nothing goes back to the bridge itself (containers meet
//     only through published ports). The bridge chains run at priority
//     filter - 10, before Docker's iptables-nft chains of the same hooks:
//     a packet must pass every base chain, so Docker's accepts cannot
//     undo a reject here, and the reject is at once, not after Docker's
//     silent drop of inter-container traffic.
package node
