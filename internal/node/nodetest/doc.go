// Package nodetest holds what the tests of a node's walls share: a
// listener that answers "hello" to every connection, and a connection
// tried as another user (the uid a game server runs as), so that the
// network rules (node.Egress) are proven the same way in every package
// that loads them.
//
// It must never be imported by anything but tests, send traffic to an
// address that is not the host's own, or leave a listener open after its
// test.
package nodetest
