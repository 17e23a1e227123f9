package counter

import (
	"fmt"
	"time"
)

// Remote is the arithmetic of one Limit for a store that runs the algorithm
// itself, atomically on the key's owner (counter/redis runs it in a Lua
// script): the store keys, the parameters the script needs, and the Result
// built from what the script saw, with exactly the arithmetic of Limiter
// and NewLocal, so every store answers the same.
type Remote struct {
	l      Limit
	suffix string
	win    window
	g      gcra
	ttl    time.Duration
}

// NewRemote validates l and returns its arithmetic.
func NewRemote(l Limit) (Remote, error) {
	if err := l.Validate(); err != nil {
		return Remote{}, err
	}
	if l.Calendar.Unit != NoCalendar {
		// The store derives window ids from now and a fixed length.
		return Remote{}, fmt.Errorf("%w: calendar windows need a store that counts through Limiter (not a remote script)", errBadCalendar)
	}
	r := Remote{l: l, suffix: limitSuffix(l)}
	if l.Algorithm != TokenBucket {
		var err error
		if r.win, err = windowOf(l); err != nil {
			return Remote{}, err
		}
	}
	switch l.Algorithm {
	case TokenBucket:
		r.g = newGCRA(l)
	case FixedWindow:
		r.ttl = l.Window + time.Second
	default:
		r.ttl = l.Window + time.Duration(r.win.sub)*time.Millisecond + time.Second
	}
	return r, nil
}

// Limit returns the limit.
func (r Remote) Limit() Limit { return r.l }

// Suffix is what follows the identity in every store key of the limit: the
// whole suffix of the token bucket's one item; for the window algorithms
// the part before the base-36 sub-window id (see Key).
func (r Remote) Suffix() string { return r.suffix }

// Window returns the sub-window length in ms, the number of sub-windows per
// window (0 for a fixed window), and the TTL of a window item (as Limiter
// sets it).
func (r Remote) Window() (subMs int64, n int, ttl time.Duration) {
	return r.win.sub, r.win.n, r.ttl
}

// Bucket returns the token bucket's emission interval and tolerance
// (burst × interval) in ns, and its burst.
func (r Remote) Bucket() (t, tau, burst int64) { return r.g.t, r.g.tau, r.g.burst }

// CheckKey reports whether identity is a key Key could have built (the
// error wraps ErrBadKey).
func CheckKey(identity string) error { return checkIdentity(identity) }

// WindowResult is the answer of a window limit at now for a request of n
// units, from counts: the closed sub-windows, oldest first, then the
// current one, as the store holds them after the decision (the request
// included when it was counted).
func (r Remote) WindowResult(counts []int64, now time.Time, n int64, allowed bool) (Result, error) {
	if len(counts) != r.win.n+1 {
		return Result{}, fmt.Errorf("%w: %d window counts, want %d", ErrCorrupt, len(counts), r.win.n+1)
	}
	nowNs := now.UnixNano()
	ms := floorDiv(nowNs, 1e6)
	id := floorDiv(ms, r.win.sub)
	return r.win.result(counts, id, ms-id*r.win.sub, nowNs, n, allowed, -1), nil
}

// BucketResult is the answer of a token bucket at now for a request of n
// units, from the theoretical arrival time tat (unix ns) after the
// decision.
func (r Remote) BucketResult(tat int64, now time.Time, n int64, allowed bool) Result {
	return r.g.result(tat, now.UnixNano(), n, allowed)
}
