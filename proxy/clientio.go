package proxy

// The client connection's hot path, tuned for syscalls and goroutine
// wakeups per request (see server.go for the loops):
//
//   - the writer goroutine sleeps on clientConn.wake, not on the entries
//     channel: Call.Finish wakes it, and queue wakes it only for an entry
//     that is ready now (answered locally, or a call already finished), so
//     a request answered by a backend costs one writer wakeup, not two.

// queue hands e to the writer in order; it blocks while the client's
// pipeline is full. Every entry must reach the writer through queue.
func (cc *clientConn) queue(e *entry) {
	var calls [4]*Call
	n := copy(calls[:], e.calls)
	many := len(e.calls) > len(calls)
	cc.entries <- e
	// e may be answered and reused from here on; the copied Calls may
	// be reused too, which only makes the check below signal spuriously
	// or not at all for an entry the writer already answered.
	if n == 0 || many {
		cc.signal()
		return
	}
	// A call that finished before e was queued may have woken the
	// writer while it found nothing to answer: wake it again.
	for _, c := range calls[:n] {
		if c.finished.Load() {
			cc.signal()
			return
		}
	}
}

// signal wakes the writer if it sleeps (and otherwise leaves a token).
func (cc *clientConn) signal() {
	select {
	case cc.wake <- struct{}{}:
	default:
	}
}
