package ratelimit

import (
	"sync"
	"testing"
	"time"

	"github.com/kilnhq/kiln/internal/store"
	"github.com/kilnhq/kiln/internal/store/storetest"
)

func TestDecideGCRA(t *testing.T) {
	rule := Rule{Limit: 100, Period: time.Minute} // one every 600 ms
	var tat, now int64 = 0, 1_000_000_000
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
	now += 600_000
	if res, next := decide(rule, tat, now); !res.Allowed || res.Remaining != 0 {
		t.Fatalf("after one interval: %+v, want allowed with 0 remaining", res)
	} else {
		tat = next
	}
	if res, _ := decide(rule, tat, now); res.Allowed {
		t.Fatalf("second after one interval: %+v, want refused", res)
	}
	// After a full period the bucket is full again.
	now += int64(time.Minute / time.Microsecond)
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
