// Package serverroot is what an operation on a server's files is given
// and what it may be refused with: Access (the root, its disk ledger,
// Kiln's temporary names, a restore's hold) and the errors of a root that
// is missing, being installed, restored into or read whole by a snapshot.
package serverroot
