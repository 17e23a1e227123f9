//go:build race

package global_test

// raceEnabled: the tests run under the race detector.
const raceEnabled = true
