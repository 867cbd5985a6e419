package engine_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/kilnhq/kiln/internal/snapshot/engine"
	"github.com/kilnhq/kiln/internal/snapshot/engine/enginetest"
	"github.com/kilnhq/kiln/internal/snapshot/restore"
)

// world makes a world-like tree with shared/bench/worldgen.py (beside the
// repository, as CI has it), or skips.
func world(b *testing.B, size string) string {
	b.Helper()
	script, err := filepath.Abs("../../../shared/bench/worldgen.py")
	if err != nil {
		b.Fatal(err)
	}
	if _, err := os.Stat(script); err != nil {
		b.Skipf("no worldgen.py: %v", err)
	}
	dir := filepath.Join(b.TempDir(), "world")
	cmd := exec.CommandContext(b.Context(), "python3", script, "make", dir, "--size", size)
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Skipf("worldgen.py: %v\n%s", err, out)
	}
	return dir
}

// BenchmarkCreate snapshots a 200 MiB world (worldgen.py): "first" into
// an empty store (everything compressed and stored), "unchanged" into a
// store that holds it all (every chunk looked up), "mutated" after
// worldgen.py mutate --percent 1 (run with -benchtime 1x: see below).
func BenchmarkCreate(b *testing.B) {
	dir := world(b, "200M")
	root := enginetest.OpenRoot(b, dir)
	var size int64
	b.Run("first", func(b *testing.B) {
		for b.Loop() {
			store := enginetest.NewStore(b)
			res := enginetest.Create(b, root, store, engine.CreateOptions{})
			size = res.SizeBytes
			b.ReportMetric(float64(res.StoredBytes)/float64(res.SizeBytes), "stored/size")
			b.ReportMetric(float64(len(res.Chunks)), "chunks")
			if info, err := store.Stat(b.Context(), res.ManifestKey); err == nil {
				b.ReportMetric(float64(info.Size), "manifest-bytes")
			}
		}
		b.SetBytes(size)
	})
	store := enginetest.NewStore(b)
	first := enginetest.Create(b, root, store, engine.CreateOptions{})
	b.Run("unchanged", func(b *testing.B) {
		b.SetBytes(first.SizeBytes)
		for b.Loop() {
			res := enginetest.Create(b, root, store, engine.CreateOptions{})
			if res.NewChunks != 0 {
				b.Fatalf("%d new chunks in an unchanged tree", res.NewChunks)
			}
		}
	})
	script, _ := filepath.Abs("../../../shared/bench/worldgen.py")
	if out, err := exec.CommandContext(b.Context(), "python3", script, "mutate", dir, "--percent", "1").CombinedOutput(); err != nil {
		b.Fatalf("worldgen.py mutate: %v\n%s", err, out)
	}
	b.Run("mutated", func(b *testing.B) {
		// Only the first iteration finds new chunks: its figures are the
		// ones reported (run with -benchtime 1x).
		b.SetBytes(first.SizeBytes)
		n := 0
		for b.Loop() {
			res := enginetest.Create(b, root, store, engine.CreateOptions{})
			if n++; n == 1 {
				b.ReportMetric(float64(res.NewChunks), "new-chunks")
				b.ReportMetric(float64(res.StoredBytes), "stored-bytes")
			}
		}
	})
}

// BenchmarkRestore restores a 200 MiB world (worldgen.py) into an empty
// root.
func BenchmarkRestore(b *testing.B) {
	dir := world(b, "200M")
	store := enginetest.NewStore(b)
	res := enginetest.Create(b, enginetest.OpenRoot(b, dir), store, engine.CreateOptions{})
	b.SetBytes(res.SizeBytes)
	for b.Loop() {
		b.StopTimer()
		dst := b.TempDir()
		b.StartTimer()
		restoreAll(b, enginetest.OpenRoot(b, dst), store, res.ManifestKey, restore.Options{})
	}
}
