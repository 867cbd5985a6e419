// Package connlimit caps the connections a listener lets in: how many are
// counted at once in all, and how many from one source address (an IPv4
// address, an IPv6 client's /64). A connection over a cap is closed at
// once, before anything is read from it or sent to it. Refusals are
// logged at most once per interval (a flood is one line, not one per
// connection) and counted.
//
// It owns the count (Limiter: Take, Slot.Release), the listener wrapper
// that takes a slot per accepted connection and gives it back when the
// connection closes (Listener), and the refusals' log and counter. The
// HTTP API counts every open connection with it; the SFTP server counts
// the connections that have not logged in yet (the slot goes back at
// login, so sessions are limited elsewhere: internal/sftp).
//
// What it must never do: read from or write to a connection (the caller's
// protocol owns every byte), take a lock or allocate on the connection's
// traffic (its cost is at accept and at close only: the API serves tens
// of thousands of requests a second over kept-alive connections), log a
// line per refused connection, or keep an address after its last
// connection closed (the table holds only addresses with connections
// open, so it is bounded by the caps).
//
// Decisions:
//   - Addresses are counted by netip.Prefix: an IPv4 address (/32; an
//     IPv4-mapped IPv6 address counts as its IPv4 address) or an IPv6
//     /64, since one IPv6 host has a whole /64 to rotate through (the
//     SFTP lockout counts the same way). A listener of another kind
//     (unix socket) counts all its connections as one address.
//   - A refused connection is closed with SO_LINGER 0 (a reset, no
//     TIME_WAIT kept on our side): the client learns at once, and a flood
//     leaves nothing behind.
//   - The wrapped connection keeps what net/http looks for on a
//     *net.TCPConn: io.ReaderFrom (sendfile for downloads) and CloseWrite
//     (a graceful close after an error answer).
//   - Refusals log the first at once (Warn, with its address and which
//     cap), then at most one line per LogEvery (10 s) with how many were
//     refused since, from how many addresses, and the last one; the
//     last summary is written when the Limiter closes, and nothing after
//     (no timer outlives Close).
package connlimit
