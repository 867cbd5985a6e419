// Package netguardtest helps tests prove that an outbound connection was
// refused before it was made: a Recorder listens on a loopback address and
// can show that nothing connected to it (shared by the tests of netguard,
// pull and the API's SSRF cases, which each had their own).
//
// It owns nothing but its listeners. It is for tests only: it must never
// be imported by non-test code, and it only ever listens on loopback
// addresses (127.0.0.0/8, ::1) — tests send no traffic anywhere else.
package netguardtest
