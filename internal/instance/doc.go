// Package instance says which kiln serve process is which.
//
// One data directory belongs to one kiln serve at a time: LockDir takes an
// exclusive flock on <data-dir>/kiln.lock at start (with PostgreSQL too:
// the data directory still holds the server roots, and two processes
// supervising the same roots would start every server twice). A second
// process is refused at once, naming the holder's pid, which the holder
// writes into the file. kiln admin does not lock: it only touches the
// database, which is safe to share.
//
// What it must never do: wait for a lock (a refused start says so at
// once), or hold the lock through a descriptor a child process inherits.
package instance
