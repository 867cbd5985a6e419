// Package files performs every file operation on a server root: list,
// stat, read, download, atomic write, create directory, rename, copy,
// delete, chmod, search, and building a tree in a staging directory to
// move into place at once (Stager, for extraction). Every path a user names goes through Clean and
// then through Root, which wraps an os.Root opened on the server's
// directory: operations are relative to that directory handle, symlinks are
// followed only while they stay inside, and ".." is refused outright. The
// file API, SFTP, decompress, pull and snapshot restore use this package;
// nothing else in Kiln opens a user-named path. It knows nothing of HTTP.
//
// What it must never do: build a host path from user input (no
// filepath.Join onto the root), follow a symlink out of the root, write
// through a symlink or a hard link (writes are temp file + rename, or a
// new file created O_EXCL|O_NOFOLLOW in a staging directory), read a
// device or a FIFO, or enforce a disk limit on a size someone claimed
// rather than on the bytes it wrote, or import internal/servers or
// anything else that links the database: it runs on the node that holds
// the roots (internal/serverroot's TestNodeLocalImportsNoDatabase).
//
// Decisions:
//   - WriteFilePrivate writes a file holding a secret (a deployment's
//     file with a database password): its temporary file is created 0600,
//     so the secret is never readable by others, not even between the
//     write and a chmod; an existing file's mode is not kept.
//   - A root is reached through Servers.Access, which answers a
//     serverroot.Access (the root, its disk ledger, Kiln's temporary
//     names, a restore's hold) or serverroot's errors; *servers.Service
//     is the implementation in kiln serve (servers.Access is an alias of
//     the same type). files names nothing of servers, so archives and
//     the snapshot manifest, engine and restore, which import files, link
//     no database code either.
//   - Kiln's names: a path with a segment starting with ".kiln-tmp-"
//     (quota.Reserved) is refused by Clean, so no user path (the files
//     API, SFTP, archive entries, remote downloads, mod and modpack
//     installs, a restore's path) creates, writes, renames, copies or
//     chmods one: the prefix names Kiln's temporary files, staging trees
//     and restore journals, and a restore's recovery once replayed a
//     journal a team planted. CleanRemovable and JoinRemovable accept them
//     for deletes only: Kiln leaves look-alikes it did not make (quota's
//     doc, "Kiln's names"), so their owner must be able to remove them.
//     Root's methods take Kiln's own names (checkClean lets them through):
//     Kiln renames its temporary files into place with them.
//   - A leading "/" in a user path means the server's root. ".." segments
//     are refused even when they would stay inside: a path names one place.
//     NUL bytes, invalid UTF-8, paths over 4096 bytes and names over 255
//     bytes are refused (validation errors), before the file system is
//     touched.
//   - Paths are resolved by the kernel in one call where it can:
//     openat2(RESOLVE_BENEATH|RESOLVE_NO_MAGICLINKS) relative to a
//     descriptor of the root (resolve.go). It follows symlinks only while
//     they stay beneath the root (an absolute one, or a ".." climbing above
//     it, is EXDEV, answered ErrNotFound), and it checks that against
//     concurrent renames, so a directory swapped for a link mid-path cannot
//     lead out. The os.Root walk it replaced opened every directory on the
//     way (plus fcntl, epoll and fstat calls per step, ~14 system calls to
//     create one file two directories down; SFTP's upload of 10,000 small
//     files made 30,000 such resolutions). Where openat2 is missing
//     (Linux < 5.6, a seccomp filter refusing it: probed once per Root),
//     the os.Root walk is kept, with the same rules.
//   - A path that leads outside through a symlink answers ErrNotFound, as a
//     missing file does: the user learns nothing about what lies outside.
//     os.Root reports an escape with an unexported error; it is recognised
//     by its shape (a *PathError without an errno), never by its text.
//   - Listing and search stat entries with statx relative to the open
//     directory's descriptor (AT_SYMLINK_NOFOLLOW), not by host path, so a
//     directory swapped for a symlink mid-operation is never followed out.
//     Search opens subdirectories with openat(O_NOFOLLOW|O_DIRECTORY).
//   - Regular files are opened O_NONBLOCK and checked on the descriptor: a
//     FIFO planted by a game server cannot hang a request, and a device is
//     refused (ErrNotFile).
//   - Writes are atomic (temporary file in the same directory, fsync,
//     rename): readers see the old or the new file, and a symlink or hard
//     link at the target is replaced, never written through. The fsync is
//     kept although it is a fifth of a 1 MiB round trip here: a rename
//     without it can leave an empty file after a crash on file systems
//     without ext4's rename heuristics. The body is copied through a pooled
//     256 KiB buffer with writeback started every 256 KiB (the fsync waits
//     for the tail only); a replaced file of 64 KiB or more is held by an
//     O_PATH reference across the rename, so freeing its blocks (0.8 ms for
//     1 MiB on ext4, inside rename(2)) happens in the background.
//   - Chmod refuses symlinks (Linux cannot change a link's own mode, and
//     acting on the target is how Wings was made to chmod host files,
//     GHSA-rhq6-9rgh-v45c) and setuid/setgid/sticky bits. It acts on an
//     O_PATH descriptor of the entry (checked, then changed through
//     /proc/self/fd), so a name swapped for a link meanwhile is not
//     followed. The root keeps its mode, and a directory always keeps its
//     owner's rwx: no chmod makes a server's files unreadable or
//     undeletable by Kiln. Delete removes by descriptor, giving each
//     directory its owner's rwx first, and is not stopped by PATH_MAX.
//   - Hard links: a regular file with more than one link may share its
//     inode with a file outside the root (a process-runtime game server can
//     `ln /etc/shadow x` on the same file system). Kiln never reads
//     (contents, download, copy, archive) or chmods one: ErrHardLink. It
//     may be deleted (that removes only the name) or replaced by a write
//     (a new inode takes the name).
//   - Symlinks are judged through the tree, not lexically (links.go): a
//     link may be created only if its target, followed from the link's
//     real directory through every link on the way, stays inside ("up" ->
//     "." then "x" -> "up/.." is refused). A missing segment ends the
//     look-ups but not the check: what follows is taken as plain
//     directories, so a link that dangles today cannot lead out once the
//     missing part is created. Rename re-checks the links it moves (the
//     link itself, or every link inside a moved directory, at their new
//     places); a link that already points outside can be deleted, not
//     moved. Staged links (extraction) are judged from the destination's
//     real place.
//   - The disk limit: every writer goes through Writing, which reserves
//     from the server's ledger (internal/quota) before each write and
//     commits what it put in place; directories and links cost a block.
//     Temporary files are tracked by their reservation, so the ledger's
//     walks leave them out while they are written and remove them when a
//     crash left them.
//   - Rename never overwrites (ErrExists): renameat2(RENAME_NOREPLACE)
//     relative to the two parent directories' descriptors, so an entry
//     created at the destination between a check and the rename is not
//     replaced either (a check then a rename was a race). A file system
//     without RENAME_NOREPLACE (EINVAL: ZFS before 2.2, some FUSE) gets
//     the check then the rename. Delete and rename refuse the root itself.
//   - Stager (stage.go) is how many files are created at once (archive's
//     Decompress): Root.WriteFile's temporary file, fsync and rename per
//     file, with a path lookup from the root for each step, cost ~18
//     openat and an fsync per file (363k openat and 20k fsyncs for a
//     20,168-file world: 0.55-0.83x the speed of tar xzf). A Stager
//     creates files in a private directory (".kiln-tmp-stage-…", invisible
//     to Walk) relative to open descriptors of its directories (openat
//     O_CREAT|O_EXCL|O_NOFOLLOW, mkdirat, symlinkat): one openat per file,
//     no temporary name, since nothing there is visible before Commit
//     moves it into place. O_EXCL|O_NOFOLLOW means a name that exists (a
//     link planted meanwhile included) is refused, never written through;
//     every directory on the way is opened O_NOFOLLOW|O_DIRECTORY. The
//     disk limit is counted on the bytes written, across the operation.
//   - Durability of staged files: one syncfs(2) before the first move,
//     not an fsync per file. Measured on a 1 GiB world (20,168 files, 2
//     cores, journaled ext4): with syncfs the extraction took 4.5-7 s
//     against 6-8 s for tar xzf; with an fsync per file (8 writers
//     overlapping them) 11-13 s. syncfs also writes other dirty data of
//     the same file system (it would be written within 30 s anyway), and
//     since Linux 5.8 it reports write-back errors, so a lost write fails
//     the extraction rather than going unnoticed. Contents are durable
//     before any rename makes them visible, as with WriteFile: a crash
//     never leaves an empty file in a name that had content.
//   - A Stager's directory descriptors are cached, least recently used out
//     beyond 256 per tree (directories in use are closed when released):
//     archives name a directory's entries together, so the cache almost
//     always hits, and an archive of 100,000 directories costs 256
//     descriptors, not 100,000. Commit walks the staging tree and the
//     destination by descriptor too (a symlink in the destination is
//     replaced, never descended) and holds none across levels.
//   - Commit moves with one rename per entry: a free name gets
//     renameat2(RENAME_NOREPLACE) (a directory moves whole), a file or
//     symlink over a file or symlink a plain renameat, which replaces
//     atomically (readers see the old or the new, never neither, where
//     deleting first left a gap); only a directory over a file or symlink
//     needs an unlink first (rename cannot do that). A file over a
//     directory is looked for before the first move (ErrExists, nothing
//     moved).
//   - Listings are paged (list.go): ListPage answers at most limit
//     (1 to MaxListLimit = 10,000) entries after a cursor, so the memory of
//     one request is bounded by limit whatever the directory holds. Names
//     come from getdents64 in 32 KiB batches; only the limit smallest keys
//     after the cursor are kept (appended while fewer, then a max-heap), and
//     only those are stat'ed. The order (directories first, then names in
//     byte order) takes "is a directory" from the directory entry's d_type
//     (an fstatat only where a file system reports DT_UNKNOWN), so ordering
//     needs no stat of every entry; a symlink to a directory sorts with
//     the files, as it is listed as a link.
//   - A cursor is the last key of a page, opaque to clients (URL-safe
//     base64 of a version byte, 'd'/'f' and the name's bytes), not an
//     offset or a getdents position: those move when entries come and go,
//     a key keeps its place even after its entry is gone. It is a place
//     in the order, never a path: it is compared with names, never opened,
//     and one that does not decode to a valid name is a validation error.
//   - Search answers at most limit (1 to MaxResults = 1000) matches;
//     truncated is set only when a match past limit was found (the walk
//     stops there, unstat'ed), or the depth or time bound was hit.
//   - MIME types: by kind (inode/directory, inode/symlink…), then by name
//     (a table of Minecraft server files, then the system's), then by the
//     first 512 bytes (only when the name says nothing).
//   - created_at is the birth time where the file system records it
//     (statx STATX_BTIME), else the modification time.
package files
