package eventually

import (
	"fmt"
	"testing"
	"testing/synctest"
	"time"
)

// recorder is a testing.TB that records a Fatalf instead of ending the
// test (its goroutine ends, as Fatalf's does).
type recorder struct {
	testing.TB
	failed string
}

func (r *recorder) Helper() {}
func (r *recorder) Fatalf(format string, args ...any) {
	r.failed = fmt.Sprintf(format, args...)
	panic(r)
}

func TestTrue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := 0
		True(t, time.Minute, "three asks", func() (bool, string) { n++; return n == 3, "" })
		if n != 3 {
			t.Errorf("asked %d times, want 3", n)
		}
		got := Value(t, time.Minute, "a value", func() (int, bool, string) { return 7, true, "" })
		if got != 7 {
			t.Errorf("Value = %d, want 7", got)
		}
		r := &recorder{TB: t}
		asked := 0
		func() {
			defer func() { _ = recover() }()
			True(r, time.Second, "the server up", func() (bool, string) { asked++; return false, "still no" })
		}()
		if want := "never the server up within 1s: still no"; r.failed != want {
			t.Errorf("a condition never true: failed with %q, want %q", r.failed, want)
		}
		// Asked at once, then every Poll until the deadline has passed:
		// given up neither before it nor long after.
		if want := int(time.Second/Poll) + 2; asked != want {
			t.Errorf("a condition never true was asked %d times, want %d", asked, want)
		}
	})
}
