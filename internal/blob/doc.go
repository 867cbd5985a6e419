// Package blob stores the snapshot feature's blobs — content-addressed
// chunks (chunks/[<space>/]<2 hex>/<sha256 hex>) and manifests
// (manifests/<uuid>) —
// and the installers' artifact cache (artifacts/…, package
// catalog/install) —
// behind one Store interface with two backends: a local directory
// (file:///abs/dir, the default under the data dir) and an S3-compatible
// bucket (s3://bucket/prefix?endpoint=…&region=…). Open picks the backend
// from the URL; the credentials come in Options, never in the URL. It
// knows nothing of snapshots: keys are opaque to it.
//
// What it must never do: expose a half-written blob (a reader sees nothing
// or all of it), store a Checked blob whose bytes differ from its
// checksum, overwrite an existing blob (Put is put-if-absent; the
// snapshot collector relies on a stored chunk never changing), or log,
// print or return a credential (String, errors and Options' own String
// leave the secret out; an s3 URL with user info is refused without being
// echoed). It reads no environment variable: cmd/kiln reads --blob-url and
// the credentials and passes them in.
//
// Decisions:
//   - Every S3 request has deadlines (deadline.go): 10 s to connect and
//     for TLS, 60 s from the request sent to the answer's headers, and 60
//     s at most without a byte moving either way (a deadline set before
//     each read and write of the connection, so a large transfer that
//     flows is never cut). minio-go's own transport had the first two but
//     nothing once a body flowed: a store that stopped mid-answer held a
//     snapshot "creating" for ever, with its slot. With minio-go's 3
//     retries a hung store fails a request within about four minutes, told
//     as "the object store did not answer in time".
//   - Keys are 1–1024 bytes of [a-z0-9._/-], without a leading or trailing
//     "/", "//", or a "." or ".." segment (ValidateKey): a valid key is a
//     clean relative path on every backend, so the file backend maps it to
//     a file without escaping its directory, and the same keys work on S3.
//     A backend narrows this where it must (ErrInvalidKey too): the file
//     backend takes segments of at most 255 bytes, S3 at most 1,024 bytes
//     of prefix and key.
//   - A Put's size is exact: a reader that ends early or holds more fails
//     the Put before its last bytes are written, so nothing is stored.
//   - Checksums (checksum.go): a caller may hand a Put its body as
//     Checked(r, crc), crc the CRC-32C of the bytes as it made them (the
//     snapshot engine does for every chunk, as it leaves the encoder).
//     The file backend hashes the bytes as it writes them (write(2) or the
//     O_DIRECT pwrite) and, before the file is synced and renamed to its
//     key, refuses a blob whose hash differs (ErrChecksum; nothing
//     staged is left). The S3 backend checks the buffer it is about to
//     send against crc, and sends every PUT with its CRC-32C in
//     x-amz-checksum-crc32c (computed from the buffer whether the caller
//     gave one or not), which the server checks against what arrives:
//     over https minio-go signs no payload (UNSIGNED-PAYLOAD), so a body
//     changed after TLS ends (a proxy, a load balancer, a NIC, memory) was
//     stored as it arrived (TestS3ChecksumInTransit: a proxy flipping a
//     bit). The parts of a multipart upload (blobs over one part: large
//     manifests, artifacts) carry Content-MD5 instead: a part's
//     x-amz-checksum-* would need the algorithm declared at the upload's
//     creation and the checksums repeated at its completion, which S3
//     and S3-compatible servers treat differently, while every one of them
//     checks Content-MD5; the caller's crc is then checked over the parts
//     as sent, before the completion. A body the server refuses for its
//     checksum (BadDigest and kin) is sent again from the buffer, 3 times
//     in all, then the Put fails with ErrChecksum, told as "the object
//     store received bytes that differ from those sent". CRC-32C rather
//     than SHA-256 or MD5: on the benchmark's VM it costs a fifteenth of
//     SHA-256's time and a thirtieth of MD5's (BenchmarkChecksum,
//     docs/benchmarks.md: a 1 GiB world's 0.74 GB of chunks for 0.04
//     CPU-s, where SHA-256 would add 0.6 and MD5 1.4 to a snapshot); it is
//     what S3's own SDKs send by default, and it catches every error burst
//     of up to 32 bits. It guards the transfer, not against an adversary:
//     a chunk's name is the SHA-256 of its content, which every read
//     checks.
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
//   - Batches (Batch, NewBatch): a snapshot stores hundreds of chunks that
//     need to be durable only before its manifest, not one by one. The
//     file backend's batch stages each blob, in a directory of its own
//     inside the staging one (removed when the batch ends, so a batch's
//     hundreds of names never grow the staging directory, which ext4
//     never shrinks), without a sync. A blob handed over as a
//     *bytes.Reader of its exact size (the engine's compressed chunks) is
//     written with O_DIRECT (direct.go): from the caller's buffer to the
//     disk, its last partial 4 KiB block through an aligned bounce buffer
//     and the file cut back to its size. Through the page cache, each
//     byte was copied and each page allocated: 1.5–1.8 CPU-s a GB of
//     system time on the benchmark's VM, more than hashing, cutting and
//     compressing together, and a 1 GiB snapshot evicted 1 GiB of the
//     game servers' cached files for data nobody reads soon. A file
//     system or disk that refuses O_DIRECT (EINVAL: tmpfs before Linux
//     6.6, some FUSE, a device asking more than 4 KiB alignment) makes the
//     store stage through the page cache from then on: one write(2) and a
//     writeback started (sync_file_range). Commit syncs the file
//     system once (syncfs: the staged data, and what other batches made
//     visible), renames every staged file to its key (put-if-absent as
//     Put; directories made without a sync each) and syncs the file system
//     again (the names). A blob of a batch is thus never visible before
//     its bytes are durable, so any blob a Stat finds is whole even after a
//     power cut, and a crash leaves only staged files (removed at the next
//     Open). On the 1 GiB snapshot benchmark this replaced 1,814 fsyncs
//     (a file and a directory per chunk) with 2 syncfs. The S3 backend's
//     Put is durable when it returns: its batch is Put itself, and Commit
//     does nothing; so is any other Store's.
//   - File backend: Delete fsyncs the directory too (the collector deletes
//     a manifest before the chunks only it referenced; a crash must not
//     bring back the manifest without its chunks) and never removes
//     directories, so a concurrent Put never finds its directory gone;
//     there are at most 256 chunk directories. A key that is another key's
//     directory ("a" beside "a/b") cannot be stored in this backend (Put
//     fails); the snapshot layout never asks for one. List walks only the
//     directory the prefix's directory part names, and only the
//     subdirectories that can hold a matching key.
//   - S3 backend, put-if-absent: Put first stats the key (an existing
//     chunk, the common case of a later snapshot, costs one HEAD and its
//     reader is not read), then writes with If-None-Match: *, which S3 (since
//     2024), MinIO and versitygw evaluate atomically: 412 means another Put
//     created the key meanwhile (created = false). versitygw (v1.8.0, the
//     test server) checks it under a per-key publish lock (flock) on both
//     PutObject and CompleteMultipartUpload. A server that answers 501 to
//     the header switches the store to Stat-then-Put (the Put that met the
//     501 is retried from its buffer); one that ignores it overwrites. Both
//     are harmless here because keys are content-addressed or unique: a
//     racing duplicate stores identical bytes, though two racing Puts may
//     then both report created.
//   - S3 backend, streaming: Put reads one part (Options.PartSize, 16 MiB
//     by default) into one buffer; a blob that fits is one PUT (sent from
//     the buffer, so a 501 retry and the size check are free), a larger one
//     a multipart upload with its parts sent one after another from the
//     same buffer, aborted on any failure (with 30 s past a cancelled ctx).
//     Memory is bounded by one part whatever the size, known or not (a
//     20 MiB stream with 5 MiB parts allocates about 9 MiB in all). The
//     multipart loop is ours, not minio-go's PutObject: v7.4.1 leaves
//     If-None-Match out of CompleteMultipartUpload (completeUploadOpts),
//     where S3 evaluates it; TestS3ConditionalPut caught it. An upload
//     left by a crash is the bucket's to expire (an
//     AbortIncompleteMultipartUpload lifecycle rule).
//   - S3 backend, errors: every failure of the server, or of reaching it,
//     is an *Error: a sentence a team may read (it reaches snapshot
//     records and install errors) — "the object store refused the request
//     (access denied)", "(no such bucket)", "(<S3 code>)", "the object
//     store is unreachable" — and the detail for the log, where a
//     server's refusal has its code and status ("s3
//     SignatureDoesNotMatch (403): …") so a wrong credential reads as one.
//     minio-go's errors name the endpoint, bucket and object (a request's
//     URL), so the sentence never quotes them; nor does an invalid key's
//     error name the prefix. Read errors of a Get's body are *Error too. A HEAD's 404 has no body, and some servers answer 404
//     to an unknown access key (versitygw: XAdminUserNotFound): the first
//     404 of a Stat is confirmed by a GET, whose body names the real error,
//     before any 404 is trusted to mean ErrNotFound.
//   - S3 backend, addressing: path-style (bucket in the path), which every
//     S3-compatible server takes. The endpoint is https, or plain http to
//     a loopback address (tests, a local gateway); plain http to another
//     host needs insecure=true in the URL, an explicit choice. Signing
//     never sends the secret, but plain http exposes the data.
//   - S3 client library: github.com/minio/minio-go/v7 rather than
//     aws-sdk-go-v2 (service/s3 + feature/s3/manager), measured on
//     2026-11-23 with equivalent Put/Get/Stat/Delete/List programs linked
//     into cmd/kiln and run against versitygw 1.8.0 on this 2-core host:
//     binary growth +1.45 MiB (34.08 → 35.61 MB) against +2.63 MiB
//     (→ 36.84 MB); modules linked in +12 against +13 (go.sum +32 lines
//     against +38); allocation per 1 MiB PUT 392 KiB against 2,261 KiB, and
//     for a 128 MiB stream of unknown size 27 against 67 MiB; throughput
//     the same within the host's noise (1 MiB PUTs 155–234 against
//     141–175 MiB/s, the 128 MiB stream 108–129 against 106–121 MiB/s).
//     minio-go also needs no checksum settings to talk to S3-compatible
//     servers (aws-sdk-go-v2's default CRC checksums since 2025 do), and
//     its Core API gives the multipart calls the loop above needs. Its
//     full module graph is larger (go list -m all 366 against 189 lines),
//     but those are its dependencies' tests, never downloaded to build.
package blob
