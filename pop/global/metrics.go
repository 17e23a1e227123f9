package global

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Decision paths, the "path" label of poplimit_global_decisions_total.
const (
	pathPool      = iota // admitted from the PoP's pool
	pathEmpty            // rejected: pool empty, home store down
	pathExhausted        // rejected: the window's global count is used up
	pathOverdraft        // admitted within the overdraft
	pathOpen             // admitted: home store down, FallbackOpen
	pathClosed           // rejected: home store down, FallbackClosed
	pathWaited           // admitted after waiting for a claim
	pathTimeout          // decided by the Fallback: the wait ran out
	numPaths
)

var pathNames = [numPaths]string{"pool", "empty", "exhausted", "overdraft", "open", "closed", "waited", "timeout"}

// Metrics are the Prometheus collectors of global limits, labelled by the
// limit's name (the key family), never by identity. A nil *Metrics records
// nothing. Safe for concurrent use.
type Metrics struct {
	claimed, returned, expired, fallback *prometheus.CounterVec
	refillFailures, localOps, homeOps    *prometheus.CounterVec
	falseRefusals                        *prometheus.CounterVec
	decisionsVec                         *prometheus.CounterVec
	pool                                 *prometheus.GaugeVec
	refill                               prometheus.Histogram
	up                                   prometheus.Gauge
}

// NewMetrics registers the collectors in reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	cv := func(o prometheus.CounterOpts, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(o, append([]string{"limit"}, labels...))
	}
	m := &Metrics{
		claimed:        cv(prometheus.CounterOpts{Name: "poplimit_global_tokens_claimed_total", Help: "Tokens granted to this PoP's pool by the home store's global count."}),
		returned:       cv(prometheus.CounterOpts{Name: "poplimit_global_tokens_returned_total", Help: "Tokens given back to the PoP's pool (a compound rule's other limit refused the request)."}),
		expired:        cv(prometheus.CounterOpts{Name: "poplimit_global_tokens_expired_total", Help: "Tokens left in a PoP pool when its window ended (counted by the worker that creates the pool two windows later): under-admission."}),
		fallback:       cv(prometheus.CounterOpts{Name: "poplimit_global_tokens_fallback_total", Help: "Tokens the PoP credited itself (its share) while the home store was unreachable; owed to the global count."}),
		refillFailures: cv(prometheus.CounterOpts{Name: "poplimit_global_refill_failures_total", Help: "Claims on the home store that failed (unreachable, timeout)."}),
		localOps:       cv(prometheus.CounterOpts{Name: "poplimit_global_pop_store_ops_total", Help: "Operations on the PoP's store (pool, lock, credited, overdraft) for global limits."}),
		homeOps:        cv(prometheus.CounterOpts{Name: "poplimit_global_home_store_ops_total", Help: "Claims on the home store (one round trip with a pipelined client)."}),
		falseRefusals:  cv(prometheus.CounterOpts{Name: "poplimit_global_false_refusals_total", Help: "Rejections issued while the home count for the window was below the limit as this worker knew it: the count it last read, or the counts its claims in flight then returned."}),
		decisionsVec:   cv(prometheus.CounterOpts{Name: "poplimit_global_decisions_total", Help: "Decisions of global limits by path: pool, waited (admitted after waiting for a claim), timeout (the wait ran out: the fail mode decided), empty (home store down, pool empty), exhausted, overdraft, open/closed (home store down)."}, "path"),
		pool:           prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "poplimit_global_pool_tokens", Help: "Tokens in the PoP's pool at the last decision of this worker."}, []string{"limit"}),
		refill: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "poplimit_global_refill_seconds", Help: "Duration of a successful refill: PoP lock, claim on the home store, credit.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 14)}),
		up: prometheus.NewGauge(prometheus.GaugeOpts{Name: "poplimit_global_home_up", Help: "1 while the home store answers claims, 0 after a failed claim (until one succeeds)."}),
	}
	for _, c := range []prometheus.Collector{m.claimed, m.returned, m.expired, m.fallback, m.refillFailures, m.localOps, m.homeOps, m.falseRefusals, m.decisionsVec, m.pool, m.refill, m.up} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// family is the resolved collectors of one limit.
type family struct {
	claimed, returned, expired, fallback prometheus.Counter
	refillFailures, localOps, homeOps    prometheus.Counter
	falseRefusals                        prometheus.Counter
	paths                                [numPaths]prometheus.Counter
	pool                                 prometheus.Gauge
}

func (f *family) decisions(path int) prometheus.Counter { return f.paths[path] }

// family resolves the collectors of the limit named name; with nil m
// they record nowhere.
func (m *Metrics) family(name string) family {
	var f family
	if m == nil {
		c := func() prometheus.Counter { return prometheus.NewCounter(prometheus.CounterOpts{Name: "unused"}) }
		f = family{claimed: c(), returned: c(), expired: c(), fallback: c(), refillFailures: c(), localOps: c(), homeOps: c(), falseRefusals: c(),
			pool: prometheus.NewGauge(prometheus.GaugeOpts{Name: "unused"})}
		for i := range f.paths {
			f.paths[i] = c()
		}
		return f
	}
	f = family{claimed: m.claimed.WithLabelValues(name), returned: m.returned.WithLabelValues(name), expired: m.expired.WithLabelValues(name),
		fallback: m.fallback.WithLabelValues(name), refillFailures: m.refillFailures.WithLabelValues(name),
		localOps: m.localOps.WithLabelValues(name), homeOps: m.homeOps.WithLabelValues(name), falseRefusals: m.falseRefusals.WithLabelValues(name), pool: m.pool.WithLabelValues(name)}
	for i := range f.paths {
		f.paths[i] = m.decisionsVec.WithLabelValues(name, pathNames[i])
	}
	return f
}

func (m *Metrics) refillLatency(d time.Duration) {
	if m != nil {
		m.refill.Observe(d.Seconds())
	}
}

func (m *Metrics) homeUp(up bool) {
	if m == nil {
		return
	}
	if up {
		m.up.Set(1)
	} else {
		m.up.Set(0)
	}
}
