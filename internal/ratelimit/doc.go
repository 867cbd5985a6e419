// Package ratelimit decides whether a request may pass a per-token limit and
// reports what the RateLimit-* headers need.
//
// Both implementations run the same algorithm, GCRA (the generic cell rate
// algorithm, a token bucket kept as one timestamp per key): a rule of N
// requests per period lets N through at once and then one every period/N.
// Memory keeps the timestamps in a map for a single `kiln serve` on SQLite.
// Postgres keeps them in one UNLOGGED table and decides in one SQL statement
// on the database's clock, so several replicas sharing the database share
// the limit exactly. GCRA is written here (twenty lines) rather than taken
// from golang.org/x/time/rate because the two implementations must agree to
// the microsecond and the SQL one cannot reuse a Go library.
//
// It knows nothing of HTTP or tokens: keys are opaque strings.
package ratelimit
