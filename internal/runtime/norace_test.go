//go:build !race

package runtime

// raceFlags: none without the race detector (race_test.go).
var raceFlags []string
