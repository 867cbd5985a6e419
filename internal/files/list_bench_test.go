package files

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// BenchmarkList10k: List of a 10,000-entry directory (the target
// is the API answer in under 50 ms; bench/files-ops.sh measures that).
func BenchmarkList10k(b *testing.B) {
	dir := b.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "big"), 0o755); err != nil {
		b.Fatal(err)
	}
	for i := range 10000 {
		name := fmt.Sprintf("file-%05d.txt", i)
		if err := os.WriteFile(filepath.Join(dir, "big", name), []byte(name), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	r, err := Open(dir)
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := r.List("big"); err != nil {
			b.Fatal(err)
		}
	}
}
