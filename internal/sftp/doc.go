// Package sftp is Kiln's SSH/SFTP server and the credentials it accepts:
// one username and password per (token, server), got or rotated through
// the API (Service.Credentials), a login landing in that server's root
// and nowhere else, every operation done through internal/files on a root
// held open for the session, every byte written drawn from the server's
// disk ledger (internal/quota), and access ending at once — open sessions
// included — when the server is deleted, the credentials rotated or the
// token revoked (the open-session hole of GHSA-8c39-xppg-479c in
// Pterodactyl/Wings).
//
// What it must never do: open a path a user named other than through
// internal/files (no host path is ever built from SFTP input), follow a
// link out of the root, write through a link or a hard link, pass the
// disk limit, keep a password in plain text or write it to a log, serve
// anything but the sftp subsystem (no shell, exec, forwarding), or keep a
// session going once its credential is no longer valid.
//
// Decisions:
//   - Usernames are "<token label>.<first 8 hex of the server UUID>"
//     (what panels use). The name only finds candidate rows; the row
//     whose password matches decides the server, so two tokens sharing a
//     label, or two servers sharing a prefix, never open each other's
//     files. Passwords are 32 base62 characters (≈190 bits), sealed by
//     internal/secretbox (shown again on every get, so kept decryptable,
//     not hashed) and compared in constant time.
//   - A credential has a generation, raised at each rotation. A session
//     remembers the generation it logged in with. Rotation, RevokeServer
//     (servers.Service.OnDelete) and RevokeToken cut this process's
//     sessions at once; every CheckInterval (5 s) Server re-reads the
//     credentials of its live sessions in one query and cuts those whose
//     row is gone (server deleted, by any process), whose token is revoked
//     (`kiln admin token revoke` is another process) or whose generation
//     moved. A login reads the database each time, so it sees all three
//     at once. A re-check that fails (database down) keeps the sessions
//     and logs: the next one decides.
//   - A server's delete closes it to SFTP from its first hook
//     (RevokeServer: its sessions cut, its logins refused with a banner
//     and not counted as failures) but leaves its credentials' rows to
//     go with the server's row (ON DELETE CASCADE). A delete that fails
//     and leaves the server reopens it (DeleteEnded,
//     servers.OnDeleteEnded): the same credentials log in again.
//   - A snapshot restore's hold on a server (servers.OnHold, ServerHeld)
//     ends its sessions at once: a file a session holds open for writing
//     would take writes the restore's swap discards. Sessions opened
//     during the hold read; their writes are refused with the reason.
//     Every request that changes the tree goes through the disk ledger
//     (files.WritingOn), also those that change no usage (rename, chmod,
//     utimes): the ledger's hold is what refuses them, as it refuses the
//     files API's (409).
//   - Limits: 10 failed logins from one address (an IPv6 client's /64) in
//     5 minutes lock it out for 15 (every login refused meanwhile, with a
//     banner); 8 sessions per credential, 64 per team and 512 on the node
//     (registry.add: one team's logins cannot take every session the node
//     holds buffers for), 4 channels per connection, 256
//     open handles per session; 15 minutes without an SFTP packet end a
//     session; a connection must log in within 30 s. The lockout table is
//     bounded (100,000 addresses; beyond, idle entries go first).
//   - Connections not logged in yet are capped: 256 in all and 16 from
//     one address (an IPv6 /64), counted from accept until the login
//     ends (internal/connlimit; Config.MaxUnauthenticated…, the flags
//     --sftp-max-unauthenticated…). One over a cap is reset at once,
//     before the handshake (nothing read, no key exchange spent on it);
//     refusals are logged at most once every 10 s. Idle connections used
//     to hold a descriptor each for the 30 s deadline until the process
//     ran out. A logged-in session leaves its place: sessions are capped
//     per credential.
//   - Accept errors are transient (EMFILE and ENFILE when descriptors
//     run out, ECONNABORTED…): Serve waits 5 ms doubling to 1 s, as
//     net/http's server does, logs the run of failures once when it
//     begins and once when it ends, and accepts again. Only a closed
//     listener ends Serve. An accept error used to end Serve, and with it
//     kiln serve (its API, its game servers).
//   - Paths: pkg/sftp makes every path absolute and resolves ".."
//     lexically, so "/../../etc" is the session's "/etc", inside the root
//     (as in a chroot); files.Clean then refuses what is left of bad
//     input. An absolute symlink target is stored relative to the link's
//     directory (it names a place in the session's view); a target
//     leading outside is refused (files.Root.Symlink).
//   - Writes: an open for writing is files.Root.OpenWrite — the entry
//     opened O_PATH|O_NOFOLLOW, checked (no link, FIFO, device, hard
//     link), then opened for writing through that descriptor — and each
//     write at an offset first reserves what the file will cost with it
//     (its size rounded to a block, as quota counts). A write that would
//     pass the limit writes nothing and fails with SSH_FX_FAILURE and a
//     "no space left" message naming the limit ("the server's disk limit
//     (1024 MiB) would be exceeded; this request wrote nothing": OpenSSH's
//     client prints only "Failure", other clients show the message; SFTP
//     version 3, which pkg/sftp and OpenSSH speak, has no no-space code,
//     and OpenSSH's server answers ENOSPC the same way); the partial file
//     stays and, at close, the ledger is told the file's real change.
//     Rename is RENAME_NOREPLACE (SFTP's rename);
//     posix-rename@openssh.com replaces as rename(2) does. Hard links are
//     refused. Ownership changes (setstat uid/gid) are ignored, so a
//     client preserving them does not fail. statvfs reports the disk
//     limit and what is free under it.
//   - Modes of new files and directories are 0644 and 0755: pkg/sftp
//     drops the attribute flags of open and mkdir packets, so a mode sent
//     there cannot be read; clients preserving modes set them afterwards
//     (setstat, which refuses setuid, setgid and sticky bits).
//   - Algorithms: key exchange mlkem768x25519-sha256 and curve25519-sha256,
//     ciphers aes128-gcm, aes256-gcm and chacha20-poly1305 (AEAD: no MAC
//     is negotiated; only SHA-2 ETM MACs are listed, never SHA-1). The
//     host key is ed25519, made on the first start in
//     <data-dir>/sftp_host_ed25519_key (0600, OpenSSH format; linked into
//     place so two processes starting at once keep one key).
//   - One goroutine re-checks all sessions of a Server (not one per
//     session): an idle session costs its SSH connection's goroutines and
//     buffers only (docs/benchmarks.md, SFTP section, has the figure).
//
// Libraries: golang.org/x/crypto/ssh (the Go project's SSH, maintained,
// already a dependency) and github.com/pkg/sftp v1 in request-server mode
// (what Wings and SFTPGo run; v2 is unreleased): the request server hands
// every operation to our handlers with a path, so nothing reaches the file
// system except through internal/files. Its data packets are raised to
// 255 KiB (WithRSMaxTxPacket) so a client asking for large reads gets them.
// pkg/sftp lacks OpenSSH's limits@openssh.com extension, without which
// OpenSSH's client moves 32 KiB per request (255 KiB with OpenSSH's own
// server) and uploads measured 0.57x OpenSSH's speed: limitsConn (a
// framing-only shim on the channel) advertises it and answers it, and
// sends each outgoing packet in one channel write.
//
// Buffers: the request server runs with pkg/sftp's allocator
// (WithRSAllocator). Without it every READ allocated a buffer of the size
// asked (255 KiB from OpenSSH's client) whatever the file's size: a
// download of 10,000 small files allocated 5 GB and collected garbage
// every ~10 files, and took 1.4-1.6x OpenSSH's time (docs/benchmarks.md).
// The allocator keeps the 256 KiB pages it used until the session ends,
// so limitsConn lets at most MaxInFlight (4) requests into pkg/sftp at
// once: a session holds at most ~2 pages per request in flight (~2.3 MiB)
// after a transfer, and an idle session one page (only what was touched
// of it is resident: measured 104-211 KiB of RSS per idle session). Four
// in flight keep the request server's workers busy: a 256 MiB file moved
// as fast with 4 as with 8 or 16 (OpenSSH's own server works on one).
package sftp
