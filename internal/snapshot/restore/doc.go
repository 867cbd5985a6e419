// Package restore makes a server root's tree equal to a snapshot the
// engine stored (internal/snapshot/engine): Run stages the snapshot's
// tree inside the root, proving the files already equal to it in place,
// and swaps it in under a journal; Recover finishes or undoes a restore
// a crash cut short. It was the engine's until the engine grew past what
// one package should hold: the swap and the staging are a subject of
// their own, and the engine's writing side never needs them.
//
// What it must never do: open a path of the tree other than through
// internal/files (Root.OpenDir for a descriptor below which every name is
// opened with openat O_NOFOLLOW, one component at a time), follow a
// symlink, write into the tree before the commit point anywhere but its
// staging directory, trust anything a manifest or a chunk says (every
// chunk is checked against its name: engine.FetchChunk), or hold memory
// in proportion to the tree.
//
// Decisions:
//   - Restore reads the manifest twice: a first pass checks all of it
//     (paths clean and relative, no ".." or Kiln temporary names, no
//     duplicates, every entry under a directory of the manifest, links by
//     the rule above, extents within their chunks and adding up, the
//     checksum) and writes nothing; the sizes it claims are then checked
//     against the reservation's free space. The second pass builds the
//     tree in a staging directory in the root (".kiln-tmp-restore-<hex>":
//     invisible to Walk, tracked by the reservation so the ledger's walks
//     leave it out) and checks the manifest again. Every chunk is fetched
//     once for the extents that follow each other in the manifest (a pack
//     fills its files together), and must decompress to exactly its
//     length and hash to its name (ErrCorruptChunk) before a byte of it is
//     written. Each file's cost is reserved before it is created: its size
//     is the sum of extents each checked to be exactly its length, so what
//     is reserved is what is written.
//   - Restore of one path (Options.Only): both passes keep the
//     entries at or under the path and the directories leading to it;
//     the swap's plan sees every other entry of the tree as ignored (left
//     as it is), so the same staging, journal and Recover serve it. The
//     directories leading to the path get the snapshot's mode and mtime
//     (the swap renames inside them anyway); a file or link of the tree
//     where the snapshot has one of them is replaced by it, holding only
//     the path (the path cannot be put back anywhere else). Export takes the same
//     selection (onPath).
//   - Restore over a tree: a file of the tree whose content is proven
//     equal to its entry stays in place (not fetched, not written, not
//     swapped; its mode and mtime set by a journal step if they differ),
//     so a rollback costs in proportion to what changed plus one read of
//     the unchanged content (TestRestoreKeepsUnchanged). The proof never
//     trusts a stat: a restore must make files byte-equal, and a file
//     rewritten with its mtime put back (a backup tool, touch -r, a
//     coarse clock, a copy with -p) has the size and mtime of the one it
//     replaced. So the builder reads it (reading locally costs far less
//     than fetching, decompressing and writing): an extent that is a
//     whole chunk must hash (SHA-256) to the chunk's name, as the chunk
//     itself must; a slice of a chunk (a small file in a pack) is compared
//     byte for byte with the chunk, fetched and checked as a restore
//     checks every chunk (a pack is fetched once for the files that follow
//     each other in it, four are cached; the restore would have fetched it
//     anyway for any of its files that changed). The stat only decides
//     which files are worth reading: a regular file (opened O_NOFOLLOW
//     below directories opened O_NOFOLLOW one level at a time, so never
//     through a link), with one link (files.ErrHardLink's rule: another
//     name may be outside the root), of the entry's size. The file is
//     stat'ed before and after the read, and once more when the swap is
//     planned: an inode, size, mtime or ctime that moved means a write
//     came in between, and the restore is refused before its commit
//     point. That check sees a write as far as the file system's
//     timestamps do (since Linux 6.13, multigrain timestamps give any
//     change after a stat a new ctime on ext4, xfs, btrfs and tmpfs;
//     before, two changes within one clock tick may share one). A
//     concurrent writer, as for any path, can still write after the
//     plan; the server is stopped while it restores. The kept files
//     are listed, in manifest order, in the staging directory
//     (reuse.go); the planner meets them in the same order (both walk
//     parents first, names in byte order) and a kept file it does not
//     meet (its directory replaced meanwhile) refuses the restore too.
//     Extents of one file are hashed on up to Workers goroutines.
//     Symlinks and directories are not compared: replacing a link is one
//     rename, and directories are merged already. Not done: a changed
//     large file is fetched whole; its unchanged chunks could be copied
//     from the old file.
//   - Not files.Stager: a restore needs mtimes on directories and links,
//     chunks of one file written in parallel (pwrite at their offsets), a
//     commit that also removes what the snapshot lacks, and a journal a
//     restart can find. It keeps the Stager's rules: entries are created
//     relative to directory descriptors (a stack of them, one per level of
//     the manifest's walk order), files O_CREAT|O_EXCL|O_NOFOLLOW,
//     directories with their owner's rwx, setuid/setgid/sticky never set,
//     one syncfs before anything moves. At most 256 staged files are open
//     at once.
//   - The swap (swap.go): the staged tree is compared with the root and
//     the steps are written to a journal in the staging directory, which
//     is synced, then renamed into place and the directory synced: that
//     rename is the commit point. Before it, any failure, ctx's end or a
//     crash leaves the tree as it was (a crash leaves a staging directory
//     without a journal: Recover removes it). After it, the steps run in
//     order, each one rename: a staged entry replaces a file or link with
//     renameat (atomic), and anything else with renameat2(RENAME_EXCHANGE)
//     (the old entry lands in the staging tree; never a moment with
//     neither); an entry the snapshot lacks and the ignore rules do not
//     protect goes to the staging directory's trash; a directory both
//     sides have is merged and then given the snapshot's mode and mtime
//     (after its content); a file kept in place gets the snapshot's mode
//     and mtime ("keep"). Each step can be run again: a "put" is done when the root's
//     entry is the staged inode, a "del" when the path is gone, an "attr"
//     or a "keep" is the same each time (a "keep" whose path is no longer
//     that inode does nothing). So Recover, finding a
//     journal, runs it again from the start: whatever instant a kill -9
//     hit, every path ends as the snapshot's (TestRecoverAtEveryStep cuts
//     before every step; TestKillDuringSwap kills a real restoring
//     process mid-swap). Then a syncfs, the journal is removed, and the
//     staging directory with the old entries. A failure during the swap
//     (an I/O error) leaves the journal for Recover, and Restore refuses
//     to start while one is left (ErrPending): replayed after a
//     newer restore, it would undo it. Where the file system
//     has no RENAME_EXCHANGE or RENAME_NOREPLACE (EINVAL) the old entry is
//     moved to the trash first; a crash between the two renames leaves the
//     path missing until Recover, which finishes the step.
//   - Only Kiln's restores are recovered. The root is its server's: a
//     game server (or, before Clean refused the prefix, the files API and
//     SFTP) can make ".kiln-tmp-restore-x/{tree,trash,journal}", and a
//     Recover that replayed it ran a team's steps as Kiln's user: its ".."
//     paths deleted host files and another team's world, and moved a host
//     secret into the team's trash. So the restore directory's name is
//     minted by the reservation's account (quota.TempNames: a tag only
//     Kiln's key makes), the journal (version 3) ends with an HMAC of
//     everything before it, bound to that name, and Recover runs a journal
//     only in a directory of Kiln's name whose MAC verifies; everything
//     else is left as it is and reported (Recovered.Foreign, .Untrusted).
//     Each path of a step must also be one files.Clean leaves as it is (no
//     "..", empty or "." segment, no name of Kiln's), checked as it runs,
//     so a leaked key still cannot lead out. Journals of versions 1 and 2
//     have no MAC and are not run: a restore an older Kiln left mid-swap
//     stays for the operator (logged at start; Restore answers ErrPending
//     until its directory is removed).
//   - Recover must run at start, before the server runs and before the
//     disk ledger's first walk of the root: the walk removes ".kiln-tmp-"
//     entries a crash left (quota), and would take the half of a swap not
//     done yet with it. It must never run while a Restore runs.
//   - What a restore does with the tree: a path the snapshot holds becomes
//     the snapshot's, even one the ignore rules match and even if ignored
//     entries lay below it (a directory the snapshot holds as a file goes,
//     with them); an entry the snapshot lacks is left when ignored, else
//     removed, but a directory holding ignored entries stays with them
//     (its mtime is then the time of the removal). A tree holding another
//     file system (a mount point) is refused before the commit point.
//   - Disk limit: the staged tree is reserved as it is written while the
//     old tree still exists, as archive extraction does (files kept in
//     place are neither reserved nor removed); what the swap removed is
//     recorded as a negative change, and so is the staged copy of each
//     directory merged into the tree's (it goes with the staging
//     directory). The check before staging (the first pass) compares
//     with the free space what the snapshot needs less the files the tree
//     holds at the same paths with the same size (a stat each): those may
//     stay, so a rollback of a small change fits near the limit. That is
//     an estimate only; the limit itself is held by the reservation of
//     each file staged (TestRestoreQuota: a kept file needs nothing, the
//     same file changed is refused with files.ErrQuota, the tree as it
//     was).
package restore
