package pop

// Prometheus metrics, in an explicit registry.

import (
	"errors"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the Prometheus collectors of a Limiter, registered in an
// explicit registry. Labels carry policy names, tiers, reasons and states
// only: never an API key, a user or an IP. A nil *Metrics records nothing.
type Metrics struct {
	decisions   *prometheus.CounterVec // policy, tier, result, allowed
	nearLimit   *prometheus.CounterVec // policy
	storeLat    prometheus.Histogram   // seconds
	storeErrors prometheus.Counter     //
	contention  prometheus.Counter     //
	deadline    prometheus.Gauge       // seconds
	slow        *prometheus.CounterVec // policy, reason (store_slow, store_busy)
	breaker     prometheus.Gauge       // 0 closed, 1 open, 2 half-open
	fallback    *prometheus.CounterVec // policy, mode
	mitigation  *prometheus.CounterVec // policy, event (hit, insert)
	reloads     *prometheus.CounterVec // result
	eventsDrop  prometheus.Counter     //
	eventsOut   prometheus.Counter     //
	leaseServed *prometheus.CounterVec // policy
	lim         limitMetrics           // dry runs, concurrency, flags, response counts

	// resolved memoises the children of the counter vectors touched per
	// decision: WithLabelValues hashes and validates every label on each
	// call. Bounded by resolvedMax (policy names change only on reload);
	// past it, lookups go to the vector.
	resolvedMu sync.RWMutex
	resolved   map[labelKey]prometheus.Counter
}

// resolvedMax bounds Metrics.resolved.
const resolvedMax = 4096

// labelKey names one child of a counter vector (unused labels empty).
type labelKey struct {
	vec        *prometheus.CounterVec
	n          int // number of labels
	a, b, c, d string
}

// inc increments the child of k.vec with k's labels.
func (m *Metrics) inc(k labelKey) {
	m.resolvedMu.RLock()
	c, ok := m.resolved[k]
	m.resolvedMu.RUnlock()
	if !ok {
		switch k.n {
		case 1:
			c = k.vec.WithLabelValues(k.a)
		case 2:
			c = k.vec.WithLabelValues(k.a, k.b)
		default:
			c = k.vec.WithLabelValues(k.a, k.b, k.c, k.d)
		}
		m.resolvedMu.Lock()
		if m.resolved == nil {
			m.resolved = make(map[labelKey]prometheus.Counter)
		}
		if len(m.resolved) < resolvedMax {
			m.resolved[k] = c
		}
		m.resolvedMu.Unlock()
	}
	c.Inc()
}

// NewMetrics creates the collectors and registers them in reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "poplimit_decisions_total", Help: "Rate-limit decisions by policy, tier, deciding stage and outcome.",
		}, []string{"policy", "tier", "result", "allowed"}),
		nearLimit: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "poplimit_near_limit_total", Help: "Admitted decisions that left less than 20% of the binding limit.",
		}, []string{"policy"}),
		storeLat: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "poplimit_store_latency_seconds", Help: "Latency of one decision's store calls.",
			Buckets: []float64{.0001, .00025, .0005, .001, .002, .005, .01, .025, .05, .1},
		}),
		storeErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "poplimit_store_errors_total", Help: "Decisions whose store calls failed (deadline, I/O); contention is counted apart.",
		}),
		contention: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "poplimit_store_contention_total", Help: "Decisions rejected because a token bucket lost its compare-and-swap race every retry (a hot key, not a store failure).",
		}),
		deadline: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "poplimit_store_deadline_seconds", Help: "Current deadline of one decision's store calls (adaptive unless fixed).",
		}),
		slow: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "poplimit_store_slow_decisions_total", Help: "Decisions taken by the local budget while the store was alive: store_slow (deadline passed), store_busy (no in-flight slot). Never fail-open, never 503.",
		}, []string{"policy", "reason"}),
		breaker: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "poplimit_breaker_state", Help: "Store circuit breaker: 0 closed, 1 open, 2 half-open.",
		}),
		fallback: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "poplimit_fallback_decisions_total", Help: "Decisions taken by a fail mode because the store was unavailable.",
		}, []string{"policy", "mode"}),
		mitigation: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "poplimit_mitigation_cache_total", Help: "Mitigation cache events: hit (rejected with no store call), insert.",
		}, []string{"policy", "event"}),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "poplimit_policy_reloads_total", Help: "Policy reloads by result (ok, invalid: the file failed validation, unreadable: it could not be read).",
		}, []string{"result"}),
		eventsDrop: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "poplimit_rejection_events_dropped_total", Help: "Rejection events dropped because the queue was full or the sink failed.",
		}),
		eventsOut: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "poplimit_rejection_events_written_total", Help: "Rejection events written to the sink.",
		}),
		leaseServed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "poplimit_lease_served_total", Help: "Decisions served from a local token lease (no store call).",
		}, []string{"policy"}),
	}
	var more []prometheus.Collector
	m.lim, more = newLimitMetrics()
	for _, c := range append([]prometheus.Collector{m.decisions, m.nearLimit, m.storeLat, m.storeErrors, m.contention, m.deadline, m.slow, m.breaker, m.fallback, m.mitigation, m.reloads, m.eventsDrop, m.eventsOut, m.leaseServed}, more...) {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *Metrics) decision(d *Decision) {
	if m == nil || d.Reason == ReasonNoPolicy {
		return
	}
	allowed := "false"
	if d.Allowed {
		allowed = "true"
	}
	m.inc(labelKey{vec: m.decisions, n: 4, a: d.Policy, b: d.Tier, c: string(d.Reason), d: allowed})
	switch d.Reason {
	case ReasonFailOpen, ReasonFailClosed, ReasonFailLocal:
		m.inc(labelKey{vec: m.fallback, n: 2, a: d.Policy, b: string(d.Reason)})
	case ReasonStoreSlow, ReasonStoreBusy:
		m.inc(labelKey{vec: m.slow, n: 2, a: d.Policy, b: string(d.Reason)})
	case ReasonMitigated:
		m.inc(labelKey{vec: m.mitigation, n: 2, a: d.Policy, b: "hit"})
	case ReasonLease:
		m.inc(labelKey{vec: m.leaseServed, n: 1, a: d.Policy})
	}
	if d.Allowed && d.limited() && d.Binding.Result.Remaining*5 < d.Binding.Result.Limit {
		m.inc(labelKey{vec: m.nearLimit, n: 1, a: d.Policy})
	}
}

func (m *Metrics) mitigationInsert(policy string) {
	if m != nil {
		m.inc(labelKey{vec: m.mitigation, n: 2, a: policy, b: "insert"})
	}
}

func (m *Metrics) store(d time.Duration, err error, contention bool) {
	if m == nil {
		return
	}
	m.storeLat.Observe(d.Seconds())
	switch {
	case contention:
		m.contention.Inc()
	case err != nil:
		m.storeErrors.Inc()
	}
}

func (m *Metrics) storeDeadline(d time.Duration) {
	if m != nil {
		m.deadline.Set(d.Seconds())
	}
}

func (m *Metrics) breakerState(s BreakerState) {
	if m != nil {
		m.breaker.Set(float64(s))
	}
}

func (m *Metrics) reload(err error) {
	if m == nil {
		return
	}
	switch {
	case errors.Is(err, ErrInvalidPolicy):
		m.reloads.WithLabelValues("invalid").Inc()
		return
	case err != nil:
		m.reloads.WithLabelValues("unreadable").Inc()
		return
	}
	m.reloads.WithLabelValues("ok").Inc()
}

// limitMetrics are the collectors of dry runs, concurrency limits,
// shared mitigation flags and counting by response.
type limitMetrics struct {
	shadow     *prometheus.CounterVec // policy, limit
	shadowErr  *prometheus.CounterVec // policy
	conc       *prometheus.CounterVec // policy, event
	flags      *prometheus.CounterVec // policy, event
	respCount  *prometheus.CounterVec // policy, limit
	respInvald *prometheus.CounterVec // policy, reason
}

func newLimitMetrics() (limitMetrics, []prometheus.Collector) {
	m := limitMetrics{
		shadow: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "poplimit_shadow_rejections_total", Help: "Requests admitted that a dry-run (shadow) limit would have rejected, by policy and limit.",
		}, []string{"policy", "limit"}),
		shadowErr: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "poplimit_shadow_store_errors_total", Help: "Dry-run counts that failed at the store (the decision was left to the enforcing limits).",
		}, []string{"policy"}),
		conc: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "poplimit_concurrency_slots_total", Help: "Concurrency limit slots: acquired, released, rejected (all in flight), store_error (admitted without a slot unless fail_mode closed), release_error (the slot expires after max_request_time).",
		}, []string{"policy", "event"}),
		flags: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "poplimit_mitigation_flags_total", Help: "Shared mitigation flags: raised, hit (an identity blocked by another worker's flag), read_error, write_error.",
		}, []string{"policy", "event"}),
		respCount: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "poplimit_response_counted_total", Help: "Requests counted after their response by a count_if or cost_header limit.",
		}, []string{"policy", "limit"}),
		respInvald: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "poplimit_response_cost_invalid_total", Help: "Cost header values not charged as sent: missing, invalid (negative or not an integer: the default was charged), too_large (capped at max), store_error.",
		}, []string{"policy", "reason"}),
	}
	return m, []prometheus.Collector{m.shadow, m.shadowErr, m.conc, m.flags, m.respCount, m.respInvald}
}

// inc2 increments the child (a, b) of vec (picked from m, which may be
// nil).
func (m *Metrics) inc2(vec func(*Metrics) *prometheus.CounterVec, a, b string) {
	if m != nil {
		m.inc(labelKey{vec: vec(m), n: 2, a: a, b: b})
	}
}

func (m *Metrics) shadowReject(policy, limit string) {
	m.inc2(func(m *Metrics) *prometheus.CounterVec { return m.lim.shadow }, policy, limit)
}

func (m *Metrics) shadowError(policy string) {
	if m != nil {
		m.inc(labelKey{vec: m.lim.shadowErr, n: 1, a: policy})
	}
}

func (m *Metrics) concurrency(policy, event string) {
	m.inc2(func(m *Metrics) *prometheus.CounterVec { return m.lim.conc }, policy, event)
}

func (m *Metrics) flag(policy, event string) {
	m.inc2(func(m *Metrics) *prometheus.CounterVec { return m.lim.flags }, policy, event)
}

func (m *Metrics) responseCounted(policy, limit string) {
	m.inc2(func(m *Metrics) *prometheus.CounterVec { return m.lim.respCount }, policy, limit)
}

func (m *Metrics) responseCostInvalid(policy, reason string) {
	m.inc2(func(m *Metrics) *prometheus.CounterVec { return m.lim.respInvald }, policy, reason)
}
