//go:build race

package runtime

// raceFlags build the test holder with the race detector when the tests
// run with it: the holder's goroutines are checked too.
var raceFlags = []string{"-race"}
