// Kiln: this package is github.com/klauspost/compress v1.20.3's
// internal/regmask, copied unchanged but for where it lives (internal
// packages cannot be imported from another module) for zstdfast's copied
// encoder. What it must never do: differ from upstream's, so a re-sync
// is a diff (see zstdfast's doc.go).

package regmask
