// Package quota keeps each server's disk ledger: what its root holds, as
// the last walk measured it plus what Kiln's writers committed since, and
// what writers in flight have reserved. Every writer into a server's root
// (the files API, archives, remote downloads, and next SFTP, snapshot
// restore and mod installs) reserves before it writes, commits what it
// wrote and releases the rest, so that concurrent writers together never
// pass the server's disk limit: the sum used + reserved is checked and
// raised under one lock.
//
// What it must never do: trust a size someone claimed (a writer grows its
// reservation as bytes arrive, by what they will occupy), follow a symlink
// or build a host path from a user's input while it walks (it walks by
// descriptor, openat relative to the directory above), or fail because a
// tree is deeper than PATH_MAX.
//
// Decisions:
//   - What an entry costs (Cost): a regular file its size rounded up to a
//     4 KiB block, at least one block; a directory, a symlink and any
//     other entry one block (a large directory its own size). This is
//     close to what du counts on ext4, and it makes inodes count: a
//     million empty files or directories cannot fill the host while the
//     limit reads zero. The block is a constant, not the file system's, so
//     the same tree costs the same everywhere.
//   - Names starting with TempPrefix (".kiln-tmp-") are Kiln's writes in
//     flight (temporary files of atomic writes, downloads, staging trees
//     of extractions and restores). A writer tracks the ones it holds
//     open (Reservation.Track): a walk leaves those out, since their bytes
//     are in the reservation. An untracked one modified before the start
//     of this process (the collectBefore of Walk) is a leftover of a crash
//     and is removed, if Kiln made it; any other is counted like a file of
//     the user's, so a game server cannot hide bytes behind the prefix.
//   - Kiln's names (tempnames.go). A root is its server's to write: a game
//     server, and before they refused the prefix the files API and SFTP,
//     can make an entry with the prefix. So each name a writer takes comes
//     from its account (Reservation.TempName): TempPrefix, a body and a
//     tag, the first 64 bits of an HMAC-SHA256 of the body under a key
//     users never see (kiln serve derives it from the secret key). Only a
//     name whose tag verifies is Kiln's (TempNames.Ours): only those are
//     removed as leftovers, and the restore recovery only runs journals in
//     directories so named, MAC'd with the same key (TempNames.MAC). A
//     look-alike is never removed silently: it stays, counted, and its
//     owner may delete it. The tag is in the name rather than recorded
//     outside the root because a name costs nothing per write, where a
//     record outside would cost a write and an fsync per temporary file,
//     and survives anything that keeps the root. A name seen by a game
//     server (a temporary file of a write while it runs) could be made
//     again by it after Kiln removed its own; the worst that gives is
//     Kiln removing the copy at the next start as a leftover, inside the
//     same root. The zero TempNames (tests, Kiln's writes outside roots)
//     owns nothing.
//   - A walk and writers run at once. A commit during a walk is added on
//     top of the walk's result: a file the walk saw and whose commit it
//     also adds is counted twice until the next walk (the error is on the
//     safe side), never not at all.
//   - Writing over a file: the replaced file's cost is a credit the
//     writer spends before it reserves (rewriting a file at the limit
//     works, as in every file manager); two copies exist on disk only
//     until the rename.
//   - The walk keeps at most 32 directory descriptors open, however deep
//     the tree: deeper, it closes the highest ones and re-opens a parent
//     through ".." when it climbs back, checking that it is the directory
//     it left (device and inode): a tree moved meanwhile fails the walk
//     rather than being counted elsewhere.
//   - The account counts its reservations in flight (Figures.Writers): a
//     snapshot restore waits for them to end before it replaces a root,
//     so every writer must end its reservation (Commit or Release), also
//     when its client goes away. While a restore holds the account
//     (Hold), only the holder makes new reservations; every other writer
//     gets ErrHeld, also one whose access to the server came before the
//     hold (a mod install between two phases): the ledger is the one
//     place every writer passes.
//   - A full host disk (ENOSPC, EDQUOT) is reported as ErrDiskFull, which
//     the API answers 507 like the limit.
package quota
