// Package counter implements the rate algorithms of poplimit (sliding window
// counter, fixed window, token bucket) over a small Store interface, with a
// memcached-backed Store (gomemcache, usually pointed at mcproxy) and an
// in-process one, plus allocation-free local variants of each algorithm.
//
// Time is always a parameter: the core methods take now and never read the
// clock. A denial is a Result with Allowed false, never an error; an error
// means the store could not be consulted.
//
// counter imports no other package of poplimit.
package counter

import (
	"context"
	"time"
)

// Algorithm names a rate algorithm.
type Algorithm int

const (
	// SlidingWindow is Cloudflare's sliding window counter:
	// estimate = prev × (1 − elapsed/window) + curr.
	SlidingWindow Algorithm = iota
	// FixedWindow counts exactly per window aligned on multiples of Window.
	FixedWindow
	// TokenBucket refills Quantity tokens per Window up to Burst.
	TokenBucket
)

// OnReject says what a rejected request does to the count.
type OnReject int

const (
	// Count: rejected requests consume quota too, so an abusive client keeps
	// itself blocked (Cloudflare's behaviour).
	Count OnReject = iota
	// Refund: rejected requests consume nothing.
	Refund
)

// Limit describes one rate limit. The zero value is not valid: Quantity and
// Window must be positive.
type Limit struct {
	// Name labels the limit in answers and headers, e.g. "burst" or "hourly".
	Name string
	// Algorithm picks the rate algorithm; default SlidingWindow.
	Algorithm Algorithm
	// Quantity is the number of units allowed per Window (for TokenBucket,
	// the refill per Window).
	Quantity int64
	// Window is the period of the limit; any length from 1 ms up.
	Window time.Duration
	// Burst is the TokenBucket capacity; 0 means Quantity. Ignored by the
	// window algorithms.
	Burst int64
	// OnReject chooses Count (default) or Refund.
	OnReject OnReject
	// Precision is the number of sub-windows of a SlidingWindow; 0 or 1 is
	// the two-counter form.
	Precision int
}

// Result is the answer for one limit at one instant. Every duration is
// measured from the now passed in.
type Result struct {
	// Allowed reports whether the n units were admitted.
	Allowed bool
	// Limit is the limit's allowance per window (the bucket's burst for
	// TokenBucket).
	Limit int64
	// Remaining is how many more units would be admitted right now (≥ 0).
	Remaining int64
	// Reset is how long until the full allowance is available again.
	Reset time.Duration
	// RetryAfter is how long a lone client must wait before the same request
	// is admitted; zero when Allowed.
	RetryAfter time.Duration
}

// Allower is what callers (the pop package, the benchmark) use: one limit
// applied to any number of keys. Implementations are safe for concurrent
// use.
type Allower interface {
	// AllowN decides whether n ≥ 1 units may pass for key at now. key is an
	// identity key built by Key; the algorithm derives its store keys from it.
	AllowN(ctx context.Context, key string, now time.Time, n int64) (Result, error)
	// Undo returns n units that AllowN admitted for key at now, so a request
	// rejected by another limit of a compound rule leaves no phantom count.
	Undo(ctx context.Context, key string, now time.Time, n int64) error
	// Limit returns the limit enforced.
	Limit() Limit
}
