package node

import (
	"runtime"
	"testing"
)

// TestTuneProcs: GOMAXPROCS becomes ProcsPerCore times the default, unless
// the environment sets it, which is left alone.
func TestTuneProcs(t *testing.T) {
	before := runtime.GOMAXPROCS(0)
	t.Cleanup(func() { runtime.GOMAXPROCS(before) })
	cores, procs := TuneProcs(func(string) string { return "" })
	if cores != before || procs != ProcsPerCore*before || runtime.GOMAXPROCS(0) != procs {
		t.Errorf("TuneProcs = %d, %d (GOMAXPROCS now %d), want %d, %d", cores, procs, runtime.GOMAXPROCS(0), before, ProcsPerCore*before)
	}
	runtime.GOMAXPROCS(before)
	env := func(k string) string {
		if k == "GOMAXPROCS" {
			return "3"
		}
		return ""
	}
	if cores, procs := TuneProcs(env); cores != before || procs != before || runtime.GOMAXPROCS(0) != before {
		t.Errorf("with GOMAXPROCS set: TuneProcs = %d, %d (GOMAXPROCS now %d), want %d unchanged", cores, procs, runtime.GOMAXPROCS(0), before)
	}
}
