// Package snapshot owns snapshots of servers (api.md §6): their records,
// taking them in the background, restoring them, deleting them, the
// chunk ledger that keeps the stored chunks consistent, and the
// collector. The engine (internal/snapshot/engine) turns a server root
// into chunks and a manifest in a blob store (internal/blob), and
// internal/snapshot/restore turns them back into a root;
// internal/snapshot/ignore matches the gitignore-syntax exclusions.
// Files: service.go (records, taking, deleting), restore.go, export.go
// (downloads), reads.go (readers a delete waits for), guards.go (what
// may run at once on one server), slots.go (the snapshots taken at once,
// shared between teams), ledger.go (chunks and the collector),
// integrity.go (damaged snapshots, corrupt chunks set aside), check.go
// (kiln admin snapshots check), restores.go (restore records),
// recover.go.
//
// What it must never do: let a manifest reference a missing chunk —
// whatever creates, deletes, restores and collections run at once, on
// any replica, and wherever a process is killed (ledger.go says how);
// build a host path from user input (roots come from internal/servers,
// every file operation goes through internal/files); write outside the
// server's disk reservation (a restore goes through files.Writing); show
// another team's snapshot (404, as a missing one); or take a store that
// fails (unreachable, refusing) for damage: only what a read found (a
// chunk missing or not what its name says, a manifest missing or
// invalid) marks a snapshot damaged or moves a chunk.
//
// Decisions:
//   - Lifecycle: a record (pending) is written before anything is stored,
//     tagged with this process's instance id; the snapshot is taken in
//     the background (creating, with bytes_done/bytes_total updated about
//     four times a second) and becomes ready in one statement with its
//     figures, or failed with one sentence. At most Options.Parallel (2)
//     are taken at once per process; the others wait pending, the slots
//     shared between teams (slots.go): each team's snapshots wait in the
//     order asked for, the teams waiting are served in turn, and while
//     another team waits, no team holds more than half the slots
//     (rounded up; a team alone uses them all). One line for every team,
//     as before, let a team's queue (a retention script, a deployment
//     replacing many servers, each snapshotted first) hold every other
//     team's snapshot (and its deployment's steps) for the whole queue.
//     No snapshot is stopped for another team's: a slot changes hands
//     when a snapshot ends.
//   - A failure's sentence (the record's error field, the restore's line
//     in the server's console) is what the team reads: a failure of the
//     store is told by its *blob.Error sentence ("the object store is
//     unreachable", "… refused the request (access denied)"), never by
//     its detail, which names the S3 endpoint, bucket and prefix and goes
//     to the log.
//   - Parent: a snapshot takes its server's last ready snapshot as the
//     engine's parent, so files unchanged since are not read again
//     (engine/doc.go). The engine pins every chunk of the parent before
//     the walk (so a chunk found there is never collected under it); the
//     references to those the new manifest does not use are dropped in
//     the transaction that makes the snapshot ready, and the chunks
//     reaped if no one else holds them (the collector reaps them if a
//     crash comes between). A parent deleted meanwhile is simply not used.
//   - A snapshot whose taker died (its instance gone, silent for a minute,
//     or an earlier process of this node: the data dir's lock says it is
//     dead) is failed by the collector, which runs at start, every hour
//     and when a delete wakes it, and its chunks are reaped. A failed
//     snapshot keeps no manifest: one its walk stored (a crash after the
//     walk, before the ready transaction) is deleted before its chunks
//     are unpinned, or by the collector past the grace if that delete
//     failed, so no manifest is left naming chunks that are gone.
//   - Consistency: a running game server (not a proxy) gets save-off and
//     save-all flush through its console before the walk, and save-on
//     after, also on failure. The flush is awaited (its "Saved the game"
//     line, on a stream of its console; a stream dropped meanwhile is
//     followed again) for up to 60 s; a server that does not confirm is
//     snapshotted anyway with saving off, said in its console and
//     logged. A server whose console cannot be followed (it has
//     servers.MaxStreams streams open) fails the snapshot before
//     anything is sent or read (ErrSavesNotPaused, the sentence naming
//     the cause): walking it with saving on could hold a world half
//     written, and before, such a snapshot became ready without a word.
//     A server whose status changes
//     under the walk (started, running, stopping, stopped, crashed:
//     servers.Reader.Changed) may have written its world without
//     save-off — a start while a stopped server is walked, a stop, which
//     saves the world whatever save-off said, a crash and its automatic
//     restart. That walk is not kept: its manifest is dropped and the
//     files are walked again once the server is neither starting nor
//     stopping, with save-off if it now runs (the chunks stored stay
//     pinned, so the walk again mostly finds them), said in the console;
//     after 3 walks changed under, the snapshot fails
//     (ErrServerUnsettled). Refusing the start or the stop instead would
//     hold up a user's power action for as long as a large world's walk.
//     The same goes for a batch of files moved into the root under the
//     walk (a modpack installed, an archive extracted: many renames, one
//     at a time, counted by the root's disk ledger, quota.Reservation.Batch,
//     which every writer passes): the walk may hold part of it, so it
//     reads the files again once no batch is under way. A single file
//     written (one rename) is atomic and does not count: files edited
//     through the API or SFTP during a walk are read old or new, as a
//     file manager's copy would.
//   - Deleting a ready snapshot deletes the record first, then its
//     manifest, then every chunk no other snapshot references (freed_bytes
//     counts them and the manifest; shared_bytes the chunks kept). A
//     snapshot not ready is stopped; its record goes and what it stored is
//     reaped by the collector (storage_cleanup_skipped, not_stored). A
//     store that fails midway leaves the rest to the collector
//     (storage_unavailable). A snapshot a restore or a download is
//     reading loses its record at once (gone from the API, no new reader
//     begins) but keeps its storage until its last reader ends, which
//     then cleans it up (storage_cleanup_skipped, in_use; reads.go):
//     what an experienced user expects of a retention bot deleting old
//     backups while someone downloads one — the download ends whole, as
//     a file unlinked while open stays readable to its last close.
//   - Download (Export, GET /snapshots/{id}/download): a ready snapshot
//     as one archive, made by the engine (engine.Export) from the chunks
//     while it is sent, never staged. tar.gz is the default (every panel's
//     backups are tar.gz and every system opens one), at pgzip's fastest
//     level on every core; tar.zst (klauspost, fastest) and plain tar on
//     request; a path narrows it to one file or folder (a user's usual
//     need: one config or region back, without a restore that stops the
//     server). The manifest is checked whole before the first byte; a
//     chunk missing or corrupt after it ends the transfer with an error
//     (the API aborts the connection), never with a short archive that
//     looks whole. At most Options.MaxExports (4) are written at once per
//     process, each holding up to 16 MiB of chunks fetched ahead (and
//     its compressor's buffers: 29–57 MiB of peak RSS a download)
//     (ErrExportsBusy beyond). A snapshot deleted during its download
//     keeps its storage until the download ends (see Deleting).
//   - Partial restore (RestorePath): one path of the snapshot and what is
//     under it becomes the snapshot's, the rest of the tree is left as it
//     is (restore.Options.Only: outside the path the swap treats
//     the tree as ignored). What panel users do by hand (download the
//     backup, pick the folder out, upload it) in one request, with the
//     same staging, journal and hold as a whole restore. The path is
//     checked against the manifest before the server is stopped.
//   - Restore (into the source or another server of the team): the server
//     is stopped (its stop command, killed after the servers' stop
//     timeout), internal/snapshot/restore restores it through the disk
//     ledger (staged inside the root, swapped in under a journal), and it
//     is started again if it was running — also when the restore failed,
//     which leaves the previous files. One restore per server at a time
//     (ErrBusy, RestoreNow included). A restore and a snapshot of one
//     server never overlap (beginTake, beginRestore): the swap under a
//     walk would leave a ready snapshot holding part of each tree. A
//     restore asked for while a snapshot is taken is refused
//     (*TakingError: the user chose the moment, and the server is left
//     as it is); a snapshot whose turn comes during a restore waits for
//     it (said in the server's console) and holds the restored files
//     (the request stands, and what it asks for is the server as it
//     will be). A reinstall is refused while
//     a snapshot walks the server (servers.Reading): the installer
//     replaces files one by one, and the snapshot would hold some of each
//     install. From the call until the files are
//     restored the server is held (servers.Hold, taken before Restore
//     answers): every other writer (files API, SFTP, downloads, mod
//     installs, the executor), a start and a reinstall get
//     servers.ErrRestoring, so nothing but the restore writes into the
//     root while it is staged and swapped, and no start races the stop.
//     The restore stops the server through the hold (servers.Held.Stop):
//     a start accepted just before the hold has launched its process by
//     then, which is stopped, or is refused by the hold when its turn
//     comes; either way it counts as running, so the restore starts the
//     server once it is done — no process runs during the swap and the
//     start is not lost.
//     The hold ends the server's SFTP sessions at once (servers.OnHold,
//     sftp.Service.ServerHeld): a file an upload holds open would take
//     writes the swap then discards, silently; a cut session is an error
//     the client sees. Then, the server stopped, the restore waits up to
//     Options.WriterWait (60 s; --restore-writer-wait) for the writes that got their access
//     before the hold (an API upload, a download, a mod install: every
//     one holds a reservation on the server's disk ledger until it ends,
//     quota.Figures.Writers) to end, so none is acknowledged and then
//     lost in the swap; writes still going after that fail the restore
//     (ErrWritersBusy) with nothing restored. The hold covers the ledger
//     too (quota.Hold): a writer that got its access earlier makes no new
//     reservation (servers.ErrRestoring), so none starts after the wait. A server deleted while a restore
//     writes into it (ServerDeleting, run by servers.OnDelete before the
//     root goes) cancels the restore and waits for it: before its commit
//     point the staging directory is removed and the restore fails with
//     ErrServerDeleted, after it the swap is finished first; the server
//     is not started again, and restores into it are refused from then
//     on (servers.ErrNotFound). Its outcome is logged; RecoverRoots, at kiln serve's
//     start before any server starts, finishes or undoes a restore a crash
//     cut short.
//   - Restore records (restores.go; the restores table): a restore has a
//     row from its acceptance (pending, written before Restore returns)
//     to its end (restoring when the server is stopped, then done or
//     failed with a sentence), its progress (bytes_done of bytes_total)
//     kept in memory and flushed to the row every second, so a client
//     polls GET /restores/{id}. A row whose process stopped ends at the
//     next collector pass (the rule of failAbandoned): done when this
//     node's start finished the interrupted swap (RecoverRoots,
//     RootsRecovered), failed otherwise. A server keeps its last
//     MaxRestoresKept rows; they are read only through the team.
//   - The collector also deletes blobs the ledger does not know (chunks
//     with no row, manifests with no record) once older than Grace (1 h):
//     what a database restored from an older backup, or a crash between a
//     manifest's upload and its record's update, leaves.
//   - Damage (integrity.go): a corrupt chunk used to poison every later
//     snapshot — a restore found it and refused, but a snapshot looks a
//     chunk up (Stat) rather than read it, so the next one referenced it
//     again and was ready yet unrestorable. A restore, a download or a
//     check that finds a chunk corrupt now moves it aside
//     (engine.QuarantineChunk, to quarantine/, which the collector never
//     lists) holding its ledger row (state quarantine, a claim as a
//     reaper's: one mover at a time, so a second one that read the same
//     bad bytes cannot move the good copy stored after the first move;
//     pins add their references and leave the claim; the collector
//     releases the claim of a dead process), and marks every ready
//     snapshot the ledger says references it (snapshots.damage, the
//     sentence the API shows; damaged_at); a chunk found missing marks
//     them too, a manifest missing or corrupt marks its snapshot. A
//     marked snapshot's whole restore or download is refused at once
//     (*DamagedError, 409 SNAPSHOT_DAMAGED; one of a path goes ahead, its
//     data may be whole, and fails if it is not) unless a check made then (its
//     manifest read, each chunk looked up) finds it whole again — the
//     next snapshot of the same files stores the moved chunk again, and
//     every snapshot naming it is then whole — which drops the mark, as
//     does a whole restore or download that succeeds and Check. A
//     snapshot not marked has its manifest looked up before a restore is
//     accepted, so a deleted manifest is a 409 with a sentence, not a
//     restore failing in the background or a 500. A mark is a status
//     beside ready, not a status of its own: a damaged snapshot still
//     counts against the team's limit, is deleted as any other, and may
//     become whole again. A snapshot whose walk looked a chunk up just
//     before it was moved references the moved chunk: a read or a check
//     finds it damaged like the others.
//   - Check (check.go, kiln admin snapshots check) verifies the store as
//     restic check does: every ready snapshot's manifest read whole,
//     every chunk it references looked up, or with ReadData read and
//     hashed (once per chunk, whatever number of snapshots share it);
//     it marks, moves aside and unmarks as above. It runs in another
//     process beside kiln serve: it registers an instance (node "kiln
//     admin", a name no kiln serve can have) so that the claims it holds
//     on chunks it moves are a live process's to kiln serve.
//   - Snapshots are kept when their server is deleted (source_server_id
//     stays; a restore needs a target then). A server a snapshot is being
//     taken of (pending or creating) is not deleted: ServerDeleting, the
//     first of the servers service's delete hooks, refuses with
//     *TakingError (409 CONFLICT naming the snapshot), since the walk
//     would find the files going and the snapshot — often the one taken
//     to delete the server safely — would end ready with part of them (it
//     did, before). A snapshot whose record is written while a delete is
//     under way fails (ErrSourceDeleted) rather than walk the root being
//     removed.
//   - A team keeps at most its operator-set count of snapshots
//     (servers.TeamLimits.Snapshots, kiln admin team limits --snapshots):
//     pending, creating and ready ones count, failed ones (no storage) do
//     not; Create counts and inserts in one transaction, under the team's
//     lock on PostgreSQL, so replicas cannot pass it together. The
//     deployments executor's snapshots count too: a run whose replace
//     needs one past the limit fails with nothing destroyed. No quota of
//     bytes: chunks are shared by every snapshot of the team that holds
//     them (of every team under DedupGlobal), so a snapshot's bytes are
//     not its own.
//   - Which snapshots share chunks is the operator's choice (Options.Dedup,
//     kiln serve --snapshot-dedup). DedupTeam, the default: each team's
//     chunks live in the team's own engine chunk space
//     (chunks/<hex of the team id>/…), so two teams holding the same
//     file each store it, and a snapshot's stored_bytes, a delete's
//     freed_bytes and shared_bytes, and the time a snapshot takes depend
//     on the team's own snapshots only. With one shared space a team
//     could learn, from what its snapshot stored, that some other team
//     holds a file byte for byte (a premium plugin, a leaked map): the
//     side channel of every cross-user dedup; a hosting operator expects
//     tenants not to see each other, as a per-server backup (Wings')
//     guarantees. DedupGlobal puts every team's chunks in the shared
//     space (chunks/<2 hex>/…): two teams running the same server jar
//     store it once, for that channel. Switching is safe at any time:
//     each manifest names its space, so every snapshot restores and is
//     deleted as it was stored; the first snapshot of a server after a
//     switch reads every file (its parent's chunks are in the other
//     space) and stores its chunks again in the new one.
package snapshot
