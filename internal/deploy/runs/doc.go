// Package runs is the durable run queue of deployments (deployment-spec.md
// §5, api.md §2): it keeps runs, their resources (the plan, and how far
// each step got) and their events, queues runs per configuration, and
// leases each started run to one kiln serve instance (internal/instance's
// inst_… id) at a time, so a run survives its process and another replica
// can take it over.
//
// It owns the runs, run_resources, run_events and run_idempotency_keys
// tables. It never plans or executes anything (the executor does, through
// Claim, Renew, SetStatus, Checkpoint, AddEvent, UpsertResources and
// Finish), never knows HTTP, never writes a configuration, and scopes
// every client-facing call (Enqueue, Get, List, Resources, Events,
// RequestCancel) to the caller's team: another team's run is ErrNotFound.
//
// An executor's use of a run, in order: Claim (the run is planning, or
// resumed as it was); plan, UpsertResources with every step pending and
// Checkpoint with the plan's hash (before executing anything); SetStatus
// executing; per step Renew (it reports a requested cancel), UpsertResources
// and AddEvent as the step starts and ends, Checkpoint with the step's key
// done; SetStatus finalizing; Finish. Any ErrLeaseLost means another
// instance has the run: stop at once, write nothing more.
//
// Decisions:
//   - Queue order is runs.seq, which only grows (SQLite: the rowid with
//     AUTOINCREMENT; PostgreSQL: an identity column), not created_at: runs
//     of one millisecond keep their order. On PostgreSQL two concurrent
//     enqueues may commit out of seq order; the later one may then start
//     first, which no client can tell apart from the other order.
//   - One run at a time per configuration. A queued run is claimable only
//     when it is the first open run of its configuration: no run of it is
//     started (planning, executing, finalizing — whatever its lease) and
//     none is queued before it. A started run whose lease expired is taken
//     over, never bypassed. The partial unique index runs_one_started
//     (configuration_id where the status is a started one) makes a second
//     started run of a configuration impossible whatever a query does;
//     Claim reads its refusal as "nothing to claim". Not an advisory lock:
//     that lasts one transaction or session, while a run holds its
//     configuration for minutes and across restarts. The run's row is the
//     durable lock, and the index enforces it on both engines.
//   - Claim order: of the claimable runs, one of the team with the fewest
//     started runs leased to the claiming owner comes first, then the
//     oldest (seq). An executor running several runs at once (its slots)
//     so gives a free slot to the team it serves least, and a team that
//     queued runs of many configurations cannot take them all while
//     another team's run waits. Counted per owner, not across replicas:
//     each process's slots are its own.
//   - Claim is one transaction: PostgreSQL selects the candidate with
//     FOR UPDATE SKIP LOCKED (replicas skip the row another is taking
//     instead of queueing behind it; the READ COMMITTED re-check of a
//     locked row drops one claimed or renewed meanwhile), then updates it;
//     SQLite's single writer serializes claims.
//   - Leases are fenced by the row, not by time: lease_owner is the
//     instance id, lease_until Unix ms from the Queue's clock (live while
//     now < lease_until). Every executor write names its owner and changes
//     nothing unless that owner still holds the non-final run
//     (ErrLeaseLost); a takeover replaces the owner in the same row, so a
//     paused former owner's writes are refused from then on. A write that
//     spans tables first updates the run's row (hold), which on PostgreSQL
//     locks it until commit, so a takeover waits for it. An expired lease
//     nobody took over is still held by its owner. Replicas' clocks must
//     agree to well within a lease (NTP).
//   - Idempotency keys live in run_idempotency_keys, primary key (team_id,
//     idempotency_key), not in a unique index on runs: "younger than 24 h"
//     cannot be an index predicate (it must be immutable; now() is not),
//     and a key unique forever would refuse a legitimate reuse after a day.
//     A row older than KeyLifetime counts as absent: the Enqueue reusing
//     the key deletes it in its own transaction, and Prune deletes the
//     rest. A replay is recognised by the insert being refused
//     (store.IsUniqueViolation), never by looking first: on PostgreSQL the
//     racing inserts wait for the first transaction and then fail, so 20
//     concurrent applies with one key make one run. The row keeps the
//     configuration: the key with another one is ErrIdempotencyKeyReused;
//     with the same configuration but a newer version it still returns the
//     original run (the key names the request, not the version).
//   - Runs reference configurations and configuration_versions (foreign
//     keys, ON DELETE CASCADE: a deleted configuration's runs, resources
//     and events go with it; the API must refuse that delete while one of
//     its runs is open). Enqueue inserts only when the version is one of the
//     team's configuration's (ErrConfigurationNotFound otherwise), and
//     reads join the version for its number, spec hash and resource count,
//     which never change. The package reads those two tables and nothing
//     else of internal/deploy's.
//   - Cancel: a queued run is canceled at once (failure class canceled,
//     run.canceled); a started one gets cancel_requested, which Renew
//     returns, and its executor finishes it as canceled after the current
//     step. Canceling a canceled run returns it unchanged; a succeeded or
//     failed one is ErrFinished.
//   - Finish clears lease_until and the stage but keeps lease_owner, which
//     then names the instance that finished the run.
//   - JSON (checkpoint, summary, resource states and log, event data) is
//     TEXT on both engines: stored as written, scanned alike; NULL when
//     there is nothing yet. An event's seq is its run's MAX + 1, taken in a
//     transaction that holds the run's row; the primary key (run_id, seq)
//     refuses a duplicate anyway.
package runs
