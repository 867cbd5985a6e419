// Package blob stores the snapshot feature's blobs — content-addressed
// chunks (chunks/<2 hex>/<sha256 hex>) and manifests (manifests/<uuid>) —
// behind one Store interface with two backends: a local directory
// (file:///abs/dir, the default under the data dir) and an S3-compatible
// bucket (s3://bucket/prefix?endpoint=…&region=…). Open picks the backend
// from the URL; the credentials come in Options, never in the URL. It
// knows nothing of snapshots: keys are opaque to it.
//
// What it must never do: expose a half-written blob (a reader sees nothing
// or all of it), overwrite an existing blob (Put is put-if-absent; the
// snapshot collector relies on a stored chunk never changing), or log,
// print or return a credential (String, errors and Options' own String
// leave the secret out). It reads no environment variable: cmd/kiln reads
// --blob-url and the credentials and passes them in.
//
// Decisions:
//   - Keys are 1–1024 bytes of [a-z0-9._/-], without a leading or trailing
//     "/", "//", or a "." or ".." segment (ValidateKey): a valid key is a
//     clean relative path on every backend, so the file backend maps it to
//     a file without escaping its directory, and the same keys work on S3.
//   - File backend: a Put stages the bytes in <dir>/~tmp/put-<random>,
//     fsyncs the file, renames it to its key with renameat2(RENAME_NOREPLACE)
//     (link(2) where the file system lacks the flag, e.g. ZFS before 2.2)
//     and fsyncs the key's directory (and the parent of any directory it
//     created). An existing key makes the rename fail, so of concurrent
//     Puts of one key exactly one reports created, and nothing is ever
//     replaced. The staging directory is one directory at the top rather
//     than a temporary file beside each key: '~' is no key byte, so List
//     and Get can never see a staged file, and removing the leftovers of a
//     crash (Options.CleanBefore, at Open) reads one directory instead of
//     walking every chunk. A rename between two directories of one file
//     system is as atomic as one within a directory.
//   - File backend: Delete fsyncs the directory too (the collector deletes
//     a manifest before the chunks only it referenced; a crash must not
//     bring back the manifest without its chunks) and never removes
//     directories, so a concurrent Put never finds its directory gone;
//     there are at most 256 chunk directories. A key that is another key's
//     directory ("a" beside "a/b") cannot be stored in this backend (Put
//     fails); the snapshot layout never asks for one.
//   - List walks only the directory the prefix's directory part names, and
//     only the subdirectories that can hold a matching key.
package blob
