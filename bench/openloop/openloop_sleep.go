package openloop

import "time"

// timerSleeper waits on a time.Timer: the sleeper where no timerfd is
// (see openloop_sleep_linux.go for why Linux prefers one).
type timerSleeper struct{ t *time.Timer }

func newTimerSleeper() *timerSleeper {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return &timerSleeper{t}
}

// sleep waits d (> 0), or until done is closed.
func (s *timerSleeper) sleep(d time.Duration, done <-chan struct{}) {
	s.t.Reset(d)
	select {
	case <-s.t.C:
	case <-done:
		s.t.Stop()
	}
}

func (s *timerSleeper) close() { s.t.Stop() }
