package ratelimit

import (
	"context"
	"database/sql"
	"fmt"
	"math"
	"sync"
	"time"
)

// MaxLimit is the largest Rule.Limit the package is tested with: at one
// minute per period it keeps the emission interval at 27 ns or more (see
// doc.go for what that means for accuracy).
const MaxLimit = math.MaxInt32

// Rule is a limit of Limit requests per Period. Limit must be from 1 to
// MaxLimit and Period positive (and under about 200 years, so that a tat in
// nanoseconds fits an int64); callers validate both.
type Rule struct {
	Limit  int
	Period time.Duration
}

// gcra returns the rule's emission interval t, Period/Limit rounded down to
// whole nanoseconds but at least 1 ns, and the burst tolerance tau = t*Limit,
// both in nanoseconds. Taking tau from t rather than from Period keeps the
// burst exactly Limit requests whatever the rounding; it is at most Period
// (or Limit ns when t had to be raised to 1 ns), so it cannot overflow.
func (r Rule) gcra() (t, tau int64) {
	t = max(1, int64(r.Period)/int64(r.Limit))
	return t, t * int64(r.Limit)
}

// Result is the decision for one request.
type Result struct {
	Allowed    bool
	Limit      int
	Remaining  int
	Reset      time.Duration // until the full quota is available again
	RetryAfter time.Duration // when refused: until one request may pass
}

// Limiter decides and records one request against key under rule, and
// gives back a request it allowed that another rule then refused (Undo:
// a refused request spends nothing).
type Limiter interface {
	Allow(ctx context.Context, key string, rule Rule) (Result, error)
	Undo(ctx context.Context, key string, rule Rule) error
}

// decide is GCRA: tat is the theoretical arrival time stored for the key (0
// when none), now the current time, both in nanoseconds since the Unix
// epoch. It returns the result and the tat to store when allowed.
func decide(rule Rule, tat, now int64) (Result, int64) {
	t, tau := rule.gcra()
	newTat := max(tat, now) + t
	if newTat-now > tau {
		return Result{
			Limit:      rule.Limit,
			Reset:      time.Duration(tat - now),
			RetryAfter: time.Duration(newTat - now - tau),
		}, tat
	}
	return allowed(rule, newTat-now), newTat
}

// allowed is the result of a request that passed and left the key's tat
// left nanoseconds ahead of now (t <= left <= tau), so Remaining is from 0
// to Limit-1.
func allowed(rule Rule, left int64) Result {
	t, tau := rule.gcra()
	return Result{
		Allowed:   true,
		Limit:     rule.Limit,
		Remaining: int((tau - left) / t),
		Reset:     time.Duration(left),
	}
}

// Memory is an in-process Limiter. The zero value is not usable; use NewMemory.
type Memory struct {
	now func() time.Time

	mu        sync.Mutex
	tat       map[string]int64
	lastSweep int64
}

// NewMemory returns an in-process limiter; now is the clock (time.Now in
// production, a fake in tests).
func NewMemory(now func() time.Time) *Memory {
	return &Memory{now: now, tat: make(map[string]int64)}
}

// Allow implements Limiter.
func (m *Memory) Allow(_ context.Context, key string, rule Rule) (Result, error) {
	now := m.now().UnixNano()
	m.mu.Lock()
	defer m.mu.Unlock()
	res, tat := decide(rule, m.tat[key], now)
	m.tat[key] = tat
	// Forget keys whose quota is full again, at most once a minute, so the
	// map stays as small as the set of recently active tokens.
	if now-m.lastSweep > int64(time.Minute) {
		m.lastSweep = now
		for k, v := range m.tat {
			if v < now {
				delete(m.tat, k)
			}
		}
	}
	return res, nil
}

// Undo implements Limiter: the key's tat moves back one interval.
func (m *Memory) Undo(_ context.Context, key string, rule Rule) error {
	t, _ := rule.gcra()
	m.mu.Lock()
	defer m.mu.Unlock()
	if tat, ok := m.tat[key]; ok {
		m.tat[key] = tat - t
	}
	return nil
}

// Spent reports whether a request against key under rule would be
// refused now, recording nothing: a check before work that only a
// failure counts against (Allow records the failure).
func (m *Memory) Spent(key string, rule Rule) bool {
	now := m.now().UnixNano()
	m.mu.Lock()
	defer m.mu.Unlock()
	res, _ := decide(rule, m.tat[key], now)
	return !res.Allowed
}

// Postgres is a Limiter shared by every process using one PostgreSQL
// database (table rate_limits).
type Postgres struct {
	db *sql.DB
}

// NewPostgres returns a limiter on db, which must be a PostgreSQL pool.
func NewPostgres(db *sql.DB) *Postgres { return &Postgres{db: db} }

// nowSQL is the database clock in nanoseconds since the Unix epoch (its
// resolution is 1 µs; extract returns an exact numeric, so the product is
// exact).
const nowSQL = `(extract(epoch FROM clock_timestamp()) * 1000000000)::bigint`

// allowSQL updates the key's tat in one statement when the request passes
// and returns the database clock, the new tat (NULL when refused) and the
// tat before the statement (NULL for a new key), all in nanoseconds; $2 is
// the interval t and $3 the tolerance tau. FOR UPDATE makes "old" the
// latest committed tat rather than the statement snapshot's, so a refusal's
// Retry-After is computed from the value the refusal was based on.
const allowSQL = `
WITH c AS (SELECT ` + nowSQL + ` AS now),
old AS (SELECT tat FROM rate_limits WHERE key = $1 FOR UPDATE),
up AS (
  INSERT INTO rate_limits AS r (key, tat)
  SELECT $1, c.now + $2 FROM c
  ON CONFLICT (key) DO UPDATE
    SET tat = GREATEST(r.tat, (SELECT now FROM c)) + $2
    WHERE GREATEST(r.tat, (SELECT now FROM c)) + $2 - (SELECT now FROM c) <= $3
  RETURNING r.tat
)
SELECT c.now, (SELECT tat FROM up), (SELECT tat FROM old) FROM c`

// Allow implements Limiter.
func (p *Postgres) Allow(ctx context.Context, key string, rule Rule) (Result, error) {
	t, tau := rule.gcra()
	var now int64
	var newTat, oldTat sql.NullInt64
	err := p.db.QueryRowContext(ctx, allowSQL, key, t, tau).Scan(&now, &newTat, &oldTat)
	if err != nil {
		return Result{}, fmt.Errorf("rate limit %s: %w", key, err)
	}
	if newTat.Valid {
		return allowed(rule, newTat.Int64-now), nil
	}
	res, _ := decide(rule, oldTat.Int64, now)
	if res.Allowed {
		// Only when two first requests for a new key race: "old" saw no row
		// but the insert met the other's. Wait one interval.
		res = Result{Limit: rule.Limit, RetryAfter: time.Duration(t), Reset: time.Duration(tau)}
	}
	return res, nil
}

// Undo implements Limiter: the key's tat moves back one interval.
func (p *Postgres) Undo(ctx context.Context, key string, rule Rule) error {
	t, _ := rule.gcra()
	if _, err := p.db.ExecContext(ctx, `UPDATE rate_limits SET tat = tat - $1 WHERE key = $2`, t, key); err != nil {
		return fmt.Errorf("rate limit %s: undo: %w", key, err)
	}
	return nil
}

// Sweep deletes keys whose quota is full again; run it now and then.
func (p *Postgres) Sweep(ctx context.Context) error {
	_, err := p.db.ExecContext(ctx, `DELETE FROM rate_limits WHERE tat < `+nowSQL)
	if err != nil {
		return fmt.Errorf("sweep rate limits: %w", err)
	}
	return nil
}
