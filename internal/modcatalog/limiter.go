package modcatalog

import (
	"context"
	"sync"
	"time"
)

// limiter is a token bucket shared by every request to one upstream. A
// waiter reserves its token first (the count may go negative) and then
// sleeps until it is due, so waiters are served in order and none spins.
// With a burst of b and a rate of (n-b)/minute, no window of one minute
// holds more than n requests.
type limiter struct {
	mu     sync.Mutex
	rate   float64 // tokens a second
	burst  float64
	tokens float64
	last   time.Time
	now    func() time.Time
	sleep  func(context.Context, time.Duration) error
}

// newLimiter allows at most perMinute requests in any minute.
func newLimiter(perMinute int, now func() time.Time, sleep func(context.Context, time.Duration) error) *limiter {
	burst := max(1, min(20, perMinute/10))
	return &limiter{
		rate:   float64(perMinute-burst) / 60,
		burst:  float64(burst),
		tokens: float64(burst),
		last:   now(),
		now:    now,
		sleep:  sleep,
	}
}

// wait takes a token, sleeping until one is due; the context's error when
// ctx ends first (the reserved token is then lost, which errs on the safe
// side).
func (l *limiter) wait(ctx context.Context) error {
	l.mu.Lock()
	now := l.now()
	if el := now.Sub(l.last).Seconds(); el > 0 {
		l.tokens = min(l.burst, l.tokens+el*l.rate)
	}
	l.last = now
	l.tokens--
	deficit := -l.tokens
	l.mu.Unlock()
	if deficit <= 0 {
		return nil
	}
	return l.sleep(ctx, time.Duration(deficit/l.rate*float64(time.Second)))
}
