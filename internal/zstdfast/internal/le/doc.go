// Package le loads and stores little-endian integers from byte slices,
// with unsafe loads on 64-bit little-endian platforms (unless built with
// nounsafe or purego) and encoding/binary elsewhere.
//
// It is github.com/klauspost/compress v1.20.3's internal/le, copied
// unchanged but for where it lives (internal packages cannot be imported
// from another module) for zstdfast's copied encoder, whose call sites
// stay upstream's. What it must never do: differ from upstream's, so a
// re-sync is a diff (see zstdfast's doc.go), or check bounds less than
// its callers rely on: the unsafe loads trust the encoder's own checks.
package le
