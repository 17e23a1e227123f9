//go:build !race

package counter_test

const raceEnabled = false
