// Package secretbox seals the secrets Kiln must keep and read back —
// deployments' forwarding secrets now, SFTP passwords and database
// credentials next — with AES-256-GCM under one key, so that none is
// stored in plain text. It never logs a key or a secret.
//
// Decisions:
//   - The key is 32 random bytes: given by the operator (--secret-key,
//     base64), or else created on the first start in <data-dir>/secret.key
//     (0600) and read from there afterwards. Replicas sharing a PostgreSQL
//     database must be given the same key: each has its own data dir.
//   - A sealed value is "v1:" + base64(nonce | ciphertext | tag), the
//     nonce random (12 bytes): the same secret sealed twice differs, and
//     the version prefix leaves room for a key rotation later.
//
// Why the standard library: crypto/aes + crypto/cipher GCM is the
// maintained, constant-time AEAD the task needs; nothing else is wanted.
package secretbox
