package blob

import (
	"crypto/md5"
	"crypto/sha256"
	"testing"
)

// BenchmarkChecksum: what each checksum S3 takes costs a chunk-sized
// buffer (1 MiB), on one core: the choice of CRC-32C for uploads
// (doc.go, "Checksums"; docs/benchmarks.md).
func BenchmarkChecksum(b *testing.B) {
	buf := make([]byte, 1<<20)
	for i := range buf {
		buf[i] = byte(i * 7)
	}
	for _, c := range []struct {
		name string
		sum  func([]byte)
	}{
		{"crc32c", func(p []byte) { CRC32C(p) }},
		{"sha256", func(p []byte) { sha256.Sum256(p) }},
		{"md5", func(p []byte) { md5.Sum(p) }},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(buf)))
			for b.Loop() {
				c.sum(buf)
			}
		})
	}
}
