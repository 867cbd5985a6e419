// Package instance says which kiln serve process is which: it owns the
// data directory's lock and the instances table.
//
// One data directory belongs to one kiln serve at a time: LockDir takes an
// exclusive flock on <data-dir>/kiln.lock at start (with PostgreSQL too:
// the data directory still holds the server roots, and two processes
// supervising the same roots would start every server twice). A second
// process is refused at once, naming the holder's pid, which the holder
// writes into the file. kiln admin does not lock: it only touches the
// database, which is safe to share.
//
// Every start of kiln serve gets an instance id (inst_…, Register) and a
// row in the instances table: node, hostname, pid, started_at and seen_at,
// which a heartbeat (Run) refreshes every 10 s while the process serves.
// The id is what work held by a process is tagged with: the deployments
// run queue claims a run with a lease (owner instance id + lease_until),
// and with PostgreSQL, where several replicas share one database,
// recovery must adopt only what its own node owns and may take over a
// lease only once its owner has stopped beating. kiln serve passes the
// Instance value down to what it builds; there is no global "current
// instance".
//
// Decisions:
//   - The id is new at every start, never reused: a restarted process does
//     not own its predecessor's leases by accident; it takes them over by
//     the same rules as any other instance.
//   - A clean stop deletes its row (Close, last, after everything the
//     process owns has stopped): an absent owner is a gone owner. A killed
//     process leaves its row; its seen_at goes stale, and the next start
//     of any instance deletes rows unseen for a day.
//   - A heartbeat is an upsert, so a process paused long enough for its row
//     to be deleted is listed again at its next beat. A failed beat is
//     logged, not fatal: the database being away for a moment must not
//     stop game servers.
//
// What it must never do: wait for a lock (a refused start says so at
// once), hold the lock through a descriptor a child process inherits, or
// hold domain logic about what an instance owns (the owners of runs and
// servers decide that with the id).
package instance
