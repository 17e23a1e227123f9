//go:build !linux

package bench

// sleeper is a time.Timer here (see openloop_sleep_linux.go).
type sleeper = timerSleeper

func newSleeper() *sleeper { return newTimerSleeper() }
