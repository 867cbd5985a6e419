// Package slp speaks the Minecraft Java Edition Server List Ping protocol
// (1.7+), both sides: Ping asks a server for its version, player count and
// MOTD; Server answers pings for a process that is not a real Minecraft
// server (the test server, later a sleeping server's stand-in). It owns
// the wire format underneath: VarInt, String and packet framing, with the
// limits that keep hostile input cheap.
//
// It must never trust a length from the wire: every length is checked
// against a limit before anything is allocated, and a large one is read
// into a buffer that grows with the bytes that actually arrive. It must
// never leave a goroutine behind: Serve returns only after its connection
// goroutines have. It knows nothing of Kiln's servers, HTTP or the game
// beyond this exchange, and never goes past login (no encryption, no
// compression, no play state).
//
// Decisions:
//   - One deadline per connection on the server (Server.Timeout, default
//     10 s) rather than one per read, so a peer dripping one byte at a time
//     cannot hold a connection; at most 512 connections are served at once
//     and more are closed on accept.
//   - Ping sets the connection deadline from ctx and a deadline in the past
//     when ctx is cancelled, and reports ctx's error rather than an i/o
//     timeout. It does not resolve SRV records: callers give host:port.
//   - Ping announces protocol 769 (1.21.4) in the Handshake instead of −1:
//     vanilla answers either, and proxies that route by protocol stay on
//     their normal path.
//   - Strings follow vanilla: limits counted in UTF-16 code units, byte
//     length checked against 3× the limit first, invalid UTF-8 replaced
//     rather than refused, so an odd MOTD does not make a live server look
//     down.
//   - VarInts longer than 5 bytes, or whose fifth byte sets bits past the
//     32nd, are refused (ErrVarIntTooLong); non-minimal encodings are
//     accepted, as vanilla accepts them.
//   - Errors caused by the peer wrap ErrMalformed; network and ctx errors
//     pass through wrapped, so callers can tell "not a Minecraft server"
//     from "not reachable".
//   - The legacy (pre-1.7) ping is answered with the 1.4+ 0xFF kick format
//     for every variant and protocol 127, as vanilla does. Replies after
//     which the peer may still be sending (legacy, login) half-close and
//     drain briefly before closing, so a TCP reset cannot destroy them.
//   - A login attempt (next state 2, or 3 for transfer) gets Login
//     Disconnect with LoginDisconnectReason: a player pointed at a fake
//     server learns why instead of timing out.
package slp
