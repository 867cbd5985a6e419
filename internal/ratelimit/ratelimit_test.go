package ratelimit

import (
	"math"
	"sync"
	"testing"
	"time"

	"github.com/kilnhq/kiln/internal/store"
	"github.com/kilnhq/kiln/internal/store/storetest"
)

func TestDecideGCRA(t *testing.T) {
	rule := Rule{Limit: 100, Period: time.Minute} // one every 600 ms
	var tat, now int64 = 0, 1_000_000_000_000
	for i := range 100 {
		res, next := decide(rule, tat, now)
		if !res.Allowed || res.Remaining != 99-i {
			t.Fatalf("request %d: %+v, want allowed with %d remaining", i, res, 99-i)
		}
		tat = next
	}
	res, same := decide(rule, tat, now)
	if res.Allowed || same != tat {
		t.Fatalf("request 101: %+v (tat %d→%d), want refused and tat unchanged", res, tat, same)
	}
	if res.RetryAfter != 600*time.Millisecond || res.Reset != time.Minute {
		t.Errorf("refused: RetryAfter %v Reset %v, want 600ms and 1m", res.RetryAfter, res.Reset)
	}
	// 600 ms later exactly one more passes.
	now += int64(600 * time.Millisecond)
	if res, next := decide(rule, tat, now); !res.Allowed || res.Remaining != 0 {
		t.Fatalf("after one interval: %+v, want allowed with 0 remaining", res)
	} else {
		tat = next
	}
	if res, _ := decide(rule, tat, now); res.Allowed {
		t.Fatalf("second after one interval: %+v, want refused", res)
	}
	// After a full period the bucket is full again.
	now += int64(time.Minute)
	if res, _ := decide(rule, tat, now); !res.Allowed || res.Remaining != 99 {
		t.Fatalf("after a period: %+v, want 99 remaining", res)
	}
}

type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func TestMemoryKeysAreIndependentAndConcurrent(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	m := NewMemory(clk.now)
	rule := Rule{Limit: 50, Period: time.Minute}
	var wg sync.WaitGroup
	var mu sync.Mutex
	allowed := map[string]int{}
	for _, key := range []string{"a", "b"} {
		for range 4 {
			wg.Go(func() {
				for range 40 {
					res, _ := m.Allow(t.Context(), key, rule)
					if res.Allowed {
						mu.Lock()
						allowed[key]++
						mu.Unlock()
					}
				}
			})
		}
	}
	wg.Wait()
	if allowed["a"] != 50 || allowed["b"] != 50 {
		t.Fatalf("allowed = %v, want 50 per key", allowed)
	}
	clk.add(2 * time.Minute)
	if res, _ := m.Allow(t.Context(), "a", rule); !res.Allowed || res.Remaining != 49 {
		t.Fatalf("after two periods: %+v, want a full bucket", res)
	}
	if _, ok := m.tat["b"]; ok {
		t.Errorf("key b still stored after its quota refilled; want it swept")
	}
}

func TestPostgresSharedLimit(t *testing.T) {
	db := storetest.Postgres(t)
	if db.Dialect() != store.Postgres {
		t.Fatal("storetest.Postgres gave a non-PostgreSQL DB")
	}
	p := NewPostgres(db.Write())
	// A long period so the refill during the test stays below one request.
	rule := Rule{Limit: 20, Period: time.Hour}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var ok, refused int
	for range 8 {
		wg.Go(func() {
			for range 10 {
				res, err := p.Allow(t.Context(), "tok_x:global", rule)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				if res.Allowed {
					ok++
				} else {
					refused++
					if res.RetryAfter <= 0 || res.RetryAfter > 3*time.Minute+time.Second {
						t.Errorf("refused with RetryAfter %v, want (0, 3m]", res.RetryAfter)
					}
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if ok != 20 || refused != 60 {
		t.Fatalf("allowed %d refused %d, want 20 and 60", ok, refused)
	}
	res, err := p.Allow(t.Context(), "tok_y:global", rule)
	if err != nil || !res.Allowed || res.Remaining != 19 || res.Limit != 20 {
		t.Fatalf("fresh key: %+v, %v; want allowed with 19 remaining", res, err)
	}
	if err := p.Sweep(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// limitCases are per-minute limits across the range --rate-limit accepts,
// around the old breaking point (60,000,000/min, an interval of 1 µs).
var limitCases = []struct {
	name     string
	limit    int
	interval time.Duration // a minute/limit rounded down to whole ns
}{
	{"1", 1, time.Minute},
	{"100", 100, 600 * time.Millisecond},
	{"60_000_000", 60_000_000, time.Microsecond},
	{"60_000_001", 60_000_001, 999 * time.Nanosecond},
	{"1_000_000_000", 1_000_000_000, 60 * time.Nanosecond},
	{"MaxInt32", math.MaxInt32, 27 * time.Nanosecond},
}

// checkBounds fails unless res is a sensible answer under rule: Remaining
// from 0 to Limit-1, Reset from 0 to Period, RetryAfter only when refused.
func checkBounds(t *testing.T, step string, rule Rule, res Result) {
	t.Helper()
	if res.Limit != rule.Limit {
		t.Errorf("%s: got Limit %d, want %d", step, res.Limit, rule.Limit)
	}
	if res.Remaining < 0 || res.Remaining > rule.Limit-1 {
		t.Errorf("%s: got Remaining %d, want 0..%d", step, res.Remaining, rule.Limit-1)
	}
	if res.Reset < 0 || res.Reset > rule.Period {
		t.Errorf("%s: got Reset %v, want 0..%v", step, res.Reset, rule.Period)
	}
	if res.Allowed && res.RetryAfter != 0 || !res.Allowed && (res.RetryAfter <= 0 || res.RetryAfter > rule.Period) {
		t.Errorf("%s: got Allowed %v RetryAfter %v, want 0 when allowed and (0, %v] when refused",
			step, res.Allowed, res.RetryAfter, rule.Period)
	}
}

func TestMemoryLimits(t *testing.T) {
	for _, c := range limitCases {
		t.Run(c.name, func(t *testing.T) {
			clk := &fakeClock{t: time.Unix(1_700_000_000, 0)}
			m := NewMemory(clk.now)
			rule := Rule{Limit: c.limit, Period: time.Minute}
			if ti, tau := rule.gcra(); time.Duration(ti) != c.interval || tau != ti*int64(c.limit) {
				t.Fatalf("gcra() = %d, %d; want %d, %d", ti, tau, c.interval, int64(c.interval)*int64(c.limit))
			}
			burst := c.interval * time.Duration(c.limit) // the tolerance: a full bucket
			step := func(name string, want Result) {
				t.Helper()
				res, err := m.Allow(t.Context(), "k", rule)
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				checkBounds(t, name, rule, res)
				if res != want {
					t.Errorf("%s: got %+v, want %+v", name, res, want)
				}
			}
			allowed := func(remaining int, reset time.Duration) Result {
				return Result{Allowed: true, Limit: c.limit, Remaining: remaining, Reset: reset}
			}
			refused := func(reset, retry time.Duration) Result {
				return Result{Limit: c.limit, Reset: reset, RetryAfter: retry}
			}

			step("first", allowed(c.limit-1, c.interval))
			if c.limit == 1 {
				step("second at once", refused(c.interval, c.interval))
			} else {
				step("second at once", allowed(c.limit-2, 2*c.interval))
			}
			// Bursts of a billion requests are too long to make one by one:
			// set the bucket to one request left, as Limit-1 requests at
			// this instant would have.
			now := clk.now().UnixNano()
			m.tat["k"] = now + int64(burst-c.interval)
			step("last of the burst", allowed(0, burst))
			step("one past the burst", refused(burst, c.interval))
			// A client pacing itself at the advertised rate (a minute/limit,
			// rounded up) is let through.
			pace := (time.Minute + time.Duration(c.limit) - 1) / time.Duration(c.limit)
			clk.add(pace)
			step("after one advertised interval", allowed(0, burst+c.interval-pace))
			if pace < 2*c.interval {
				step("again at once", refused(burst+c.interval-pace, 2*c.interval-pace))
			}
			clk.add(time.Minute)
			step("after a minute", allowed(c.limit-1, c.interval))
		})
	}
}

func TestIntervalAtLeastOneNanosecond(t *testing.T) {
	// 1,000 per 100 ns: the interval would be 0.1 ns. It is 1 ns, and the
	// burst stays 1,000 requests.
	rule := Rule{Limit: 1000, Period: 100 * time.Nanosecond}
	const now = 1_700_000_000_000_000_000
	res, tat := decide(rule, 0, now)
	if !res.Allowed || res.Remaining != 999 || tat != now+1 {
		t.Fatalf("first: got %+v (tat now+%d), want allowed with 999 remaining, tat now+1", res, tat-now)
	}
	res, _ = decide(rule, now+999, now)
	if !res.Allowed || res.Remaining != 0 || res.Reset != 1000*time.Nanosecond {
		t.Fatalf("1000th: got %+v, want allowed with 0 remaining, Reset 1µs", res)
	}
	res, _ = decide(rule, now+1000, now)
	if res.Allowed || res.RetryAfter != time.Nanosecond {
		t.Fatalf("1001st: got %+v, want refused with RetryAfter 1ns", res)
	}
}

func TestPostgresLimits(t *testing.T) {
	db := storetest.Postgres(t)
	p := NewPostgres(db.Write())
	for _, c := range limitCases {
		t.Run(c.name, func(t *testing.T) {
			rule := Rule{Limit: c.limit, Period: time.Minute}
			burst := c.interval * time.Duration(c.limit)
			key := "tok_limits:" + c.name
			allow := func(step string) Result {
				t.Helper()
				res, err := p.Allow(t.Context(), key, rule)
				if err != nil {
					t.Fatalf("%s: %v", step, err)
				}
				checkBounds(t, step, rule, res)
				return res
			}

			// A new key's tat is exactly one interval ahead of the clock.
			want := Result{Allowed: true, Limit: c.limit, Remaining: c.limit - 1, Reset: c.interval}
			if res := allow("first"); res != want {
				t.Errorf("first: got %+v, want %+v", res, want)
			}
			// The database clock moves between statements: by far less than
			// an interval for 1 and 100/min, by more than one for the rest.
			res := allow("second")
			switch {
			case c.limit == 1:
				if res.Allowed {
					t.Errorf("second: got %+v, want refused", res)
				}
			case !res.Allowed || res.Remaining < c.limit-2:
				t.Errorf("second: got %+v, want allowed with %d or %d remaining", res, c.limit-2, c.limit-1)
			}

			// Fill the bucket on the database clock, as Limit requests at one
			// instant would, then ask again elapsed later.
			// A round held up for an interval or more on a loaded machine
			// (100/min: 600 ms) has refilled what it means to look at: it
			// proves nothing and is taken again.
			for round := 1; ; round++ {
				start := time.Now()
				if _, err := db.Write().ExecContext(t.Context(),
					`UPDATE rate_limits SET tat = `+nowSQL+` + $1 WHERE key = $2`, int64(burst), key); err != nil {
					t.Fatal(err)
				}
				res = allow("after filling the bucket")
				elapsed := time.Since(start)
				if c.interval > elapsed {
					// Less than one interval refilled: refused, and one request
					// may pass within an interval.
					if res.Allowed || res.Remaining != 0 || res.RetryAfter > c.interval || res.Reset < burst-elapsed {
						t.Errorf("after filling the bucket (%v later): got %+v, want refused, RetryAfter <= %v, Reset >= %v",
							elapsed, res, c.interval, burst-elapsed)
					}
				} else if c.limit >= 60_000_000 {
					// At most elapsed/interval refilled (sub-µs intervals on a
					// µs database clock).
					if maxLeft := int(elapsed / c.interval); !res.Allowed || res.Remaining > maxLeft {
						t.Errorf("after filling the bucket (%v later): got %+v, want allowed with at most %d remaining",
							elapsed, res, maxLeft)
					}
				} else if round < 5 {
					continue
				} else {
					t.Fatalf("filling the bucket and asking again took %v, more than the %v interval, 5 times", elapsed, c.interval)
				}
				break
			}
		})
	}
}

func TestPostgresSweepAndOldRows(t *testing.T) {
	db := storetest.Postgres(t)
	p := NewPostgres(db.Write())
	ctx := t.Context()
	// "short" is full again 27 ns later, "long" a minute later.
	if _, err := p.Allow(ctx, "short", Rule{Limit: math.MaxInt32, Period: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Allow(ctx, "long", Rule{Limit: 1, Period: time.Minute}); err != nil {
		t.Fatal(err)
	}
	// Rows an older kiln wrote in microseconds, a minute ahead of its clock.
	for _, key := range []string{"old-swept", "old-read"} {
		if _, err := db.Write().ExecContext(ctx,
			`INSERT INTO rate_limits (key, tat) VALUES ($1, (extract(epoch FROM clock_timestamp()) * 1000000)::bigint + 60000000)`,
			key); err != nil {
			t.Fatal(err)
		}
	}
	// An old row reads as a full bucket, not as one refused for ages.
	res, err := p.Allow(ctx, "old-read", Rule{Limit: 100, Period: time.Minute})
	if err != nil || !res.Allowed || res.Remaining != 99 || res.Reset != 600*time.Millisecond {
		t.Fatalf("key with a µs tat: got %+v, %v; want allowed with 99 remaining, Reset 600ms", res, err)
	}
	if err := p.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		key  string
		kept bool
	}{
		{"short", false},
		{"long", true},
		{"old-swept", false},
		{"old-read", true}, // rewritten in ns, 600 ms ahead
	} {
		var n int
		if err := db.Write().QueryRowContext(ctx, `SELECT count(*) FROM rate_limits WHERE key = $1`, c.key).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if got := n == 1; got != c.kept {
			t.Errorf("after Sweep: key %s kept = %v, want %v", c.key, got, c.kept)
		}
	}
}

// testUndo: a request given back (Undo) is as if it had not been made,
// on both limiters; Spent (memory) says so without recording.
func testUndo(t *testing.T, l Limiter) {
	t.Helper()
	rule := Rule{Limit: 3, Period: time.Hour}
	for i := range 3 {
		if res, err := l.Allow(t.Context(), "undo", rule); err != nil || !res.Allowed {
			t.Fatalf("request %d: %+v, %v", i+1, res, err)
		}
	}
	if res, _ := l.Allow(t.Context(), "undo", rule); res.Allowed {
		t.Fatal("a fourth request of 3 passed")
	}
	if err := l.Undo(t.Context(), "undo", rule); err != nil {
		t.Fatal(err)
	}
	res, err := l.Allow(t.Context(), "undo", rule)
	if err != nil || !res.Allowed || res.Remaining != 0 {
		t.Errorf("after an undo: %+v, %v; want allowed, none remaining", res, err)
	}
	if err := l.Undo(t.Context(), "never-seen", rule); err != nil {
		t.Errorf("undo of an unknown key: %v", err)
	}
}

func TestUndoMemory(t *testing.T) {
	m := NewMemory(time.Now)
	testUndo(t, m)
	rule := Rule{Limit: 3, Period: time.Hour}
	if !m.Spent("undo", rule) || m.Spent("other", rule) {
		t.Error("Spent does not tell a spent key from a fresh one")
	}
	if m.Spent("other", rule) {
		t.Error("Spent recorded a request")
	}
}

func TestUndoPostgres(t *testing.T) {
	db := storetest.Postgres(t)
	testUndo(t, NewPostgres(db.Write()))
}
