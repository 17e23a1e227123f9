package proxy

import (
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Accept errors that are the machine's state, not the listener's: the
// accept loop backs off and tries again (as net/http does), serving the
// connections it has meanwhile.
const (
	acceptBackoffMin = 5 * time.Millisecond
	acceptBackoffMax = time.Second
	acceptLogEvery   = time.Second
)

// acceptReasons label mcproxy_accept_errors_total; the index is
// acceptReason's result.
var acceptReasons = [...]string{"emfile", "enfile", "enobufs", "enomem", "timeout", "other_temporary"}

// acceptReason classifies a failed Accept: the reason index and true when
// the error is temporary (back off and retry), false when the listener is
// broken.
func acceptReason(err error) (int, bool) {
	switch {
	case errors.Is(err, syscall.EMFILE):
		return 0, true
	case errors.Is(err, syscall.ENFILE):
		return 1, true
	case errors.Is(err, syscall.ENOBUFS):
		return 2, true
	case errors.Is(err, syscall.ENOMEM):
		return 3, true
	}
	var ne net.Error
	if errors.As(err, &ne) {
		if ne.Timeout() {
			return 4, true
		}
		if t, ok := ne.(interface{ Temporary() bool }); ok && t.Temporary() {
			return 5, true
		}
	}
	return 0, false
}

// acceptStats counts temporary accept failures by reason and rate-limits
// their log lines.
type acceptStats struct {
	errs [len(acceptReasons)]atomic.Uint64

	mu         sync.Mutex
	lastLog    time.Time
	suppressed int
}

// acceptFailed records a temporary failure and reports whether to log it
// now (at most once per acceptLogEvery) and how many went unlogged since
// the last line.
func (a *acceptStats) acceptFailed(reason int, now time.Time) (log bool, suppressed int) {
	a.errs[reason].Add(1)
	a.mu.Lock()
	defer a.mu.Unlock()
	if now.Sub(a.lastLog) < acceptLogEvery {
		a.suppressed++
		return false, 0
	}
	a.lastLog = now
	suppressed, a.suppressed = a.suppressed, 0
	return true, suppressed
}

// acceptErrors returns the temporary accept failures by reason (see
// acceptReasons).
func (a *acceptStats) acceptErrors() [len(acceptReasons)]uint64 {
	var out [len(acceptReasons)]uint64
	for i := range a.errs {
		out[i] = a.errs[i].Load()
	}
	return out
}

// nextAcceptBackoff doubles the wait after a temporary accept failure,
// from acceptBackoffMin to acceptBackoffMax.
func nextAcceptBackoff(d time.Duration) time.Duration {
	return min(max(2*d, acceptBackoffMin), acceptBackoffMax)
}
