package modcatalog

import (
	"bufio"
	"bytes"
	"crypto/sha1"
	"crypto/sha512"
	"encoding/hex"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// packBlob is one generated file of BenchmarkModpack200: its bytes come
// from a seeded ChaCha8 stream, made again for each request, so neither
// side holds a file in memory.
type packBlob struct {
	seed uint64
	size int64
}

// write streams the blob to w through one 32 KiB buffer.
func (p packBlob) write(w io.Writer) error {
	var seed [32]byte
	copy(seed[:], strconv.FormatUint(p.seed, 10))
	src := rand.NewChaCha8(seed)
	buf := make([]byte, 32<<10)
	for left := p.size; left > 0; {
		n := min(int64(len(buf)), left)
		src.Read(buf[:n])
		if _, err := w.Write(buf[:n]); err != nil {
			return err
		}
		left -= n
	}
	return nil
}

// BenchmarkModpack200 installs a 200-file pack (1 to 4 MiB each, 500 MiB
// in all) from a loopback upstream, in one process with it, and reports
// the most downloads in flight, the peak growth of the Go heap and of the
// process's resident memory during the install, and the throughput.
// Targets (bench/catalogs.sh): at most 8 in flight; memory not growing
// with the files: the heap's peak growth under 1 MiB per download in
// flight. The upstream's side (a 32 KiB buffer and a ChaCha8 state per
// request) is in the same process and counted.
func BenchmarkModpack200(b *testing.B) {
	e := newPackEnv(b, nil)
	const n = 200
	blobs := make([]packBlob, n)
	var list []map[string]any
	var total int64
	for i := range blobs {
		blobs[i] = packBlob{seed: uint64(i), size: 1<<20 + int64(i)*(3<<20)/(n-1)} // 1 to 4 MiB
		total += blobs[i].size
		s5, s1 := sha512.New(), sha1.New()
		if err := blobs[i].write(io.MultiWriter(s5, s1)); err != nil {
			b.Fatal(err)
		}
		list = append(list, map[string]any{
			"path":      fmt.Sprintf("mods/m%03d.jar", i),
			"hashes":    map[string]string{"sha512": hex.EncodeToString(s5.Sum(nil)), "sha1": hex.EncodeToString(s1.Sum(nil))},
			"downloads": []string{e.up.srv.URL + "/gen/" + strconv.Itoa(i)},
			"fileSize":  blobs[i].size,
			"env":       map[string]string{"client": "required", "server": "required"},
		})
	}
	var inFlight, most atomic.Int64
	e.up.mux.HandleFunc("GET /gen/{i}", func(w http.ResponseWriter, r *http.Request) {
		i, _ := strconv.Atoi(r.PathValue("i"))
		now := inFlight.Add(1)
		defer inFlight.Add(-1)
		for m := most.Load(); now > m && !most.CompareAndSwap(m, now); m = most.Load() {
		}
		w.Header().Set("Content-Length", strconv.FormatInt(blobs[i].size, 10))
		blobs[i].write(w)
	})
	e.writePack(b, "p.mrpack", buildPack(b, index(list...)))
	b.SetBytes(total)
	// The heap's peak is sampled with the collector run at 10 % growth
	// instead of 100 %: what is sampled is then the memory the install
	// holds, not the garbage the default pacing lets pile up between two
	// collections (B/op reports what was allocated in all).
	defer debug.SetGCPercent(debug.SetGCPercent(10))
	var heapPeak, rssPeak float64
	for b.Loop() {
		b.StopTimer()
		runtime.GC()
		heap0 := heapObjects()
		rss0 := resetPeakRSS(b)
		stop := sampleHeap()
		b.StartTimer()
		got, err := e.mp.Install(b.Context(), e.teamID, e.serverID, ModpackRequest{File: "p.mrpack"})
		if err != nil {
			b.Fatal(err)
		}
		got = e.waitPack(b, got.ID)
		b.StopTimer()
		peak := stop()
		if got.Status != PackDone || got.FilesDone != n {
			b.Fatalf("install = %+v: %v", got, *got.Error)
		}
		heapPeak = max(heapPeak, float64(peak-heap0)/(1<<20))
		rssPeak = max(rssPeak, float64(int64(peakRSS(b))-int64(rss0))/(1<<20))
		b.StartTimer()
	}
	b.ReportMetric(float64(most.Load()), "max-in-flight")
	b.ReportMetric(heapPeak, "heap-growth-MiB")
	b.ReportMetric(rssPeak, "rss-growth-MiB")
}

// heapObjects is the heap's live and not yet swept objects, in bytes.
func heapObjects() uint64 {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// sampleHeap samples heapObjects every millisecond until the returned
// function is called, which answers the highest value seen.
func sampleHeap() func() uint64 {
	var (
		mu   sync.Mutex
		peak = heapObjects()
		done = make(chan struct{})
		wg   sync.WaitGroup
	)
	wg.Go(func() {
		t := time.NewTicker(time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				v := heapObjects()
				mu.Lock()
				peak = max(peak, v)
				mu.Unlock()
			}
		}
	})
	return func() uint64 {
		close(done)
		wg.Wait()
		return peak
	}
}

// resetPeakRSS resets the process's peak resident size (VmHWM) to its
// current one and returns that, in bytes.
func resetPeakRSS(tb testing.TB) uint64 {
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		tb.Skipf("cannot reset the peak RSS: %v", err)
	}
	return procStatus(tb, "VmRSS:")
}

// peakRSS is VmHWM, the peak resident size since the last reset, in bytes.
func peakRSS(tb testing.TB) uint64 { return procStatus(tb, "VmHWM:") }

func procStatus(tb testing.TB, key string) uint64 {
	raw, err := os.ReadFile("/proc/self/status")
	if err != nil {
		tb.Skipf("no /proc/self/status: %v", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(raw))
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), key); ok {
			kb, _ := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10
		}
	}
	tb.Fatalf("%s not in /proc/self/status", key)
	return 0
}
