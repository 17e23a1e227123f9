// Package counter implements the rate algorithms of poplimit (sliding window
// counter with optional sub-window precision, fixed window, token bucket as
// GCRA) over a small Store interface, with an in-process Store
// (package counter/memstore), plus allocation-free in-process variants of each
// algorithm (NewLocal).
//
// Time is always a parameter: the core methods take now and never read the
// clock. A denial is a Result with Allowed false, never an error; an error
// means the store could not be consulted. Results are true answers: a lone
// client that waits RetryAfter is admitted; for the sliding window
// RetryAfter is the first millisecond at which the estimate plus the
// request falls back to the limit, not the window end. A request costing
// more than the allowance gets RetryAfter == Never and is not counted.
//
// Stores: the memcached clients live in counter/memcached (PipeStore,
// recommended: it pipelines, so every window-algorithm decision is one
// round trip; Store over gomemcache: a window a worker has not counted in
// costs a multi-get plus an add); counter/memstore is the in-process one. See
// Limiter for the costs; counter/counting measures them. The token bucket
// costs gets + cas.
//
// Keys: Key builds identity keys (scheme documented there); every store key
// of an identity shares its hash tag, so it lives on one shard, and has a
// TTL of about twice its window.
//
// Compound rules: AllowAll (all limits must admit; Refund limits leave no
// phantom counts).
//
// counter imports no other package of poplimit.
package counter

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"time"
)

// Sentinel errors. Configuration errors are returned by New and NewLocal
// wrapped with details; test them with errors.Is.
var (
	// ErrBadLimit: Quantity or Window is not positive, Burst is negative, or
	// Algorithm/OnReject is unknown.
	ErrBadLimit = errors.New("counter: invalid limit")
	// ErrBadPrecision: Precision is negative, above 1024, or the
	// window is not a whole number of milliseconds divisible into Precision
	// sub-windows of whole milliseconds.
	ErrBadPrecision = errors.New("counter: invalid precision")
	// ErrBadCost: AllowN or Undo was called with n < 1.
	ErrBadCost = errors.New("counter: cost must be at least 1")
	// ErrContention: the token bucket lost its compare-and-swap race more
	// times than its retry budget allows. Nothing was admitted or counted;
	// the caller may retry.
	ErrContention = errors.New("counter: too much contention on key")
	// ErrCorrupt: a stored value is not what the algorithm wrote (not a
	// decimal number).
	ErrCorrupt = errors.New("counter: corrupt stored value")
)

// Never is the RetryAfter of a request that can never be admitted because
// its cost exceeds the limit's allowance (n > Quantity, or n > Burst for a
// token bucket). Such a request is not counted.
const Never = time.Duration(math.MaxInt64)

// maxPrecision is the largest SlidingWindow Precision accepted.
const maxPrecision = 1024

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
	// CountFirst is Count, except that a sliding window or token bucket
	// already over its limit (only a charged rejection puts it there; an
	// admission never does) does not charge further rejections until it is
	// back under. The counts a rejection's RetryAfter was computed on then
	// stand however many rejections, from however many workers, follow it:
	// every worker's RetryAfter for the same burst is the same instant, and
	// it is true. A fixed window charges as Count (its RetryAfter is the
	// window's end whatever the count).
	CountFirst
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
	// OnReject chooses Count (default), Refund or CountFirst.
	OnReject OnReject
	// Precision is the number of sub-windows of a SlidingWindow; 0 or 1 is
	// the two-counter form. The estimate is the sum of the Precision most
	// recent sub-windows (the current one included) plus the part of the
	// oldest one still inside the window, weighted by its overlap. Window
	// must then be a whole number of milliseconds divisible by Precision.
	// Ignored by FixedWindow and TokenBucket.
	Precision int
	// Calendar, when its Unit is set, aligns a FixedWindow on the civil
	// calendar (calendar.go): day, week, month or year windows in a time
	// zone, of varying length. Window must then be zero.
	Calendar Calendar
}

// precision returns the number of sub-windows (≥ 1).
func (l Limit) precision() int {
	if l.Precision <= 1 {
		return 1
	}
	return l.Precision
}

// burst returns the token bucket capacity.
func (l Limit) burst() int64 {
	if l.Burst > 0 {
		return l.Burst
	}
	return l.Quantity
}

// Validate reports whether the limit can be enforced; the error wraps
// ErrBadLimit or ErrBadPrecision.
func (l Limit) Validate() error {
	if l.Calendar.Unit != NoCalendar {
		return l.validateCalendar()
	}
	switch {
	case l.Quantity <= 0:
		return fmt.Errorf("%w: quantity %d must be positive", ErrBadLimit, l.Quantity)
	case l.Window < time.Millisecond:
		return fmt.Errorf("%w: window %v must be at least 1ms", ErrBadLimit, l.Window)
	case l.Burst < 0:
		return fmt.Errorf("%w: burst %d is negative", ErrBadLimit, l.Burst)
	case l.Algorithm < SlidingWindow || l.Algorithm > TokenBucket:
		return fmt.Errorf("%w: unknown algorithm %d", ErrBadLimit, l.Algorithm)
	case l.OnReject < Count || l.OnReject > CountFirst:
		return fmt.Errorf("%w: unknown OnReject %d", ErrBadLimit, l.OnReject)
	case l.Quantity > 1<<40 || l.Burst > 1<<40:
		return fmt.Errorf("%w: quantity/burst above 2^40", ErrBadLimit)
	case l.Window > 400*24*time.Hour:
		return fmt.Errorf("%w: window %v above 400 days", ErrBadLimit, l.Window)
	}
	if l.Algorithm == TokenBucket {
		if tau := emission(l) * l.burst(); tau > maxTau || tau/l.burst() != emission(l) {
			return fmt.Errorf("%w: burst × window/quantity above %v", ErrBadLimit, time.Duration(maxTau))
		}
		return nil
	}
	if hi, lo := bits.Mul64(uint64(l.Quantity), uint64(l.Window.Milliseconds())); hi != 0 || lo > 1<<62 {
		return fmt.Errorf("%w: quantity × window in ms above 2^62", ErrBadLimit)
	}
	if l.Algorithm == FixedWindow {
		if l.Window%time.Millisecond != 0 {
			return fmt.Errorf("%w: window %v is not a whole number of milliseconds", ErrBadLimit, l.Window)
		}
		return nil
	}
	if l.Precision < 0 || l.Precision > maxPrecision {
		return fmt.Errorf("%w: precision %d not in [0, %d]", ErrBadPrecision, l.Precision, maxPrecision)
	}
	if l.Window%time.Millisecond != 0 {
		return fmt.Errorf("%w: window %v is not a whole number of milliseconds", ErrBadPrecision, l.Window)
	}
	if ms := l.Window.Milliseconds(); ms%int64(l.precision()) != 0 {
		return fmt.Errorf("%w: window of %dms is not divisible into %d sub-windows of whole milliseconds",
			ErrBadPrecision, ms, l.precision())
	}
	return nil
}

// validateCalendar is Validate for a calendar window.
func (l Limit) validateCalendar() error {
	switch {
	case l.Algorithm != FixedWindow:
		return fmt.Errorf("%w: a calendar window counts fixed windows (algorithm fixed_window)", errBadCalendar)
	case l.Window != 0:
		return fmt.Errorf("%w: window %v is set by the calendar: leave it zero", errBadCalendar, l.Window)
	case l.Quantity <= 0:
		return fmt.Errorf("%w: quantity %d must be positive", ErrBadLimit, l.Quantity)
	case l.Quantity > 1<<40:
		return fmt.Errorf("%w: quantity above 2^40", ErrBadLimit)
	case l.OnReject < Count || l.OnReject > CountFirst:
		return fmt.Errorf("%w: unknown OnReject %d", ErrBadLimit, l.OnReject)
	}
	return l.Calendar.validate()
}

// String describes the limit, e.g. "100/1m0s sliding(p=4) count".
func (l Limit) String() string {
	alg := [...]string{"sliding", "fixed", "bucket"}
	a := "?"
	if l.Algorithm >= 0 && int(l.Algorithm) < len(alg) {
		a = alg[l.Algorithm]
	}
	if l.Algorithm == SlidingWindow && l.precision() > 1 {
		a = fmt.Sprintf("%s(p=%d)", a, l.precision())
	}
	if l.Algorithm == TokenBucket {
		a = fmt.Sprintf("%s(burst=%d)", a, l.burst())
	}
	mode := "count"
	switch l.OnReject {
	case Refund:
		mode = "refund"
	case CountFirst:
		mode = "count-first"
	}
	if l.Calendar.Unit != NoCalendar {
		return fmt.Sprintf("%d/%v %s %s", l.Quantity, l.Calendar, a, mode)
	}
	return fmt.Sprintf("%d/%v %s %s", l.Quantity, l.Window, a, mode)
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
	// Window is the length of the window this answer is about: the
	// limit's Window, a calendar window's true length (28 to 31 days, a
	// 23 or 25 hour day), or for TokenBucket the time an empty bucket
	// takes to refill Limit units (burst × Window/Quantity).
	Window time.Duration
	// Next is how long until more than Remaining units are available to a
	// lone client, the counts staying as they are: the end of a fixed
	// window, the next token of a bucket, the instant a sliding window's
	// estimate lets one more unit in. Never more than Window.
	Next time.Duration
	// Count is a FixedWindow's count after the decision (the request's
	// units included when they were counted); 0 for the other algorithms.
	Count int64
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
