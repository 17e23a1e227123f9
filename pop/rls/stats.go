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
// units), not requests, split as envoyproxy/ratelimit splits them
// (service.go, splitHits). A nil *Stats records nothing.
type Stats struct {
	total, over, near, within, shadow *prometheus.CounterVec
	globalShadowMode, badRequests     prometheus.Counter
	reloads                           *prometheus.CounterVec
	mu                                sync.Mutex
	keys                              map[statsID]*keyStats // the (domain, stats key) pairs seen, overflow ones included
	labelled                          int                   // keys labelled by their own name (at most maxKeys)
	maxKeys                           int
}

// statsID is a descriptor's statistics identity: its domain and stats key.
type statsID struct{ domain, statsKey string }

// keyStats are the counters of one label pair, each resolved on its first
// use (a series appears once it counts, as with WithLabelValues).
type keyStats struct {
	domain, key                       string // the labels
	total, over, near, within, shadow prometheus.Counter
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
		over:             vec("over_limit", "Hits above the limit, answered OVER_LIMIT (shadow_mode rules included)."),
		near:             vec("near_limit", "Hits between the near-limit ratio of the limit and the limit."),
		within:           vec("within_limit", "Hits admitted."),
		shadow:           vec("shadow_mode", "Hits over the limit answered OK by the rule's shadow_mode."),
		globalShadowMode: prometheus.NewCounter(prometheus.CounterOpts{Name: "ratelimit_service_global_shadow_mode", Help: "Requests over the limit answered OK by the global shadow mode."}),
		badRequests:      prometheus.NewCounter(prometheus.CounterOpts{Name: "poplimit_rls_invalid_requests_total", Help: "ShouldRateLimit requests refused with INVALID_ARGUMENT."}),
		reloads:          prometheus.NewCounterVec(prometheus.CounterOpts{Name: "poplimit_rls_config_loads_total", Help: "Config loads by result (ok, error; an error keeps the previous config)."}, []string{"result"}),
		keys:             map[statsID]*keyStats{},
		maxKeys:          orDefault(maxKeys, 10000),
	}
	for _, c := range []prometheus.Collector{s.total, s.over, s.near, s.within, s.shadow, s.globalShadowMode, s.badRequests, s.reloads} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return s, nil
}

func (s *Stats) descriptor(domain, statsKey string, hits int64, h hitCounts) {
	if s == nil {
		return
	}
	s.mu.Lock()
	ks := s.keys[statsID{domain, statsKey}]
	if ks == nil {
		ks = s.newKey(domain, statsKey)
	}
	// A series appears once it counts, as envoyproxy/ratelimit's stats
	// (total_hits whatever the hits, the others when they add).
	total := statCounter(&ks.total, s.total, ks)
	var cs [4]prometheus.Counter
	for i, c := range []struct {
		n   uint64
		p   *prometheus.Counter
		vec *prometheus.CounterVec
	}{{h.within, &ks.within, s.within}, {h.near, &ks.near, s.near}, {h.over, &ks.over, s.over}, {h.shadow, &ks.shadow, s.shadow}} {
		if c.n > 0 {
			cs[i] = statCounter(c.p, c.vec, ks)
		}
	}
	s.mu.Unlock()
	total.Add(float64(hits))
	for i, n := range [4]uint64{h.within, h.near, h.over, h.shadow} {
		if cs[i] != nil {
			cs[i].Add(float64(n))
		}
	}
}

// newKey records the pair (domain, statsKey): labelled by its own key
// (statsKey after "domain.") while fewer than maxKeys are, else by
// overflowKey. s.mu held.
func (s *Stats) newKey(domain, statsKey string) *keyStats {
	key := strings.TrimPrefix(statsKey, domain+".")
	if s.labelled >= s.maxKeys {
		key = overflowKey
	} else {
		s.labelled++
	}
	ks := &keyStats{domain: domain, key: key}
	if key == overflowKey {
		// One set of counters per domain's overflow, not one per key.
		o := statsID{domain, "\x00" + overflowKey}
		if s.keys[o] == nil {
			s.keys[o] = ks
		}
		return s.keys[o]
	}
	s.keys[statsID{domain, statsKey}] = ks
	return ks
}

// statCounter is *c, resolved from vec on first use. s.mu held.
func statCounter(c *prometheus.Counter, vec *prometheus.CounterVec, ks *keyStats) prometheus.Counter {
	if *c == nil {
		*c = vec.WithLabelValues(ks.domain, ks.key)
	}
	return *c
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
