package proxy

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// poolSnap and shardSnap are what the metrics and the Twemproxy stats are
// made of, read at scrape time from the atomic counters of the Servers and
// Routers (nothing is recorded for metrics on the request path beyond
// those counters).
type poolSnap struct {
	name                  string
	clientConns           int64
	totalConns            uint64
	rejected, idled, slow uint64
	protocolErrs, srvErrs uint64
	maxClients            int
	draining              int
	shards                []shardSnap
	liveShards, allShards int
	serverConnsConfigured int
	fragments             uint64 // summed over the shards
	acceptErrs            [len(acceptReasons)]uint64
}

type shardSnap struct {
	label, addr string
	conns       int // open connections, or configured when unknown
	live        bool
	failures    int // consecutive failed calls now (timeouts, refused, ...)
	ejectedAt   time.Time
	inFlight    uint64
	t           shardTotals
	w           BackendStats // zero for backends without Stats
}

// snapshot reads every pool's counters; totals include Routers replaced by
// reloads (draining or closed), so counters never go back.
func (p *Proxy) snapshot() []poolSnap {
	p.mu.Lock()
	pools := append([]*livePool(nil), p.pools...)
	p.mu.Unlock()
	out := make([]poolSnap, 0, len(pools))
	for _, lp := range pools {
		lp.mu.Lock()
		rt := lp.srv.Router()
		ps := poolSnap{
			name:         lp.spec.Name,
			clientConns:  lp.srv.st.currConns.Load(),
			totalConns:   lp.srv.st.totalConns.Load(),
			rejected:     lp.srv.cl.rejected.Load(),
			idled:        lp.srv.cl.idled.Load(),
			slow:         lp.srv.cl.slow.Load(),
			protocolErrs: lp.srv.st.protocolErrors.Load(),
			srvErrs:      lp.srv.st.serverErrors.Load(),
			maxClients:   int(lp.srv.cl.max.Load()),
			allShards:    rt.Len(),
			draining:     len(lp.draining),
			acceptErrs:   lp.srv.acc.acceptErrors(),
		}
		ps.serverConnsConfigured = max(lp.spec.ServerConnections, 1)
		seen := make(map[string]bool, rt.Len())
		for i, sv := range rt.m.Servers() {
			label := sv.Label()
			if seen[label] { // two servers with one address: keep series apart
				label += "#" + strconv.Itoa(i)
			}
			seen[label] = true
			ss := shardSnap{label: label, addr: sv.Addr, live: rt.m.Live(i), conns: ps.serverConnsConfigured}
			if oc, ok := rt.backends[i].(openConner); ok {
				ss.conns = oc.OpenConns()
			}
			hs := rt.m.Health(i).Stats()
			ss.ejectedAt, ss.failures = hs.EjectedAt, hs.Failures
			ss.t = lp.retired[label]
			cur := rt.totals(i)
			ss.t.add(cur)
			ss.inFlight = cur.requests - cur.lat.count()
			ss.w = cur.wire // queue gauges: live Routers only
			for old := range lp.draining {
				for j, osv := range old.m.Servers() {
					if osv.Label() == label {
						ot := old.totals(j)
						ss.t.add(ot)
						ss.inFlight += ot.requests - ot.lat.count()
						ss.w.add(ot.wire)
					}
				}
			}
			// Counters include the closed Routers too, so they never go back.
			ss.w.RequestBytes, ss.w.ResponseBytes, ss.w.ServerEOF = ss.t.wire.RequestBytes, ss.t.wire.ResponseBytes, ss.t.wire.ServerEOF
			ps.fragments += ss.t.fragments
			if ss.live {
				ps.liveShards++
			}
			ps.shards = append(ps.shards, ss)
		}
		// The pool's fragments also count shards reloads removed.
		for label, t := range lp.retired {
			if !seen[label] {
				ps.fragments += t.fragments
			}
		}
		for old := range lp.draining {
			for j, osv := range old.m.Servers() {
				if !seen[osv.Label()] {
					ps.fragments += old.stats[j].fragments.Load()
				}
			}
		}
		lp.mu.Unlock()
		out = append(out, ps)
	}
	return out
}

// openConner is implemented by backends that can report their open
// connections (Pool); metrics fall back to the configured
// server_connections.
type openConner interface {
	OpenConns() int
}

// statser is implemented by backends that count their wire bytes and
// queues (Pool); the stats of other backends (LocalBackend) are 0.
type statser interface {
	Stats() BackendStats
}

// backendStats returns shard i's backend stats, zero when it has none.
func (r *Router) backendStats(i int) BackendStats {
	if s, ok := r.backends[i].(statser); ok {
		return s.Stats()
	}
	return BackendStats{}
}

// BackendStats are a backend's wire counters and queue gauges, with
// nutcracker 0.5's meanings for its server stats of the same names.
// Counters only grow; gauges are sampled without stopping traffic, so a
// queue moving between stages may be missed or (for an instant) seen in
// both.
type BackendStats struct {
	// RequestBytes (request_bytes) is the bytes of requests sent to the
	// shard: their wire form, all connections.
	RequestBytes uint64
	// ResponseBytes (response_bytes) is the bytes of complete replies read
	// from the shard and matched to requests.
	ResponseBytes uint64
	// ServerEOF (server_eof) is the connections the shard closed: end of
	// stream on read (a connection the proxy closed does not count).
	ServerEOF uint64
	// InQueue (in_queue) is the requests accepted by Do and not yet
	// handed to a connection, InQueueBytes (in_queue_bytes) their wire
	// bytes.
	InQueue, InQueueBytes uint64
	// OutQueue (out_queue) is the requests handed to a connection
	// (written, or in the write under way) and waiting for their reply,
	// OutQueueBytes (out_queue_bytes) their wire bytes.
	OutQueue, OutQueueBytes uint64
}

func (s *BackendStats) add(o BackendStats) {
	s.RequestBytes += o.RequestBytes
	s.ResponseBytes += o.ResponseBytes
	s.ServerEOF += o.ServerEOF
	s.InQueue += o.InQueue
	s.InQueueBytes += o.InQueueBytes
	s.OutQueue += o.OutQueue
	s.OutQueueBytes += o.OutQueueBytes
}

var (
	_ statser    = (*Pool)(nil)
	_ openConner = (*Pool)(nil)
)

// Stats returns the pool's wire counters and queue gauges, summed over its
// connections. A request is in the in-queue from Do until its connection's
// writer hands it, with the batch it is written in, to the connection
// (before the write system call), then in the out-queue until its reply is
// read or it fails. request_bytes counts at that hand-over, like
// nutcracker's when it forwards: a write that fails later does not
// subtract. Stats takes each connection's mutex briefly; the request path
// pays one atomic add per counter per batch, none per request.
func (p *Pool) Stats() BackendStats {
	var st BackendStats
	for _, pc := range p.conns {
		// done before sent: sent is counted first, so out ≥ 0.
		done, doneBytes := pc.doneCalls.Load(), pc.doneBytes.Load()
		pc.mu.Lock()
		st.InQueue += uint64(len(pc.queued) + pc.dialing)
		st.InQueueBytes += uint64(len(pc.wbuf) - pc.carry + pc.dialingBytes)
		pc.mu.Unlock()
		sent, sentBytes := pc.sentCalls.Load(), pc.sentBytes.Load()
		st.RequestBytes += sentBytes
		if sent > done {
			st.OutQueue += sent - done
		}
		if sentBytes > doneBytes {
			st.OutQueueBytes += sentBytes - doneBytes
		}
		st.ResponseBytes += pc.responseBytes.Load()
		st.ServerEOF += pc.eof.Load()
	}
	return st
}

// OpenConns returns the number of connections the pool has open now (0
// before the first request and while redialling).
func (p *Pool) OpenConns() int {
	n := 0
	for _, pc := range p.conns {
		pc.mu.Lock()
		if pc.sess != nil && !pc.sess.broken.Load() {
			n++
		}
		pc.mu.Unlock()
	}
	return n
}

var (
	shardLabels = []string{"pool", "shard"}
	poolLabels  = []string{"pool"}

	descShardRequests = prometheus.NewDesc("mcproxy_shard_requests_total", "Calls sent to the shard (a multi-key get spanning shards is one call per shard).", shardLabels, nil)
	descShardErrors   = prometheus.NewDesc("mcproxy_shard_errors_total", "Calls to the shard that failed (timeout, refused, broken connection, closed, ejected); the client got SERVER_ERROR.", shardLabels, nil)
	descShardTimeouts = prometheus.NewDesc("mcproxy_shard_timeouts_total", "Calls to the shard that timed out (part of errors).", shardLabels, nil)
	descShardEjects   = prometheus.NewDesc("mcproxy_shard_ejections_total", "Times the shard was ejected from the ring (auto_eject_hosts).", shardLabels, nil)
	descShardLive     = prometheus.NewDesc("mcproxy_shard_live", "1 while the shard is on the ring, 0 while ejected.", shardLabels, nil)
	descShardInFlight = prometheus.NewDesc("mcproxy_shard_in_flight", "Calls sent to the shard and not answered yet.", shardLabels, nil)
	descShardReqBytes = prometheus.NewDesc("mcproxy_shard_request_bytes_total", "Wire bytes of the requests sent to the shard (request_bytes); 0 for in-process shards.", shardLabels, nil)
	descShardRspBytes = prometheus.NewDesc("mcproxy_shard_response_bytes_total", "Bytes of replies read from the shard (response_bytes); 0 for in-process shards.", shardLabels, nil)
	descShardEOF      = prometheus.NewDesc("mcproxy_shard_server_eof_total", "Connections the shard closed, end of stream on read (server_eof).", shardLabels, nil)
	descShardInQ      = prometheus.NewDesc("mcproxy_shard_in_queue", "Requests queued for the shard, not sent yet (in_queue).", shardLabels, nil)
	descShardInQBytes = prometheus.NewDesc("mcproxy_shard_in_queue_bytes", "Wire bytes of the requests queued for the shard, not sent yet (in_queue_bytes).", shardLabels, nil)
	descShardOutQ     = prometheus.NewDesc("mcproxy_shard_out_queue", "Requests sent to the shard, waiting for their reply (out_queue).", shardLabels, nil)
	descShardOutQByte = prometheus.NewDesc("mcproxy_shard_out_queue_bytes", "Wire bytes of the requests sent to the shard, waiting for their reply (out_queue_bytes).", shardLabels, nil)
	descShardConns    = prometheus.NewDesc("mcproxy_shard_server_connections", "Open connections to the shard when its backend reports them (OpenConns), else server_connections as configured.", shardLabels, nil)
	descShardLatency  = prometheus.NewDesc("mcproxy_shard_latency_seconds", "Time from reading a request to its shard reply being ready, per call.", shardLabels, nil)
	descClientConns   = prometheus.NewDesc("mcproxy_client_connections", "Open client connections.", poolLabels, nil)
	descClientTotal   = prometheus.NewDesc("mcproxy_client_connections_total", "Client connections accepted.", poolLabels, nil)
	descClientReject  = prometheus.NewDesc("mcproxy_client_rejected_total", "Client connections refused over client_connections.", poolLabels, nil)
	descClientIdle    = prometheus.NewDesc("mcproxy_client_idle_closed_total", "Client connections closed by the idle timeout.", poolLabels, nil)
	descClientSlow    = prometheus.NewDesc("mcproxy_client_slow_closed_total", "Client connections closed because a request was not complete within the request timeout (--client-request-timeout) of its first byte.", poolLabels, nil)
	descClientMax     = prometheus.NewDesc("mcproxy_client_connections_limit", "client_connections (0: no limit).", poolLabels, nil)
	descProtoErrors   = prometheus.NewDesc("mcproxy_protocol_errors_total", "Requests answered ERROR/CLIENT_ERROR, or that closed the connection.", poolLabels, nil)
	descServerErrors  = prometheus.NewDesc("mcproxy_server_errors_total", "SERVER_ERROR replies sent to clients.", poolLabels, nil)
	descDraining      = prometheus.NewDesc("mcproxy_pool_draining_routers", "Shard sets replaced by a reload that still finish their in-flight requests.", poolLabels, nil)
	descLiveShards    = prometheus.NewDesc("mcproxy_pool_live_shards", "Shards on the ring.", poolLabels, nil)
	descFragments     = prometheus.NewDesc("mcproxy_pool_fragments_total", "Sub-requests created by splitting multi-key gets over shards: k per get spanning k shards (fragments).", poolLabels, nil)
	descReloads       = prometheus.NewDesc("mcproxy_reloads_total", "Configuration loads by result (ok, error).", []string{"result"}, nil)
	descReloadOK      = prometheus.NewDesc("mcproxy_config_last_reload_successful", "1 if the last configuration load succeeded.", nil, nil)
	descAcceptErrors  = prometheus.NewDesc("mcproxy_accept_errors_total", "Temporary accept failures by reason (emfile, enfile: out of file descriptors; enobufs, enomem, timeout, other_temporary); the listener backs off and accepts again.", []string{"pool", "reason"}, nil)
	descUptime        = prometheus.NewDesc("mcproxy_uptime_seconds", "Seconds since the proxy started.", nil, nil)
)

// Describe implements prometheus.Collector.
func (p *Proxy) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descShardRequests, descShardErrors, descShardTimeouts,
		descShardEjects, descShardLive, descShardInFlight, descShardConns, descShardLatency,
		descShardReqBytes, descShardRspBytes, descShardEOF, descShardInQ, descShardInQBytes,
		descShardOutQ, descShardOutQByte, descFragments,
		descClientConns, descClientTotal, descClientReject, descClientIdle, descClientSlow, descClientMax,
		descProtoErrors, descServerErrors, descLiveShards, descDraining, descReloads, descReloadOK, descUptime, descAcceptErrors} {
		ch <- d
	}
}

// Collect implements prometheus.Collector: it reads the counters at scrape
// time (see snapshot). Register the Proxy on an explicit registry.
func (p *Proxy) Collect(ch chan<- prometheus.Metric) {
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	for _, ps := range p.snapshot() {
		counter(descClientTotal, ps.totalConns, ps.name)
		counter(descClientReject, ps.rejected, ps.name)
		counter(descClientIdle, ps.idled, ps.name)
		counter(descClientSlow, ps.slow, ps.name)
		counter(descProtoErrors, ps.protocolErrs, ps.name)
		counter(descServerErrors, ps.srvErrs, ps.name)
		gauge(descClientConns, float64(ps.clientConns), ps.name)
		gauge(descClientMax, float64(ps.maxClients), ps.name)
		gauge(descLiveShards, float64(ps.liveShards), ps.name)
		gauge(descDraining, float64(ps.draining), ps.name)
		counter(descFragments, ps.fragments, ps.name)
		for i, v := range ps.acceptErrs {
			counter(descAcceptErrors, v, ps.name, acceptReasons[i])
		}
		for _, ss := range ps.shards {
			l := []string{ps.name, ss.label}
			counter(descShardRequests, ss.t.requests, l...)
			counter(descShardErrors, ss.t.errors, l...)
			counter(descShardTimeouts, ss.t.timeouts, l...)
			counter(descShardEjects, ss.t.ejections, l...)
			live := 0.0
			if ss.live {
				live = 1
			}
			gauge(descShardLive, live, l...)
			gauge(descShardInFlight, float64(ss.inFlight), l...)
			gauge(descShardConns, float64(ss.conns), l...)
			counter(descShardReqBytes, ss.w.RequestBytes, l...)
			counter(descShardRspBytes, ss.w.ResponseBytes, l...)
			counter(descShardEOF, ss.w.ServerEOF, l...)
			gauge(descShardInQ, float64(ss.w.InQueue), l...)
			gauge(descShardInQBytes, float64(ss.w.InQueueBytes), l...)
			gauge(descShardOutQ, float64(ss.w.OutQueue), l...)
			gauge(descShardOutQByte, float64(ss.w.OutQueueBytes), l...)
			buckets := make(map[float64]uint64, latBuckets-1)
			var cum uint64
			for k := 0; k < latBuckets-1; k++ {
				cum += ss.t.lat.b[k]
				buckets[latencyUpperBound(k)] = cum
			}
			ch <- prometheus.MustNewConstHistogram(descShardLatency, ss.t.lat.count(),
				float64(ss.t.lat.sumNs)/1e9, buckets, l...)
		}
	}
	p.mu.Lock()
	ok, bad, last := p.reloads, p.reloadErrors, p.lastReloadOK
	p.mu.Unlock()
	counter(descReloads, ok, "ok")
	counter(descReloads, bad, "error")
	v := 0.0
	if last {
		v = 1
	}
	gauge(descReloadOK, v)
	gauge(descUptime, p.now().Sub(p.started).Seconds())
}

var _ prometheus.Collector = (*Proxy)(nil)

// Healthy reports whether /healthz answers 200 (see Health: status ok or
// degraded), with the status, or why it is failing.
func (p *Proxy) Healthy() (bool, string) {
	h := p.Health()
	if h.Status != HealthFailing {
		return true, h.Status
	}
	if len(h.Pools) == 0 {
		return false, "no pools"
	}
	for _, ps := range h.Pools {
		if ps.Status == HealthFailing {
			return false, "pool " + strconv.Quote(ps.Name) + " has no live shard"
		}
	}
	return false, h.Status
}
