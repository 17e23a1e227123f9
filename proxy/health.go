package proxy

// Health states of a shard, a pool and the proxy (/healthz).
const (
	// HealthOK: a shard on the ring whose last call did not fail; a pool
	// or proxy whose every shard is ok.
	HealthOK = "ok"
	// HealthDegraded: a pool (or the proxy) with a shard that is ejected
	// or failing, and at least one live shard in every pool.
	HealthDegraded = "degraded"
	// HealthFailing: a shard on the ring whose recent calls failed
	// (timeouts, refused, broken connections) with no success since; a
	// pool with no live shard; a proxy with such a pool, or no pool.
	HealthFailing = "failing"
	// HealthEjected: a shard taken off the ring (auto_eject_hosts).
	HealthEjected = "ejected"
)

// HealthReport is what /healthz answers, as JSON.
type HealthReport struct {
	Status string       `json:"status"` // ok, degraded or failing
	Pools  []PoolHealth `json:"pools"`
}

// PoolHealth is one pool's health.
type PoolHealth struct {
	Name   string        `json:"name"`
	Status string        `json:"status"`
	Live   int           `json:"live_shards"` // shards whose status is ok
	Shards []ShardHealth `json:"shards"`
}

// ShardHealth is one shard's health. ConsecutiveFailures counts the calls
// that failed since the last success; a shard nobody sends requests to
// keeps its last state (the proxy does not probe shards on the ring).
type ShardHealth struct {
	Name                string `json:"name"`
	Addr                string `json:"addr"`
	Status              string `json:"status"` // ok, failing or ejected
	ConsecutiveFailures int    `json:"consecutive_failures"`
	InFlight            uint64 `json:"in_flight"`
}

// Health reports every pool's shards: a pool is failing when none of its
// shards is ok, degraded when some are not; the proxy takes its worst
// pool's status (failing too with no pool).
func (p *Proxy) Health() HealthReport {
	snaps := p.snapshot()
	out := HealthReport{Status: HealthOK, Pools: make([]PoolHealth, 0, len(snaps))}
	if len(snaps) == 0 {
		out.Status = HealthFailing
	}
	for _, ps := range snaps {
		ph := PoolHealth{Name: ps.name, Shards: make([]ShardHealth, 0, len(ps.shards))}
		for _, ss := range ps.shards {
			sh := ShardHealth{Name: ss.label, Addr: ss.addr, Status: HealthOK, ConsecutiveFailures: ss.failures, InFlight: ss.inFlight}
			switch {
			case !ss.live:
				sh.Status = HealthEjected
			case ss.failures > 0:
				sh.Status = HealthFailing
			default:
				ph.Live++
			}
			ph.Shards = append(ph.Shards, sh)
		}
		switch {
		case ph.Live == 0:
			ph.Status = HealthFailing
		case ph.Live < len(ph.Shards):
			ph.Status = HealthDegraded
		default:
			ph.Status = HealthOK
		}
		out.Status = worseHealth(out.Status, ph.Status)
		out.Pools = append(out.Pools, ph)
	}
	return out
}

// worseHealth returns the worse of two of ok, degraded and failing.
func worseHealth(a, b string) string {
	rank := func(s string) int {
		switch s {
		case HealthFailing:
			return 2
		case HealthDegraded:
			return 1
		}
		return 0
	}
	if rank(b) > rank(a) {
		return b
	}
	return a
}
