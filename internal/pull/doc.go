// Package pull runs remote downloads into a server's files (POST, GET and
// DELETE /servers/{id}/files/pull, api.md §4): it validates a request,
// records it in the downloads table, fetches the URL in the background
// through the netguard policy and writes the body through the files
// resolver, within the server's disk limit.
//
// It owns the downloads table (migrations 00003_downloads.sql), the
// Manager that runs transfers and the sentences that say why one failed.
// It does not decide which addresses may be reached (netguard does, on
// every connection, redirects included), nor resolve paths (files does),
// nor know where a server's root is (Servers.Access). It imports net/http
// as a client only: no net/http type is in its API and it carries no
// status codes of Kiln's API.
//
// What it must never do: connect other than through the netguard client,
// open a path that did not come from files.Clean/Join, write other than
// through files.Root.WriteFileTemp (atomic, under the download's known
// temporary name, disk limit on the bytes written), leave a partial file
// behind a download that did not finish, keep a download's state only in
// memory, or run a goroutine that Run does not wait for.
//
// Decisions:
//   - Every state change is stored before it is acknowledged: Start
//     returns once the queued row exists; Cancel returns once the row says
//     canceled and the partial file is gone. Progress (written) is stored
//     at most every Options.ProgressInterval; List overlays the live count
//     of this process's transfers.
//   - Recovery (Run, before Recovered is closed; Start and Cancel wait for
//     it): every row left queued or running is a transfer of a process that
//     died (kill -9 included). Its temporary file (files.TempName(id) in its
//     directory) is removed, then it is marked failed with "interrupted:
//     kiln serve stopped during the download". Downloads are not resumed:
//     a server may not support ranges, and the user can start it again.
//     Graceful shutdown (Run's ctx ends) fails running transfers the same
//     way and waits for them.
//   - At most MaxActive (3) queued or running downloads per server,
//     counted in the database in the same transaction as the insert, under
//     a per-server lock (SQLite: the single writer; PostgreSQL: an advisory
//     transaction lock), so concurrent requests or replicas cannot pass it.
//     Beyond that, a process runs at most Options.MaxRunning transfers at
//     once; the others stay queued.
//   - URL: http or https, at most 2048 bytes, with a host, and no user
//     information (it would be stored and listed to the whole team, and
//     "https://trusted@evil/" misleads). Addresses are not checked at
//     Start: a refused address, however spelled or resolved, makes the
//     download fail with netguard's reason, so there is one place that
//     decides.
//   - File name: the filename field, else the last segment of the URL's
//     path (decoded, without the query); never Content-Disposition. The name
//     is known and validated before any connection and shown in the
//     response, and the upstream does not get to choose which file of the
//     server is replaced. It must be a plain name (no "/", ".", "..", NUL,
//     not Kiln's temporary prefix); directory is any server path (missing
//     directories are created). An existing file is replaced atomically
//     only when the download completes.
//   - Only 200 OK is accepted; any other status fails with the status line.
//     Compression is not negotiated (the bytes are stored as sent). A
//     Content-Length larger than the free space fails at once; without
//     Content-Length the body is written until it ends or passes the limit.
//   - Disk limit: a download writes through the server's disk ledger
//     (files.Writing, internal/quota), shared with every other writer into
//     the root, so concurrent downloads, uploads and extractions cannot
//     together pass the limit. The cost of a file being replaced counts as
//     free for its download.
//   - Fairness: a process runs at most MaxRunning (16) transfers, and one
//     team's downloads at most MaxRunningPerTeam (4) of them; the rest wait
//     queued (a team's own queue never holds a slot of the node). A
//     transfer that receives less than MinRate (10 KiB/s) on average over
//     MinRateWindow (60 s) fails, so a trickling upstream cannot hold a
//     slot for the whole TotalTimeout.
//   - Timeouts (Options): HeaderTimeout from the request to the response
//     headers, dialing, TLS and redirects included (30 s; netguard's
//     dialer also gives up a single address after 30 s); IdleTimeout
//     without receiving a byte (60 s); TotalTimeout from the first
//     connection to the file in place (1 h; time spent queued does not
//     count).
//   - Cancel of a download that has already finished (done, failed or
//     canceled) changes nothing and is not an error: it returns the
//     record, so the caller sees the status. A completed file is never
//     removed by Cancel; deleting files is the files API's job.
//   - Cancel of a download another replica runs marks the row canceled;
//     that replica sees it at its next progress write and stops. Recovery
//     assumes one kiln serve per database: a second replica starting would
//     fail the first one's transfers (no node column yet).
//   - Finished rows are listed for ListWindow (1 h) and deleted after
//     Options.Retention (24 h).
package pull
