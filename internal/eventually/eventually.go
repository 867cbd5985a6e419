package eventually

import (
	"testing"
	"time"
)

// Poll is how often a condition is asked.
const Poll = 20 * time.Millisecond

// Within is the deadline the tests use unless they say otherwise:
// generous, since a loaded CI machine may be slow, and only a failing
// test waits that long.
const Within = 60 * time.Second

// True asks cond every Poll until it reports true and returns; when
// within passes first, it fails t (Fatal) saying what was awaited and
// cond's last detail (what it saw instead).
func True(t testing.TB, within time.Duration, what string, cond func() (ok bool, detail string)) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		ok, detail := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("never %s within %s: %s", what, within, detail)
		}
		time.Sleep(Poll)
	}
}

// Value is True for a condition that produces a value: it returns the
// first value cond accepts.
func Value[T any](t testing.TB, within time.Duration, what string, cond func() (v T, ok bool, detail string)) T {
	t.Helper()
	var out T
	True(t, within, what, func() (bool, string) {
		v, ok, detail := cond()
		if ok {
			out = v
		}
		return ok, detail
	})
	return out
}
