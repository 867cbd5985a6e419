package ratelimit

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"time"
)

// Rule is a limit of Limit requests per Period.
type Rule struct {
	Limit  int
	Period time.Duration
}

func (r Rule) interval() time.Duration { return r.Period / time.Duration(r.Limit) }

// Result is the decision for one request.
type Result struct {
	Allowed    bool
	Limit      int
	Remaining  int
	Reset      time.Duration // until the full quota is available again
	RetryAfter time.Duration // when refused: until one request may pass
}

// Limiter decides and records one request against key under rule.
type Limiter interface {
	Allow(ctx context.Context, key string, rule Rule) (Result, error)
}

// decide is GCRA: tat is the theoretical arrival time stored for the key (0
// when none), now the current time, both in microseconds. It returns the
// result and the tat to store when allowed.
func decide(rule Rule, tat, now int64) (Result, int64) {
	t := rule.interval().Microseconds()
	period := rule.Period.Microseconds()
	newTat := max(tat, now) + t
	if newTat-now > period {
		return Result{
			Limit:      rule.Limit,
			Reset:      time.Duration(tat-now) * time.Microsecond,
			RetryAfter: time.Duration(newTat-now-period) * time.Microsecond,
		}, tat
	}
	return Result{
		Allowed:   true,
		Limit:     rule.Limit,
		Remaining: int((period - (newTat - now)) / t),
		Reset:     time.Duration(newTat-now) * time.Microsecond,
	}, newTat
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
	now := m.now().UnixMicro()
	m.mu.Lock()
	defer m.mu.Unlock()
	res, tat := decide(rule, m.tat[key], now)
	m.tat[key] = tat
	// Forget keys whose quota is full again, at most once a minute, so the
	// map stays as small as the set of recently active tokens.
	if now-m.lastSweep > int64(time.Minute/time.Microsecond) {
		m.lastSweep = now
		for k, v := range m.tat {
			if v < now {
				delete(m.tat, k)
			}
		}
	}
	return res, nil
}

// Postgres is a Limiter shared by every process using one PostgreSQL
// database (table rate_limits).
type Postgres struct {
	db *sql.DB
}

// NewPostgres returns a limiter on db, which must be a PostgreSQL pool.
func NewPostgres(db *sql.DB) *Postgres { return &Postgres{db: db} }

// allowSQL updates the key's tat in one statement when the request passes
// and returns the database clock, the new tat (NULL when refused) and the
// tat before the statement (NULL for a new key). FOR UPDATE makes "old" the
// latest committed tat rather than the statement snapshot's, so a refusal's
// Retry-After is computed from the value the refusal was based on.
const allowSQL = `
WITH c AS (SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint AS now),
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
	var now int64
	var newTat, oldTat sql.NullInt64
	err := p.db.QueryRowContext(ctx, allowSQL, key, rule.interval().Microseconds(), rule.Period.Microseconds()).
		Scan(&now, &newTat, &oldTat)
	if err != nil {
		return Result{}, fmt.Errorf("rate limit %s: %w", key, err)
	}
	if newTat.Valid {
		left := newTat.Int64 - now
		return Result{
			Allowed:   true,
			Limit:     rule.Limit,
			Remaining: int((rule.Period.Microseconds() - left) / rule.interval().Microseconds()),
			Reset:     time.Duration(left) * time.Microsecond,
		}, nil
	}
	res, _ := decide(rule, oldTat.Int64, now)
	if res.Allowed {
		// Only when two first requests for a new key race: "old" saw no row
		// but the insert met the other's. Wait one interval.
		res = Result{Limit: rule.Limit, RetryAfter: rule.interval(), Reset: rule.Period}
	}
	return res, nil
}

// Sweep deletes keys whose quota is full again; run it now and then.
func (p *Postgres) Sweep(ctx context.Context) error {
	_, err := p.db.ExecContext(ctx,
		`DELETE FROM rate_limits WHERE tat < (extract(epoch FROM clock_timestamp()) * 1000000)::bigint`)
	if err != nil {
		return fmt.Errorf("sweep rate limits: %w", err)
	}
	return nil
}
