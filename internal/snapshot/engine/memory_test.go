package engine_test

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"sync"
	"testing"
	"time"

	"github.com/kilnhq/kiln/internal/snapshot/engine"
	"github.com/kilnhq/kiln/internal/snapshot/engine/enginetest"
	"github.com/kilnhq/kiln/internal/snapshot/restore"
)

// peakHeap runs fn and returns the most heap in use seen while it ran
// (sampled every 5 ms, and once at the end). The collector runs often
// meanwhile, so that what is sampled is mostly live memory, not garbage
// waiting for a collection.
func peakHeap(t *testing.T, fn func()) uint64 {
	t.Helper()
	defer debug.SetGCPercent(debug.SetGCPercent(10))
	runtime.GC()
	var peak uint64
	sample := func() {
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		peak = max(peak, ms.HeapInuse)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				sample()
			}
		}
	})
	fn()
	close(stop)
	wg.Wait()
	sample()
	return peak
}

// TestMemoryBound: Create and Restore hold a bounded amount of memory,
// whatever the tree's size: below fixed bounds (Create: its slabs, its
// budget for compressed chunks, the free buffers it keeps for them and
// its encoders) for 50 and 200 MiB
// alike, far below the data.
func TestMemoryBound(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 250 MiB")
	}
	var (
		createMax  = uint64(engine.SlabCount(engine.FileCutters(runtime.NumCPU())))*engine.SlabSize + engine.InFlightBytes + engine.OutPoolLimit + 24<<20 // the encoders, the queues
		restoreMax = uint64(48 << 20)
	)
	for _, mib := range []int{50, 200} {
		tr := enginetest.NewTree(t)
		for i := range mib / 2 {
			tr.File(fmt.Sprintf("region/r.%d.mca", i), tr.Random(2<<20), 0o644)
		}
		store := enginetest.NewStore(t)
		var res engine.Result
		c := peakHeap(t, func() { res = enginetest.Create(t, enginetest.OpenRoot(t, tr.Dir), store, engine.CreateOptions{}) })
		dst := t.TempDir()
		r := peakHeap(t, func() { restoreAll(t, enginetest.OpenRoot(t, dst), store, res.ManifestKey, restore.Options{}) })
		t.Logf("%d MiB: peak heap in use %.1f MiB during Create, %.1f MiB during Restore", mib, float64(c)/(1<<20), float64(r)/(1<<20))
		if c > createMax {
			t.Errorf("%d MiB tree: Create's peak heap %d MiB, want <= %d MiB", mib, c>>20, createMax>>20)
		}
		if r > restoreMax {
			t.Errorf("%d MiB tree: Restore's peak heap %d MiB, want <= %d MiB", mib, r>>20, restoreMax>>20)
		}
	}
}
