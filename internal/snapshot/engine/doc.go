// Package engine is the snapshot engine's writing side and what reads a
// stored snapshot back (internal/snapshot keeps the records, the chunk
// ledger and the lifecycle on top of it; internal/snapshot/restore makes
// a root equal to a stored snapshot): Create stores a server root's
// tree in a blob store (internal/blob) as content-addressed chunks and a
// manifest, Scan and FetchChunk read a manifest and a chunk back, each
// checked, ChunkKeys lists what a manifest references, Export writes a stored snapshot as a tar stream (PAX:
// exact mtimes; the manifest checked whole first, every chunk checked
// against its name, workers fetching at most four chunks ahead of the
// writer, so memory stays bounded whatever the snapshot's size),
// ChunkRefs lists a manifest's chunks with their lengths for a check, and
// QuarantineChunk moves a chunk found corrupt out of the chunk namespace.
// It owns
// the chunking, and reads and writes manifests through
// internal/snapshot/manifest (the format and the checks of what a
// manifest says); it knows nothing of snapshot records, schedules, HTTP or the database (the
// lifecycle above it keeps those, and the ignore text: ignore.Parse's
// Match is what CreateOptions.Ignore and restore.Options.Ignore take).
//
// What it must never do: open a path of the tree other than through
// internal/files (Root.Walk, and Root.OpenDir for a descriptor below which
// every name is opened with openat O_NOFOLLOW, one component at a time),
// follow a symlink, read a file with other hard links, write into the
// tree, store a manifest before every chunk it names, replace a blob,
// trust anything a manifest or a chunk says, stage a whole archive on
// local disk, hold memory in proportion to the tree, or move a chunk
// aside that it did not just read corrupt itself.
//
// Decisions:
//   - Chunking: FastCDC (github.com/PlakarKorp/go-cdc-chunkers,
//     "fastcdc-v1.0.0", its fixed unkeyed gear table, so the same bytes
//     cut the same way on every node and in every snapshot), cutting at
//     256 KiB at the earliest, 1 MiB normally, 4 MiB at the latest.
//     BenchmarkChunker, 256 MiB of random bytes from memory, one core
//     (-cpu 1), on this 2-core VM on 2026-11-23: FastCDC 1.61–1.94 GB/s
//     (1.23 MiB mean chunk), restic/chunker (Rabin, its defaults 512 KiB
//     / 1 MiB / 8 MiB) 0.40–0.63 GB/s (1.59 MiB mean); a second run with
//     the machine shared (load 7) gave 0.34–0.69 against 0.20–0.28 GB/s.
//     FastCDC is 3x faster and the only one above the 1 GB/s target: a
//     gear hash is one shift, add and table lookup per byte where Rabin
//     slides a 64-byte window (two lookups and an xor), and FastCDC does
//     not hash the first 256 KiB of a chunk at all. restic/chunker's
//     side of the benchmark was removed once the choice was made (commit
//     e334ecf has it): go.mod carries no module only a comparison used.
//   - Region files (.mca, .mcr: world/region, entities, poi) are cut
//     every 1 MiB from their start instead (sectorCut), without a
//     fingerprint. Content-defined cuts exist for bytes that shift when
//     something is inserted before them; a region file's bytes never
//     shift: the game rewrites a chunk in its own 4 KiB sectors, or
//     moves one that outgrew them to free sectors, and the header's
//     locations say where. Fixed cuts aligned to the file's start (so to
//     its sectors) change exactly where the sectors changed, as FastCDC's
//     did (worldgen's 1 % mutate: 5 new chunks, 4.3 MB, either way), and
//     most of a world's bytes are region files: the first snapshot of a
//     1 GiB world takes 0.7 CPU-s less, ~20 % of its time
//     (docs/benchmarks.md, 2026-11-27 evening; TestRegionFileCuts). A
//     file so named that is not a region file is stored as correctly,
//     only deduplicated worse if bytes are inserted into it. Region files
//     stored by a Kiln that cut them by content are not read again while
//     unchanged (the parent's extents are reused); one that changes is
//     stored whole once in the new cuts.
//   - Cutting in place: the library cuts in its own buffer, so every
//     chunk had to be copied out of it before the next cut (a copy of
//     every byte read). Its cut function (FastCDC.Algorithm with the
//     library's gear table and masks) is restated in cutPoint, and
//     TestCutPointMatchesLibrary holds the two to the same cuts, so stores
//     made before still dedupe. Files are read into slabs of 8 MiB, cut
//     there, and each chunk is a slice of its slab handed to the
//     transfers, which hold the slab until the chunk is stored; the bytes
//     a slab ends with that do not make a chunk yet move to the next one.
//     A transfer lets go of a chunk's slab as soon as the chunk is
//     compressed (not once it is written). Seven slabs on two cores (one
//     per cursor that can wait while holding one, plus three: 56 MiB,
//     mapped memory rather than Go heap: chunker.go) bound the chunk
//     bytes in memory. Compressed
//     chunks are written into buffers Create keeps for the next ones (up
//     to 8 MiB free, outpool.go): made anew for each chunk, they were 500
//     MB of garbage for a 1 GiB world, and the collector's goal, which
//     follows the garbage, was most of the peak RSS.
//   - Chunks are named by the SHA-256 of their uncompressed bytes
//     (chunks/<2 hex>/<64 hex>) and stored as one zstd frame each with a
//     4 MiB window and no frame checksum (a restore checks the SHA-256).
//     Levels, measured on the chunks of a 1 GiB worldgen world (one core
//     unless said, 2026-11-23): large files' chunks at klauspost's
//     SpeedFastest without entropy coding of literals: 737.1 MB in 0.46 s
//     (0.67 s with it, same size); SpeedDefault 731.4 MB in 1.2–1.4 s;
//     SpeedBetterCompression 729.5 MB in 1.8 s alone but 2.5 CPU-s more
//     than SpeedFastest a GB inside Create. Where klauspost's fastest level
//     loses is worldgen's region chunks: their zlib streams end in runs of
//     one repeated deflate code (periodic bytes, 60–110 of them) after
//     4,500 bytes of noise, and its fast encoder, which widens its step
//     through incompressible input by 1/32 of the bytes since the last
//     match (C zstd -1 by 1/128), steps over them (replacing the zlib
//     bytes with noise of the same length makes both equal).
//   - So the fastest level's region chunks come out about 0.9 % larger
//     than C zstd -1 makes them (735.34 MB against 729.75 on a 1 GiB
//     world's region files). Kiln uses klauspost's encoder as it is:
//     from 2026-11-28 02:40 to the next stop a trimmed copy of it with
//     that step capped at 2+32 bytes (internal/zstdfast, 728.80 MB) was in
//     the tree, and Kiln's code is written here: other projects' code
//     comes in as modules only. The cap is proposed upstream as an
//     option (a maximum step for the fast and default encoders, e.g.
//     zstd.WithEncoderMaxSkip(n)); until klauspost/compress has it, the
//     fastest level's store is up to 1 % larger than tar | zstd -1 (it
//     stays smaller and faster than restic's), and the operator who wants
//     the smaller store picks default (1.001× of zstd -1 for 1.2 CPU-s
//     more a GB) or better (0.998×, 2.5 more). A fork behind a replace
//     directive would break `go install …@version` and is a copy too.
//     Region chunks skip entropy coding of literals
//     (zstd.WithNoEntropyCompression: their literals are zlib's noise,
//     where Huffman coding saved nothing measurable and cost 0.2 s a GB);
//     other large files' chunks keep it (a log 11 % smaller).
//   - The other levels stay klauspost's (CreateOptions.Compression, kiln
//     serve --snapshot-compression: fastest, default, better;
//     compress.go), as Wings' backups.compression_level lets operators
//     buy space with CPU: on region files default and better are
//     smaller than fastest by under 1 %, and on files zstd compresses well (logs,
//     plugin data, text) SpeedDefault and SpeedBetterCompression still
//     find more. Packs of small files (text, mostly) are at SpeedDefault
//     at every level, one encoder per worker (one made the small files'
//     phase serial): SpeedBetterCompression would save 0.17 MB of 16 MB
//     of small files for 0.2 CPU-s more (60 MB/s on them),
//     SpeedBestCompression 0.29 MB more, but its tables are 35 MiB (kiln
//     serve's RSS target).
//   - Packs: a file of at most 256 KiB would be a chunk of its own (FastCDC
//     never cuts before that), so a world's 20,000 player, stats and
//     config files made 20,136 chunks of a 200 MiB world, 10 KiB each:
//     20,000 store requests (a file-store fsync, an S3 round trip each;
//     12–27 s for that world's first snapshot here). Small files are
//     concatenated into packs instead, and the manifest records each
//     file's content as extents (chunk, offset, length): the same world
//     makes 166 chunks and its first snapshot 2.6 s. A pack ends after a
//     file when a hash of the file's path falls under size/1 MiB (about
//     1 MiB a pack), so where packs end is decided by each file itself: a
//     changed file changes its own pack and at most the next; the others
//     stay the same chunks (TestPacks: one of 4,540 files changed, one new
//     chunk). A pack also ends at 4 MiB, at 1,024 files, or when 4,096
//     entries wait behind it; these bound memory, and only shift ends
//     locally.
//   - Create is a pipeline whose queues, not the tree, bound its memory:
//     one walker (files.Root.WalkTypes: by descriptor, O_NOFOLLOW, parents
//     first, names in byte order) opens files 16 ahead, by descriptor
//     (files.Root.WalkTypes and Opener.OpenFD: a file's kind from the
//     directory listing, its stat from the descriptor, no *os.File: 5
//     system calls a small file, as tar); one cutter reads the
//     small files into packs and hands each large file to one of NumCPU
//     (at most 4) file cutters, which read and cut it in their own
//     cursor (one cutter for every byte kept Create at 1.45 cores on
//     two); 16 transfers hash, look up (Stat, cheaper than an upload) and
//     upload the chunks, compressing on NumCPU encoders (and NumCPU for
//     packs) into buffers within a budget of 32 MiB; one writer writes
//     each entry once all its chunks are stored, in walk order, streaming
//     the manifest into the store's Put (size unknown); entries wait for
//     it in a queue of two packs' worth (8,192), so that the cutter reads
//     on while a pack is stored. Peak heap in use measured for 50 and 200
//     MiB trees alike (TestMemoryBound). Two cores are kept busy by the
//     cutters and the encoders; the transfers hide the store's latency.
//   - Chunks before the manifest: chunks are put through a blob.Batch,
//     which the file store writes without a sync each (one sync per chunk
//     and per chunk directory made the file store cost more than the
//     engine itself); the writer commits the batch (every chunk durable
//     and visible, blob/doc.go) after the last entry and before it ends the
//     manifest's stream, and the manifest's Put (atomic, put-if-absent,
//     durable) completes only after that end. Each entry was written after
//     its chunks were put; any error closes the stream with that error, so
//     no manifest is stored. A chunk found in the store (Stat) rather than
//     put is covered too: Commit makes whatever is visible when it starts
//     durable. A collector may
//     therefore delete any chunk that no stored manifest references and
//     that is older than the longest Create (a Create in flight has stored
//     chunks its manifest does not show yet). Result.Chunks, and
//     ChunkKeys for a stored manifest, list what a manifest references.
//   - Dedup: a chunk already named in this snapshot, one the caller says
//     is known (CreateOptions.Known), or one Stat finds is not uploaded;
//     StoredBytes counts only what this snapshot added. A chunk is
//     uploaded with the CRC-32C of its compressed bytes (blob.Checked), so
//     the store refuses bytes changed between the encoder and the disk or
//     the S3 server (blob/doc.go).
//   - A corrupt chunk poisons every snapshot after it: a look-up (Stat)
//     finds it, so it is referenced again, never read, and the snapshot
//     is ready yet cannot be restored. Reads therefore name what they
//     found wrong: FetchChunk (restore, export, a check) answers
//     *ChunkError with the chunk's key and reference, corrupt
//     (ErrCorruptChunk) or missing (blob.ErrNotFound); and
//     QuarantineChunk reads the chunk again and, still corrupt, moves it
//     to quarantine/<key>.<ms> (a copy, then the delete): a look-up no
//     longer finds it and the next snapshot of the same data stores it
//     again (TestQuarantineChunk), which also makes the older snapshots
//     naming it whole again, their chunk being under its name once more.
//     Move rather than delete, so that the operator can look at what the
//     disk or the bucket did; rather than a mark in the database that
//     look-ups would consult, because a Put never replaces a blob: the
//     corrupt bytes must leave the key before the good ones can take it.
//     The caller holds the chunk while it moves it (internal/snapshot's
//     ledger): no one else deletes or moves it, so between the read and
//     the delete no good copy can take its place. Verifying every chunk
//     a snapshot finds by look-up would read the whole store at every
//     snapshot; kiln admin snapshots check --read-data does that on
//     demand instead, as restic check --read-data does.
//   - Left out of a snapshot (Result.Skipped): files with more than one
//     hard link (files.ErrHardLink: one name may be outside the root;
//     Kiln never reads them), symlinks that lead out or could (an
//     absolute target, a lexical escape, a ".." after a name, or a target
//     that leads out through the links on its way, files.Root.LinkInside:
//     a restore would refuse them), devices, FIFOs and sockets. The
//     root's own mode and mtime are not recorded (the root keeps its
//     mode, files' rule). Files that change while they are read are
//     stored as read: stop the world's saving first.
//   - Progress counts bytes read and cut (and those of files reused from
//     the parent); its total is measured by a first walk (stat only) when
//     Progress is set.
//   - Parent (the files cache of restic and borg): CreateOptions.Parent
//     names an earlier snapshot of the tree. Its manifest is read through
//     once (checked as a restore checks it), every chunk it references is
//     pinned and looked up (a chunk collected since is not found, and the
//     files that need it are read again: a manifest never names a missing
//     chunk), then read again in step with the walk: both are in walk
//     order, so matching a file to its parent entry is a merge, in memory
//     bounded like a restore's. A regular file keeps the parent's extents
//     unread when its size, mtime, ctime (ns) and inode number (from an
//     fstat of the opened file) equal the entry's, and the entry's mtime
//     and ctime are more than 2 s before the parent's start (recorded in
//     the manifest): a file written within one tick of the file system's
//     clock of the parent reading it may have changed again with the same
//     stat. The ctime catches a rewrite whose mtime was put back; the
//     inode a file replaced by another. Packs: a small file is reused on
//     its own, by its extent in the parent's pack, even if other files of
//     that pack changed; only changed files go into new packs. So a pack
//     is never rewritten for one changed file, at the cost of the changed
//     file's old bytes staying in the old pack as long as a manifest
//     references the pack (at most 4 MiB a pack). A parent that cannot be
//     used (missing, corrupt, version 1) leaves every file read
//     (Result.ParentErr). The parent's chunks the new manifest does not
//     reference were pinned too: the caller drops those references
//     (internal/snapshot does, when the snapshot becomes ready).
//   - Chunk spaces (CreateOptions.Space): a chunk's key is its SHA-256
//     under its space, chunks/<space>/<2 hex>/<64 hex>, or
//     chunks/<2 hex>/<64 hex> in the shared space (""). Snapshots of one
//     space share chunks, snapshots of two spaces never do: each stores
//     its own copy, so neither what a snapshot stores nor how long it
//     takes depends on another space's content. internal/snapshot gives
//     each team a space (or all of them the shared one, an operator's
//     choice). The space is in the manifest's header, so ChunkKeys,
//     Restore and a later snapshot's parent comparison name the chunks
//     as they were stored; a parent of another space is not used
//     (ErrParentSpace): its chunks are not the new snapshot's to
//     reference. A space name is a directory of the store: a-z, 0-9,
//     '_' and '-', at most 64 (manifest.ValidSpace; a manifest naming another is
//     corrupt).
//   - Manifest format v3 (internal/snapshot/manifest; v1 and v2 are still read, and
//     restored; v3 adds the chunk space to v2's header):
//     one zstd stream (SpeedDefault) of a magic, a version, a header naming the chunker,
//     the snapshot's start and its chunk space, one binary record per entry (varints; a
//     directory's and a file's permission bits and mtime in ns as the
//     difference from the previous record's, a file's ctime and inode
//     for the parent comparison, its size and extents, an extent of the
//     previous extent's chunk without the chunk's name, a link's target)
//     in walk order, and an end record with the counts and the SHA-256 of
//     everything before. It is read record by record: because entries
//     come parents first and names in byte order, a reader checks
//     duplicates and parents with one open directory per level, so a
//     manifest of any size is checked in memory bounded by depth. The
//     manifest of a 1 GiB worldgen world (20,168 files) is 375 KB (v1,
//     at the fastest level: 444 KB).
package engine
