// Package manifest is the format of a snapshot's manifest: what a
// snapshot holds (every directory, file and link of the tree with its
// mode, times and, for a file, the extents of chunks its content is made
// of) written as one checksummed zstd stream, and read back record by
// record. Encoder writes one, Decoder reads one checking the format
// (bounds on every length and count, the end record's counts, the
// SHA-256 of the whole), Validator checks what the entries say (clean
// relative paths in walk order, no duplicate, everything under a
// directory of the manifest, links that stay inside), and Read does both
// at once. ChunkKey names a chunk's blob; ValidSpace checks a chunk
// space's name.
//
// It is its own package because everything in internal/snapshot/engine
// reads or writes manifests (create, the parent comparison, restore, the
// restore over a tree, export, ChunkKeys) and the format's rules are the
// engine's security boundary: a restore trusts nothing a manifest says,
// so what is refused is decided here, in one place, and tested with
// hostile manifests (internal/snapshot/engine's hostile_test.go). Why the
// format is shaped as it is: internal/snapshot/engine/doc.go, "Manifest
// format".
//
// What it must never do: touch a file, a directory or a blob store (it
// reads and writes streams only), hold more than one record in memory
// (a manifest of any size is read in memory bounded by the tree's
// depth), or accept a manifest it cannot fully check: a newer version,
// a truncated one or one with data after its end is ErrInvalid. The
// encoder writes what it is given, unchecked (the reader's job; tests
// craft hostile manifests with it).
//
// The stream is compressed with github.com/klauspost/compress/zstd, the
// engine's compressor for chunks (see the engine's doc.go), at its
// default level.
package manifest
