package pop

import "github.com/prometheus/client_golang/prometheus"

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
