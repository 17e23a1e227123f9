package pop

import (
	"sync"
	"sync/atomic"
	"time"
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
type BreakerConfig struct {
	// Failures is the number of consecutive failures that opens the
	// breaker; default 5.
	Failures int
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

// Breaker is a circuit breaker driven by time passed in: Allow(now) says
// whether a store call may be made, Observe(now, err) records its outcome.
// Every Allow that returned true must be followed by exactly one Observe.
// Safe for concurrent use; the closed-state Allow is one atomic load.
type Breaker struct {
	cfg      BreakerConfig
	state    atomic.Int32
	onChange func(BreakerState)

	consecutive atomic.Int32 // failures in a row while closed

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
// success.
func (b *Breaker) Observe(now time.Time, err error) {
	if BreakerState(b.state.Load()) == BreakerClosed {
		// Fast path, lock-free: reset or extend the failure run.
		if err == nil {
			if b.consecutive.Load() != 0 {
				b.consecutive.Store(0)
			}
			return
		}
		if int(b.consecutive.Add(1)) < b.cfg.failures() {
			return
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	switch BreakerState(b.state.Load()) {
	case BreakerClosed:
		if err != nil && int(b.consecutive.Load()) >= b.cfg.failures() {
			b.openedAt = now
			b.set(BreakerOpen)
		}
	case BreakerHalfOpen:
		if b.inFlight > 0 {
			b.inFlight--
		}
		if err == nil {
			b.consecutive.Store(0)
			b.set(BreakerClosed)
			return
		}
		b.openedAt = now
		b.set(BreakerOpen)
	case BreakerOpen:
		// A straggler from before the breaker opened: nothing to learn.
	}
}
