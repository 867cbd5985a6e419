// Package runtime starts, watches and stops the processes of game servers.
// It defines the Runtime interface that a node uses and the process runtime
// (the default): the profile's command as a child process group in the
// server's root, console on stdin/stdout, stats from /proc. The docker
// runtime (subpackage docker) satisfies the same interface with a container
// per server.
//
// What it never does: decide policy. Whether to restart a crashed server,
// what "running" means (a status ping answered) and what state to store are
// the servers package's business; a runtime only reports exits and output.
//
// Decisions for the process runtime:
//   - Children run in their own process group with SIGKILL as the parent
//     death signal, so a `kill -9` of kiln serve takes its game servers with
//     it instead of leaving them orphaned; the pid and its start time (field
//     22 of /proc/<pid>/stat) are kept by the caller so that the next start
//     can recognise and kill a survivor (pid reuse makes the pid alone
//     unsafe) before starting the server again. A process runtime cannot
//     re-attach to a console it no longer holds, so Adopt kills and reports
//     ErrNotAdoptable; the caller restarts.
//   - Console output lines are capped at 8 KiB (longer lines are split) so
//     a runaway server cannot make Kiln buffer without bound.
package runtime
