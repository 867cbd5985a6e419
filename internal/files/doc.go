// Package files performs every file operation on a server root: list,
// stat, read, download, atomic write, create directory, rename, copy,
// delete, chmod and search. Every path a user names goes through Clean and
// then through Root, which wraps an os.Root opened on the server's
// directory: operations are relative to that directory handle, symlinks are
// followed only while they stay inside, and ".." is refused outright. The
// file API, SFTP, decompress, pull and snapshot restore use this package;
// nothing else in Kiln opens a user-named path. It knows nothing of HTTP.
//
// What it must never do: build a host path from user input (no
// filepath.Join onto the root), follow a symlink out of the root, write
// through a symlink or a hard link (writes are temp file + rename), read a
// device or a FIFO, or enforce a disk limit on a size someone claimed
// rather than on the bytes it wrote.
//
// Decisions:
//   - A leading "/" in a user path means the server's root. ".." segments
//     are refused even when they would stay inside: a path names one place.
//     NUL bytes, invalid UTF-8, paths over 4096 bytes and names over 255
//     bytes are refused (validation errors), before the file system is
//     touched.
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
//     link at the target is replaced, never written through.
//   - Chmod refuses symlinks (Linux cannot change a link's own mode, and
//     acting on the target is how Wings was made to chmod host files,
//     GHSA-rhq6-9rgh-v45c) and setuid/setgid/sticky bits.
//   - Rename never overwrites (ErrExists); delete and rename refuse the
//     root itself.
//   - MIME types: by kind (inode/directory, inode/symlink…), then by name
//     (a table of Minecraft server files, then the system's), then by the
//     first 512 bytes (only when the name says nothing).
//   - created_at is the birth time where the file system records it
//     (statx STATX_BTIME), else the modification time.
package files
