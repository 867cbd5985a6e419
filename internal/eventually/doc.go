// Package eventually is the one way Kiln's tests wait for something that
// becomes true on its own (a server running, a console line, a record's
// status): a condition asked every Poll until it holds or a deadline
// passes, then the test fails with what was waited for and the
// condition's last word. It waits for positive facts only: the absence
// of an event is never proven by waiting (use testing/synctest, an
// injected clock, or a signal that the event could no longer happen).
//
// It is test support, imported by tests only (as storetest and
// serverstest are); it never sleeps outside a wait a test asked for.
//
// What it owns: the poll interval (Poll) and the tests' common deadline
// (Within). What it must never do: be imported by non-test code, or
// stand in for a negative assertion.
package eventually
