package shard

import (
	"sync"
	"time"
)

// HealthConfig is Twemproxy's failure handling for one pool. Zero means
// default.
type HealthConfig struct {
	// AutoEject turns ejection on (Twemproxy's auto_eject_hosts; default
	// false: failures are counted but a shard is never ejected).
	AutoEject bool
	// FailureLimit is the number of consecutive failures that eject a
	// shard (server_failure_limit); default 2.
	FailureLimit int
	// RetryTimeout is how long an ejected shard stays out before it may be
	// probed (server_retry_timeout); default 30s.
	RetryTimeout time.Duration
}

func (c HealthConfig) failureLimit() int {
	if c.FailureLimit > 0 {
		return c.FailureLimit
	}
	return 2
}

func (c HealthConfig) retryTimeout() time.Duration {
	if c.RetryTimeout > 0 {
		return c.RetryTimeout
	}
	return 30 * time.Second
}

// Health is one shard's state machine: live → (FailureLimit consecutive
// failures) → ejected → (RetryTimeout elapsed and a successful probe) →
// live. Unlike Twemproxy, which re-adds a shard blindly after the retry
// timeout, an ejected shard returns only after a good probe; a failed probe
// keeps it out for another RetryTimeout.
//
// Time is a parameter: every method takes now. Health is safe for
// concurrent use. The zero value is not usable; use NewHealth.
type Health struct {
	cfg HealthConfig

	mu        sync.Mutex
	failures  int
	ejected   bool
	retryAt   time.Time
	ejectedAt time.Time
	ejections uint64
}

// NewHealth returns a live shard's Health.
func NewHealth(cfg HealthConfig) *Health { return &Health{cfg: cfg} }

// Observe records the outcome of a request to the shard: err == nil resets
// the consecutive failure count. It reports whether the shard was ejected
// by this failure. Outcomes observed while ejected (requests that were in
// flight) are ignored.
func (h *Health) Observe(now time.Time, err error) (ejected bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ejected {
		return false
	}
	if err == nil {
		h.failures = 0
		return false
	}
	h.failures++
	if h.cfg.AutoEject && h.failures >= h.cfg.failureLimit() {
		h.ejected = true
		h.ejections++
		h.ejectedAt = now
		h.retryAt = now.Add(h.cfg.retryTimeout())
		return true
	}
	return false
}

// Healthy reports whether the shard is on the ring (not ejected).
func (h *Health) Healthy(now time.Time) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return !h.ejected
}

// ProbeDue reports whether the shard is ejected and its retry timeout has
// passed, so a probe may re-admit it.
func (h *Health) ProbeDue(now time.Time) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.ejected && !now.Before(h.retryAt)
}

// ProbeResult records a probe made at now. A good probe after the retry
// timeout re-admits the shard (it reports true); a failed one keeps it out
// for another RetryTimeout. Probes of a live shard, or before the retry
// timeout, change nothing.
func (h *Health) ProbeResult(now time.Time, err error) (readmitted bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.ejected || now.Before(h.retryAt) {
		return false
	}
	if err != nil {
		h.retryAt = now.Add(h.cfg.retryTimeout())
		return false
	}
	h.ejected = false
	h.failures = 0
	return true
}

// HealthStats is a snapshot of a Health's counters.
type HealthStats struct {
	Ejected   bool
	Failures  int       // consecutive failures now
	Ejections uint64    // times ejected since start
	EjectedAt time.Time // when last ejected (zero if never)
}

// Stats returns the current counters.
func (h *Health) Stats() HealthStats {
	h.mu.Lock()
	defer h.mu.Unlock()
	return HealthStats{Ejected: h.ejected, Failures: h.failures, Ejections: h.ejections, EjectedAt: h.ejectedAt}
}
