package node

import "runtime"

// ProcsPerCore is how many Go Ps (GOMAXPROCS) kiln serve runs for each
// core the runtime would use by default.
//
// Why more than one: much of what kiln serve does waits on the disk
// inside a system call (a snapshot's direct writes and chunk files, an
// archive's files, SFTP). A goroutine in a system call keeps its P until
// the runtime's monitor takes the P back, tens to hundreds of
// microseconds later on a VM; with one P per core, a core sits idle for
// that long after every such call although other goroutines are ready.
// Measured on the benchmark VM (2 cores): the first snapshot of the
// 1 GiB world's region files took 1.15–1.18 s with 2 Ps (the cores idle
// or in I/O wait for a quarter of the run while the scheduler's run
// queue held 5–15 goroutines), 0.98–1.00 s with 3 and 0.92–0.93 s with
// 4; the whole world 1.24–1.38 s against 1.10–1.20 s
// (docs/benchmarks.md). The price, where nothing waits on the disk (the
// same snapshot into a store that discards what it is given): 0.83–0.90
// s with 2 Ps, 0.92–0.95 s with 4, the spare Ps' threads spinning for
// work. Pools of CPU-bound workers are sized by cores, not Ps, for that
// reason (files/archive's compressors: a worker a P made tar.zst 13 %
// slower).
const ProcsPerCore = 2

// TuneProcs sets GOMAXPROCS to ProcsPerCore times the runtime's default
// (the cores the process may use: its CPU affinity and cgroup quota),
// unless the operator set GOMAXPROCS in the environment (getenv), which
// wins. It returns the cores (the default) and the Ps set. kiln serve
// calls it once at start; bench/snapbench too, to measure what kiln
// serve does.
func TuneProcs(getenv func(string) string) (cores, procs int) {
	cores = runtime.GOMAXPROCS(0)
	if getenv("GOMAXPROCS") != "" {
		return cores, cores
	}
	procs = ProcsPerCore * cores
	runtime.GOMAXPROCS(procs)
	return cores, procs
}
