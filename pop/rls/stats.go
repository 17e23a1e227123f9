package rls

import (
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// Stats are envoyproxy/ratelimit's statistics as Prometheus counters,
// named as its statsd-exporter mapping names them
// (ratelimit_service_rate_limit_total_hits, _over_limit, _near_limit,
// _within_limit, _shadow_mode), labelled by domain and key (the
// descriptor path after the domain: "key_value.key", the request's values
// with detailed_metric or value_to_metric). Each counts hits (hits_addend
// units), not requests. A nil *Stats records nothing.
type Stats struct {
	total, over, near, within, shadow *prometheus.CounterVec
	globalShadowMode, badRequests     prometheus.Counter
	reloads                           *prometheus.CounterVec
	mu                                sync.Mutex
	keys                              map[string]bool
	maxKeys                           int
}

// overflowKey labels the hits of keys beyond MaxKeys.
const overflowKey = "_overflow"

// NewStats registers the statistics on reg. maxKeys bounds the distinct
// (domain, key) label pairs (detailed_metric makes one per value); beyond
// it hits count under key "_overflow". 0 means 10000.
func NewStats(reg prometheus.Registerer, maxKeys int) (*Stats, error) {
	vec := func(name, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ratelimit_service_rate_limit_" + name, Help: help}, []string{"domain", "key"})
	}
	s := &Stats{
		total:            vec("total_hits", "Hits (hits_addend units) of descriptors that matched a limit."),
		over:             vec("over_limit", "Hits answered OVER_LIMIT (shadow mode included)."),
		near:             vec("near_limit", "Hits admitted above the near-limit ratio of the limit."),
		within:           vec("within_limit", "Hits admitted."),
		shadow:           vec("shadow_mode", "Hits over the limit answered OK by the rule's shadow_mode."),
		globalShadowMode: prometheus.NewCounter(prometheus.CounterOpts{Name: "ratelimit_service_global_shadow_mode", Help: "Requests over the limit answered OK by the global shadow mode."}),
		badRequests:      prometheus.NewCounter(prometheus.CounterOpts{Name: "poplimit_rls_invalid_requests_total", Help: "ShouldRateLimit requests refused with INVALID_ARGUMENT."}),
		reloads:          prometheus.NewCounterVec(prometheus.CounterOpts{Name: "poplimit_rls_config_loads_total", Help: "Config loads by result (ok, error; an error keeps the previous config)."}, []string{"result"}),
		keys:             map[string]bool{},
		maxKeys:          orDefault(maxKeys, 10000),
	}
	for _, c := range []prometheus.Collector{s.total, s.over, s.near, s.within, s.shadow, s.globalShadowMode, s.badRequests, s.reloads} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return s, nil
}

func (s *Stats) descriptor(domain, statsKey string, hits int64, over, near, shadow bool) {
	if s == nil {
		return
	}
	key := strings.TrimPrefix(statsKey, domain+".")
	s.mu.Lock()
	if !s.keys[domain+"\x00"+key] {
		if len(s.keys) >= s.maxKeys {
			key = overflowKey
		} else {
			s.keys[domain+"\x00"+key] = true
		}
	}
	s.mu.Unlock()
	h := float64(hits)
	s.total.WithLabelValues(domain, key).Add(h)
	switch {
	case over:
		s.over.WithLabelValues(domain, key).Add(h)
		if shadow {
			s.shadow.WithLabelValues(domain, key).Add(h)
		}
	default:
		s.within.WithLabelValues(domain, key).Add(h)
		if near {
			s.near.WithLabelValues(domain, key).Add(h)
		}
	}
}

func (s *Stats) globalShadow() {
	if s != nil {
		s.globalShadowMode.Inc()
	}
}

func (s *Stats) badRequest() {
	if s != nil {
		s.badRequests.Inc()
	}
}

func (s *Stats) reload(err error) {
	if s == nil {
		return
	}
	r := "ok"
	if err != nil {
		r = "error"
	}
	s.reloads.WithLabelValues(r).Inc()
}
