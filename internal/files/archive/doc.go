// Package archive makes and extracts archives inside a server's root:
// Compress (tar.gz, zip, tar.zst) and Decompress (zip/jar, tar, tar.gz,
// tar.zst, tar.xz, single-file .gz). It works only through files.Root:
// every path it reads or writes is a root-relative path that went through
// files.Clean, and every file it opens is opened by Root (os.Root
// underneath). It knows nothing of HTTP; the API maps ErrUnsupported and
// *EntryError to 422 UNSUPPORTED_ARCHIVE and files.ErrQuota to 507.
//
// What it must never do: open a user path with os.* or filepath.Join onto
// a root directory; follow a symlink while archiving (links are stored as
// links, and only those that stay inside); read a file with other hard
// links; create anything outside the root, anything reached through a
// symlink, a file or a ".." while extracting, or a link that leads out,
// even through other links; create a device, FIFO, socket, hard link, or
// a setuid/setgid/sticky bit; trust a size an archive declares (it is only
// a first check; the limit is enforced on the bytes written); allocate
// what an archive declares (a dictionary, a window, a central directory)
// beyond the limits below; leave a half-written archive or a
// half-extracted tree behind after a failure.
//
// Decisions:
//
//   - Libraries. klauspost/pgzip for tar.gz: gzip compressed in parallel
//     1 MiB blocks (each block gets the previous 32 KiB as dictionary, so
//     output stays within ~1% of one stream) with klauspost's flate, the
//     fastest maintained deflate in Go; its reader decompresses ahead in a
//     goroutine. klauspost/compress/zstd for tar.zst (pure Go, fuzzed,
//     maintained) and klauspost/compress/flate as the zip deflater and
//     inflater, plugged into the standard archive/zip (the standard
//     library keeps the zip and tar parsers, which get Go's security
//     fixes; zstd-in-zip, method 93, is read too). For .tar.xz,
//     github.com/ulikunitz/xz/lzma decodes the LZMA2 data (the maintained
//     pure-Go implementation, used by mholt/archives, which Wings and
//     Pelican use) and the .xz container around it (streams, block
//     headers, checks, index, footers, padding) is parsed here (xz.go):
//     the library's own xz reader allocates whatever dictionary a block
//     declares, up to 4 GiB (its DictCap is a floor, raised to the
//     declared size), before reading a byte of data, and offers no hook
//     to look at a block header first. The checks, sizes and index are
//     verified as the xz tool does; filter chains other than LZMA2 alone
//     (BCJ, delta) are refused, as the library refused them.
//   - What an archive declares is capped before anything is allocated for
//     it (limits.go), and a refusal is an *EntryError without a Name
//     whose message names the figure and the cap ("the archive's xz
//     dictionary is 1.5 GiB; at most 64 MiB is allowed"; the API adds
//     "nothing was extracted", 422 UNSUPPORTED_ARCHIVE). The entry count
//     and the names' total answer the same way.
//     xz: a block's LZMA2 dictionary at most 64 MiB, what xz -9 and -9e
//     use (LZMA2 can declare 4 GiB), checked on every block header of
//     every stream. Each block allocates its own dictionary, so the
//     dictionaries of all blocks together may be at most 512 MiB plus
//     twice the bytes decoded: thousands of tiny blocks declaring 64 MiB
//     each would otherwise make zeroing memory the request's work. Real
//     files are far inside (xz -T makes blocks of three dictionaries).
//     zstd: a window of at most 128 MiB, not 64: `zstd --long` (window
//     log 27) and levels 20-22 write 128 MiB windows, and the zstd tool
//     itself decodes up to 128 MiB without --memory, so 64 MiB would
//     refuse archives the tool reads (testdata/long27.tar.zst extracts,
//     long28.tar.zst is refused, as by the tool). A single-segment frame's
//     window is its content size. The decoder allocates the window plus
//     two blocks at a frame's first block, so one decompression can hold
//     ~128 MiB. A zstdGuard between the file and the decoder follows the
//     frames (headers, block sizes, checksums, skippable frames) and
//     refuses a frame before the decoder has its whole header, naming the
//     window; the decoder's WithDecoderMaxWindow stays as the net under it
//     (a guard that loses track of the frames only passes bytes on). zstd
//     zip entries go through a guard too.
//     zip: archive/zip's NewReader keeps the whole central directory in
//     memory (a *zip.File of ~200 bytes per 46-byte record, plus names and
//     extra fields) and reads records until one does not parse, whatever
//     count the end record declares (it compares only the low 16 bits).
//     Before it runs, the end record (and the zip64 one) is read as
//     archive/zip reads it: a declared count over MaxEntries or a
//     directory over 192 MiB (the 64 MiB of names the extractor accepts
//     plus 128 bytes of record and extra fields for each of MaxEntries
//     entries, rounded up) is refused; then the records are walked where
//     archive/zip will read them, counted and not kept, and refused past
//     MaxEntries or 192 MiB. NewReader then reads through a ReaderAt that
//     refuses anything past the bytes walked plus 512 KiB (the end record
//     search, read-ahead): were the walk and archive/zip ever to disagree,
//     NewReader fails rather than reads on.
//     tar: archive/tar already bounds what one header can make it hold
//     (PAX records and GNU long names at most 1 MiB each, refused with
//     ErrFieldTooLong, which is answered as a limit here; sparse maps
//     bounded; a header repeated replaces the last), and the names it
//     returns then meet MaxEntryName and the names' total. gzip
//     has a fixed 32 KiB window; pgzip reads ahead 4 blocks of 1 MiB.
//   - Levels, measured by bench/files-archive.sh on a 1 GiB worldgen tree on
//     2 cores: tar.gz uses level 7: on the world it is 0.15% larger than
//     gzip -6 (level 5, the default, is 1.3% larger; 6 is 1.0%), and on a
//     text-only tree (configs, logs, player data) it is 4.5% larger where 5
//     is 10% larger; it is still 5-6× faster than `tar czf` (3.8 s against
//     21.8 s). tar.zst uses SpeedDefault (≈ zstd -3): SpeedFastest was
//     0.65% larger than `zstd -1` on the world, SpeedDefault 0.2% smaller.
//     Its CPU cost is paid on both cores: the tar stream is cut into
//     independent 4 MiB frames compressed in parallel (zstdPipe; a zstd
//     stream is a sequence of frames for every decoder), 0.15% smaller than
//     `zstd -1` still and 0.8-0.9× the speed of `tar | zstd -1 -T0` — the
//     library's streaming encoder compresses one block after another on
//     one core (0.65-0.77×), its "concurrent blocks" mode and a separate
//     encoder goroutine were no faster.
//   - Compress writes the archive with Root.WriteFile through a chunkPipe
//     (a few 1 MiB buffers, WriterTo), or for tar.zst the zstdPipe, whose
//     frames are written from the buffers they were compressed into: the
//     disk limit is WriteFile's, on
//     the bytes written; a failure or ctx's end removes what was written.
//     The archive is first a ".kiln-tmp-archive-…" file, then renamed to
//     its name with Root.Rename, which never replaces a file: two
//     compressions in the same second get "-2", "-3" rather than one
//     replacing the other. Walk leaves ".kiln-tmp-*" files out, so an
//     archive in the directory it archives does not contain itself.
//   - Decompress extracts through a files.Stager: into a staging directory
//     in the target directory (".kiln-tmp-stage-<random>": invisible to
//     Walk and so to other archives, on the same file system so that moving
//     is a rename), checks every entry before it creates anything for it,
//     and moves the staged entries into place (Stager.Commit) only when the
//     whole archive was read and synced: a refusal, corrupt data, the disk
//     limit, an I/O error or cancellation leave the target as it was.
//     Conflicts (a file over an existing directory) are looked for before
//     the first move. The move is one rename per top-level entry, or per
//     entry inside a directory that already exists (merged); an existing
//     file or symlink is replaced by that rename itself, atomically. The
//     staging directory is removed in every case. A crash before the move
//     leaves the target as it was plus the staging directory (an ordinary
//     directory the user sees and can delete); a crash during the move
//     leaves the entries moved so far in place and the rest in the staging
//     directory, each of them whole (contents were synced before the first
//     rename).
//   - Entry names are cleaned by files.Clean and refused, never repaired:
//     "..", an absolute name, NUL or invalid UTF-8 refuse the whole archive
//     with an *EntryError naming the entry. A backslash is an ordinary
//     character on Linux, so a Windows-style "..\x" lands inside as a
//     strange name. The archive's own paths are tracked: an entry under
//     another entry that is a symlink or a file is refused, so nothing is
//     ever extracted through a link, even one that stays inside; a path
//     that appears twice (but for directories) is refused rather than
//     resolved by order.
//   - Symlinks are created only when files.LinkTarget accepts the target
//     from the entry's final place (relative, staying in the root) and
//     the target's ".." segments all come first ("../../a/b", never
//     "a/../b"); staged one level deeper, such a target still stays
//     inside. Lexically inside is not enough: with "up" -> ".." in the
//     archive (or already in the tree), "x" -> "up/../.." stays inside on
//     paper and leads out of the root on disk. Leading ".." segments
//     climb the real directories the link lies in (the Stager never
//     descends a link), and what follows only names things below, so a
//     link made here reaches nothing that a link already there did not.
//     The Stager judges the target again from where the destination
//     really is (it may be reached through a link); its refusal is
//     answered as the entry's.
//   - Hard links are extracted as copies of an earlier regular file of the
//     same archive (same content and mode, counted against the disk
//     limit). A copy rather than a link: a hard link shares an inode with
//     its target, so a later write through one name changes the other, and
//     files.Root deliberately has no way to make one. A link to anything
//     else (outside, a later entry, a directory, a symlink) is refused.
//   - Devices, FIFOs and sockets are refused, the whole archive with them
//     (silently skipping them would hide that the archive is not what the
//     user thinks). Setuid, setgid and sticky bits are dropped; files keep
//     their permission bits; directories keep theirs plus the owner's rwx
//     (a 0555 or 0000 directory in an archive would lock the server out of
//     its own tree and stop the move). Zip modes are used only when a Unix
//     host wrote them. Modification times are not restored (Root has no
//     way to set them).
//   - The disk limit: a zip's declared sizes are summed and checked first
//     (ErrQuota before anything is written); then every byte of file
//     content extracted is counted as it comes out of the decoder, and the
//     extraction stops at the limit (ErrQuota), whatever the headers said.
//     The count is the total written; a replaced file is not given back,
//     as both exist until the move. The Stager counts the bytes it writes
//     against the same limit too (a second net, at the file system).
//   - Extracted files are created by Stager.Create (one openat relative to
//     a cached directory descriptor, no temporary file, no fsync per file;
//     one syncfs before the move: see package files), by two writers while
//     the reading goroutine decodes: small files (≤ 1 MiB) are read into
//     memory and handed over, larger ones streamed through a chunkPipe.
//     The reading goroutine does every check and the counting, so the
//     order of checks is the archive's; directories and symlinks it
//     creates itself. Through Root.WriteFile (temporary file, fsync and
//     rename per file, each a lookup from the root) a 1 GiB world was
//     extracted at 0.53-0.83x the speed of tar xzf even with 8 writers
//     overlapping the fsyncs; through the Stager at 1.08-1.73x
//     (bench/files-archive.sh untargz, medians of 3, 2 cores). Directory
//     modes are set when the directory is made (owner rwx always kept, so
//     nothing has to wait for the end).
//   - Limits: MaxEntries entries, MaxEntryName bytes per stored name, 64 MiB
//     of names in all (what the checks keep in memory), and what the
//     decoders may allocate (above).
//   - Compress stores a symlink only when it stays inside, and what it
//     stores Decompress restores: the target must pass the extractor's
//     rule from the link's place in the archive (relative, inside the
//     archived directory, ".." only first), so it is created wherever the
//     archive is extracted, and, followed on disk from the link's real
//     directory through every link on its way (files.Root.LinkInside, as
//     the kernel would: a ".." leaves the directory actually reached), it
//     must not leave the root; a missing part is taken as plain
//     directories, so a dangling link is kept unless what follows the
//     missing part climbs out. Absolute targets are outside even when
//     they read like the root's ("/plugins/x" names a host path); so is a
//     link reaching outside the archived directory but inside the root
//     ("../world" when archiving plugins: extracted at the root it would
//     lead out, and the archive would be refused), and a loop (more than
//     40 links followed, as Linux gives up). Such links are left out, not
//     refused: one stray link (a log link to /var/log) should not make a
//     world unarchivable, and devices and FIFOs are left out the same
//     way. How many were left out is not reported: Compress returns the
//     archive's entry only, and the API answer has no field for it yet.
//   - Compress leaves out, unread, every regular file with more than one
//     hard link (st_nlink, read on the open descriptor): a hard link
//     planted in the root (`ln /etc/shadow plugins/x`, which a game server
//     running as a process can make on the same file system) shares its
//     inode, so its content, with the file outside, and nothing tells
//     where a file's other names are. Two names of one file inside the
//     root are left out too (files.ErrHardLink: Kiln never reads such a
//     file); reading them only when every name was met in the archived
//     tree would keep them, at the price of a second pass.
package archive
