//go:build !linux

package bench

import "time"

// sleeper waits until a request's intended send time (a time.Timer here;
// see openloop_sleep_linux.go for why Linux uses a timerfd).
type sleeper struct{ t *time.Timer }

func newSleeper() *sleeper {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return &sleeper{t}
}

// sleep waits d (> 0), or until done is closed.
func (s *sleeper) sleep(d time.Duration, done <-chan struct{}) {
	s.t.Reset(d)
	select {
	case <-s.t.C:
	case <-done:
		s.t.Stop()
	}
}

func (s *sleeper) close() { s.t.Stop() }
