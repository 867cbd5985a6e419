// Package enginetest holds the fixtures the snapshot engine's tests and
// the restore package's tests share: a file blob store in a temporary
// directory, trees built under a host directory (every kind of entry a
// snapshot records: Fixture), their state as text to compare, manifests
// and chunks written directly (hostile ones included), and Create that
// fails the test on an error. It imports the engine but never
// internal/snapshot/restore: the restore package's own tests import it.
//
// What it must never do: be imported by non-test code, or check anything
// itself — the tests say what is expected.
package enginetest
