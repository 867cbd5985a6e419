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
// the nanosecond and the SQL one cannot reuse a Go library.
//
// # Units and rounding
//
// Times (the stored "theoretical arrival time" tat, the clock, the interval)
// are int64 nanoseconds since the Unix epoch, in Go and in the rate_limits
// table alike. The interval t is Period/Limit rounded down to whole
// nanoseconds, and at least 1 ns; the burst tolerance is t*Limit rather than
// Period, so a full bucket holds exactly Limit requests whatever the
// rounding, Remaining runs from Limit-1 down to 0, and Reset never exceeds
// Period (unless t had to be raised to 1 ns, i.e. Period shorter than Limit
// nanoseconds). Rounding t down makes the sustained rate at most a fraction
// 1/t above Limit per Period, never below it, so a client that keeps to the
// advertised limit is never refused. For one-minute rules that excess is
// under 0.002% up to 1,000,000/min, under 0.1% up to 60,000,000/min, and
// about 3.5% at MaxLimit (t = 27 ns instead of 27.94). Every limit from 1 to
// MaxLimit per minute is tested.
//
// Why nanoseconds: with microseconds, as before, t truncated to 0 above
// 60,000,000 per minute and Remaining divided by it. Clamping t to 1 µs
// would have kept microseconds but silently capped every rule at 60,000,000
// per minute (a 1e9/min rule would refill about 17 times slower than it
// says and take about 17 minutes to Reset). Nanoseconds keep the PostgreSQL
// side the same single statement, with only the clock expression and the
// two parameters changed: extract(epoch FROM clock_timestamp()) is an exact
// numeric, so multiplying it by 1e9 and casting to bigint loses nothing (the
// database clock still ticks in microseconds, which only means requests in
// the same microsecond see the same "now"; each still moves tat by t), and a
// bigint holds nanoseconds until the year 2262.
//
// A rate_limits row written in microseconds by an older kiln reads as a time
// in January 1970, i.e. a full bucket, so after an upgrade each token's
// limit restarts once and Sweep deletes those rows. During a rolling upgrade
// an older replica would read a row written here as a time far in the
// future and refuse that key until it is upgraded too; the table is
// UNLOGGED and only ever forgives or delays requests, it holds no data.
//
// It knows nothing of HTTP or tokens: keys are opaque strings.
package ratelimit
