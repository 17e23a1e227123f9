package pop

// When the store fails: the circuit breaker (evidence of death), the
// bound on store calls in flight, the local budget a slow or busy store
// falls back to, and the fail modes of a dead one.

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/poplimit/poplimit/counter"
	"github.com/poplimit/poplimit/pop/policy"
)

// BreakerState is the state of a Breaker.
type BreakerState int32

const (
	// BreakerClosed: calls go to the store.
	BreakerClosed BreakerState = iota
	// BreakerOpen: no call goes to the store until OpenFor has passed.
	BreakerOpen
	// BreakerHalfOpen: a limited number of probe calls test the store.
	BreakerHalfOpen
)

func (s BreakerState) String() string {
	switch s {
	case BreakerOpen:
		return "open"
	case BreakerHalfOpen:
		return "half_open"
	}
	return "closed"
}

// BreakerConfig configures a Breaker. Zero means default.
//
// The breaker opens on evidence that the store is dead, never because a
// burst made it slow while it keeps answering:
//   - Failures hard failures in a row (connection refused, reset, EOF, a
//     protocol or server error: anything but a timeout), or
//   - failed calls (timeouts included) and no success at all for Window.
//
// A timeout while successes keep coming is a slow store, not a dead one:
// it leaves the breaker closed (the caller decides that request with its
// conservative local budget, see Limiter).
type BreakerConfig struct {
	// Failures is the number of consecutive hard failures (not timeouts)
	// that opens the breaker; default 5.
	Failures int
	// Window is how long calls may keep failing (timeouts included) with
	// no success at all before the breaker opens; default 2s: twice the
	// longest adaptive deadline, so one wave of slow calls never opens
	// it, and short enough that a hung store costs each worker at most a
	// few deadline-long waits.
	Window time.Duration
	// OpenFor is how long the breaker stays open before letting probes
	// through; default 500ms.
	OpenFor time.Duration
	// Probes is the number of concurrent half-open probes; default 1. One
	// successful probe closes the breaker, one failed probe reopens it.
	Probes int
}

func (c BreakerConfig) failures() int {
	if c.Failures > 0 {
		return c.Failures
	}
	return 5
}

func (c BreakerConfig) window() time.Duration {
	if c.Window > 0 {
		return c.Window
	}
	return 2 * time.Second
}

func (c BreakerConfig) openFor() time.Duration {
	if c.OpenFor > 0 {
		return c.OpenFor
	}
	return 500 * time.Millisecond
}

func (c BreakerConfig) probes() int {
	if c.Probes > 0 {
		return c.Probes
	}
	return 1
}

// IsTimeout reports whether err is a store call that ran out of time (a
// context deadline or a socket timeout) rather than one the store or the
// network refused.
func IsTimeout(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// Breaker is a circuit breaker driven by time passed in: Allow(now) says
// whether a store call may be made, Observe(now, err) records its outcome.
// Every Allow that returned true must be followed by exactly one Observe
// (or Release). Safe for concurrent use; the closed-state Allow is one
// atomic load, the closed-state Observe of a success two.
type Breaker struct {
	cfg      BreakerConfig
	state    atomic.Int32
	onChange func(BreakerState)

	consecutive atomic.Int32 // hard failures in a row while closed
	lastOK      atomic.Int64 // unix ns of the latest success (0: none)
	failSince   atomic.Int64 // unix ns of the first failure after it (0: none)

	mu       sync.Mutex
	openedAt time.Time
	inFlight int // half-open probes in flight
}

// NewBreaker returns a closed breaker. onChange, if not nil, is called (under
// the breaker's lock, so it must be quick) on every state change.
func NewBreaker(cfg BreakerConfig, onChange func(BreakerState)) *Breaker {
	return &Breaker{cfg: cfg, onChange: onChange}
}

// State returns the current state (an open breaker whose OpenFor has passed
// still reports open until the next Allow moves it to half-open).
func (b *Breaker) State() BreakerState { return BreakerState(b.state.Load()) }

// Live reports whether the store answered successfully within Window
// before now: a failure then is a slow or unlucky call, not a dead store.
func (b *Breaker) Live(now time.Time) bool {
	ok := b.lastOK.Load()
	return ok != 0 && now.UnixNano()-ok < int64(b.cfg.window())
}

func (b *Breaker) set(s BreakerState) {
	if BreakerState(b.state.Swap(int32(s))) != s && b.onChange != nil {
		b.onChange(s)
	}
}

// Allow reports whether a store call may be made at now.
func (b *Breaker) Allow(now time.Time) bool {
	if BreakerState(b.state.Load()) == BreakerClosed {
		return true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	switch BreakerState(b.state.Load()) {
	case BreakerClosed:
		return true
	case BreakerOpen:
		if now.Sub(b.openedAt) < b.cfg.openFor() {
			return false
		}
		b.set(BreakerHalfOpen)
		b.inFlight = 0
	}
	if b.inFlight >= b.cfg.probes() {
		return false
	}
	b.inFlight++
	return true
}

// Release ends a call allowed at now without an outcome (the caller gave
// up before the store answered): a half-open probe slot is freed, nothing
// else changes.
func (b *Breaker) Release() {
	if BreakerState(b.state.Load()) != BreakerHalfOpen {
		return
	}
	b.mu.Lock()
	if BreakerState(b.state.Load()) == BreakerHalfOpen && b.inFlight > 0 {
		b.inFlight--
	}
	b.mu.Unlock()
}

// Observe records the outcome of a call allowed at now; err nil is a
// success (see BreakerConfig for what opens the breaker).
func (b *Breaker) Observe(now time.Time, err error) {
	t := now.UnixNano()
	if BreakerState(b.state.Load()) == BreakerClosed {
		// Fast path, lock-free.
		if err == nil {
			// At most one write a millisecond: every worker goroutine
			// succeeds here, and Live needs no finer time.
			if t-b.lastOK.Load() > int64(time.Millisecond) {
				b.lastOK.Store(t)
			}
			if b.consecutive.Load() != 0 {
				b.consecutive.Store(0)
			}
			if b.failSince.Load() != 0 {
				b.failSince.Store(0)
			}
			return
		}
		b.failSince.CompareAndSwap(0, t)
		hard := !IsTimeout(err)
		run := int(b.consecutive.Load())
		if hard {
			run = int(b.consecutive.Add(1))
		}
		since := b.failSince.Load()
		dead := run >= b.cfg.failures() || (since != 0 && t-since >= int64(b.cfg.window()) && !b.Live(now))
		if !dead {
			return
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	switch BreakerState(b.state.Load()) {
	case BreakerClosed:
		if err != nil {
			b.openedAt = now
			b.set(BreakerOpen)
		}
	case BreakerHalfOpen:
		if b.inFlight > 0 {
			b.inFlight--
		}
		if err == nil {
			b.consecutive.Store(0)
			b.failSince.Store(0)
			if b.lastOK.Load() < t {
				b.lastOK.Store(t)
			}
			b.set(BreakerClosed)
			return
		}
		b.openedAt = now
		b.set(BreakerOpen)
	case BreakerOpen:
		// A straggler from before the breaker opened: nothing to learn.
	}
}

// acquire takes an in-flight slot, waiting at most InFlightWait (default
// the current store deadline) or until ctx ends.
func (l *Limiter) acquire(ctx context.Context) bool {
	select {
	case l.slots <- struct{}{}:
		return true
	default:
	}
	wait := l.cfg.InFlightWait
	if wait <= 0 {
		wait = l.dl.Current()
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case l.slots <- struct{}{}:
		return true
	case <-t.C:
		return false
	case <-ctx.Done():
		return false
	}
}

// local decides with the in-process budget of each limit (limit ÷
// WorkersPerPoP, and ÷ PoPs for a global limit): the local fail mode, and every decision the store could
// not answer in time while alive. The mitigation cache was consulted
// before: an identity known to be over its limit never gets here.
func (l *Limiter) local(ctx context.Context, rs *rules, keys []string, now time.Time, reason Reason) Decision {
	checks := make([]counter.Check, 0, len(rs.limits))
	var lims []counter.Limit
	for i, r := range rs.limits {
		if r.shadow || r.after {
			continue // a dry run never rejects; response counting needs the store
		}
		checks = append(checks, counter.Check{Allower: r.local, Key: keys[i], Cost: r.cost})
		lims = append(lims, r.local.Limit())
	}
	if len(checks) == 0 {
		return Decision{Allowed: true, Reason: reason}
	}
	_, results, err := counter.AllowAll(ctx, now, 1, checks...)
	if err != nil {
		// A local limiter cannot be unreachable: only a bad key gets here.
		if reason == ReasonFailLocal {
			return Decision{Allowed: true, Reason: reason}
		}
		return Decision{Reason: reason, Status: http.StatusTooManyRequests}
	}
	all := make([]LimitResult, len(results))
	for i, res := range results {
		all[i] = LimitResult{Limit: lims[i], Result: res}
	}
	return verdict(all, len(all), reason)
}

// fallback applies the policy's fail mode when the store is unavailable.
func (l *Limiter) fallback(ctx context.Context, p *compiledPolicy, rs *rules, keys []string, now time.Time) Decision {
	switch p.spec.FailMode {
	case policy.FailClosed:
		return Decision{Reason: ReasonFailClosed, Status: http.StatusServiceUnavailable,
			Binding: LimitResult{Result: counter.Result{RetryAfter: l.cfg.Breaker.openFor()}}}
	case policy.FailLocal:
		return l.local(ctx, rs, keys, now, ReasonFailLocal)
	}
	return Decision{Allowed: true, Reason: ReasonFailOpen}
}
