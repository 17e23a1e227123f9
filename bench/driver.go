package bench

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// Outcome is what a worker answered for one request.
type Outcome uint8

const (
	// Admitted: 2xx, the request reached the upstream.
	Admitted Outcome = iota
	// Rejected: 429, over the limit.
	Rejected
	// Unavailable: 503, fail-closed while the store is down.
	Unavailable
	// Failed: a transport error or any other status.
	Failed
	// NumOutcomes is the number of outcomes, the size of a per-outcome array.
	NumOutcomes
)

var outcomeNames = [...]string{"admitted", "rejected", "unavailable", "failed"}

// String returns the outcome's name.
func (o Outcome) String() string { return outcomeNames[o] }

// Target decides one request: an edge worker over HTTP or an in-process
// worker. worker picks which of the PoP's workers serves it (the load
// balancer spreads a client over all of them). Implementations are safe for
// concurrent use.
type Target interface {
	Do(ctx context.Context, worker int, c *Client, r *Route) Outcome
	// Workers is the number of workers requests are spread over.
	Workers() int
}

// traceRecord is the fate of one request of a replay.
type traceRecord struct {
	// Sent is when the request was sent, from the start of the replay.
	Sent    time.Duration
	Latency time.Duration
	Client  int32
	// Worker is the index passed to Target.Do.
	Worker  int32
	Outcome Outcome
}

// Replay is the result of ReplayTrace.
type Replay struct {
	Trace   *Trace
	Records []traceRecord // sorted by Sent
	Latency *Latency
	Elapsed time.Duration
	// Lag is the largest delay between a request's due time and its send
	// (the load generator falling behind).
	Lag time.Duration
}

// ReplayConfig tunes ReplayTrace. Zero means default.
type ReplayConfig struct {
	// Concurrency is the number of requests in flight at most; default 64.
	Concurrency int
	// Progress, when set, is called with the number of requests finished
	// (at most every 100ms and at the end).
	Progress func(done, total int)
	// Hook, when set, is called with the elapsed replay time every 50ms
	// from a separate goroutine (fault scripts use it).
	Hook func(elapsed time.Duration)
}

// ReplayTrace sends the trace's requests at their times (open loop: a slow
// answer does not delay the next request, up to Concurrency in flight) and
// records every outcome. It stops early when ctx ends.
func ReplayTrace(ctx context.Context, tr *Trace, target Target, cfg ReplayConfig) *Replay {
	conc := cfg.Concurrency
	if conc <= 0 {
		conc = 64
	}
	type job struct {
		i    int
		due  time.Duration
		sent time.Duration
	}
	jobs := make(chan job, conc)
	recs := make([]traceRecord, len(tr.Requests))
	sent := make([]bool, len(tr.Requests))
	hists := make([]*Latency, conc)
	var finished atomic.Int64
	start := time.Now()
	var wg sync.WaitGroup
	for w := 0; w < conc; w++ {
		hists[w] = NewLatency()
		wg.Add(1)
		go func(h *Latency) {
			defer wg.Done()
			for j := range jobs {
				req := tr.Requests[j.i]
				c := &tr.Clients[req.Client]
				t0 := time.Now()
				w := j.i % target.Workers()
				o := target.Do(ctx, w, c, &tr.Routes[c.Route])
				lat := time.Since(t0)
				h.Record(lat)
				recs[j.i] = traceRecord{Sent: j.sent, Latency: lat, Client: req.Client, Worker: int32(w), Outcome: o}
				sent[j.i] = true
				finished.Add(1)
			}
		}(hists[w])
	}
	stop := make(chan struct{})
	var aux sync.WaitGroup
	if cfg.Progress != nil || cfg.Hook != nil {
		aux.Add(1)
		go func() {
			defer aux.Done()
			tick := time.NewTicker(50 * time.Millisecond)
			defer tick.Stop()
			n := 0
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
					if cfg.Hook != nil {
						cfg.Hook(time.Since(start))
					}
					if n++; cfg.Progress != nil && n%2 == 0 {
						cfg.Progress(int(finished.Load()), len(tr.Requests))
					}
				}
			}
		}()
	}
	var lag time.Duration
	timer := time.NewTimer(time.Hour)
dispatch:
	for i, req := range tr.Requests {
		if wait := req.At - time.Since(start); wait > time.Millisecond {
			timer.Reset(wait)
			select {
			case <-timer.C:
			case <-ctx.Done():
				break dispatch
			}
		}
		now := time.Since(start)
		lag = max(lag, now-req.At)
		select {
		case jobs <- job{i: i, due: req.At, sent: now}:
		case <-ctx.Done():
			break dispatch
		}
	}
	timer.Stop()
	close(jobs)
	wg.Wait()
	close(stop)
	aux.Wait()
	if cfg.Progress != nil {
		cfg.Progress(int(finished.Load()), len(tr.Requests))
	}
	out := &Replay{Trace: tr, Latency: NewLatency(), Elapsed: time.Since(start), Lag: lag}
	for _, h := range hists {
		out.Latency.Merge(h)
	}
	out.Records = make([]traceRecord, 0, finished.Load())
	for i, ok := range sent {
		if ok {
			out.Records = append(out.Records, recs[i])
		}
	}
	return out
}

// ClientStats sums the outcomes of one client.
type clientStats struct {
	ID       string             `json:"id"`
	Kind     Kind               `json:"kind"`
	Route    string             `json:"route"`
	Limit    float64            `json:"limit_per_s"`
	Multiple float64            `json:"offered_multiple"`
	Offered  int64              `json:"offered"`
	Outcomes [NumOutcomes]int64 `json:"-"`
	// Admitted, Rejected, Unavailable, Failed mirror Outcomes for JSON.
	Admitted    int64 `json:"admitted"`
	Rejected    int64 `json:"rejected"`
	Unavailable int64 `json:"unavailable"`
	Failed      int64 `json:"failed"`
	// AdmittedRate is admitted per second over the replay.
	AdmittedRate float64 `json:"admitted_per_s"`
	// OfferedRate is offered per second over the replay.
	OfferedRate float64 `json:"offered_per_s"`
}

// PerClient sums the replay by client.
func (r *Replay) perClient() []clientStats {
	out := make([]clientStats, len(r.Trace.Clients))
	secs := r.Trace.Duration.Seconds()
	for i, c := range r.Trace.Clients {
		rt := r.Trace.Routes[c.Route]
		out[i] = clientStats{ID: c.ID, Kind: c.Kind, Route: rt.Path, Limit: rt.Rate(), Multiple: c.Multiple}
	}
	for _, rec := range r.Records {
		s := &out[rec.Client]
		s.Offered++
		s.Outcomes[rec.Outcome]++
	}
	for i := range out {
		s := &out[i]
		s.Admitted, s.Rejected, s.Unavailable, s.Failed = s.Outcomes[Admitted], s.Outcomes[Rejected], s.Outcomes[Unavailable], s.Outcomes[Failed]
		s.AdmittedRate = float64(s.Admitted) / secs
		s.OfferedRate = float64(s.Offered) / secs
	}
	return out
}

// Totals sums outcomes over every request.
func (r *Replay) totals() [NumOutcomes]int64 {
	var t [NumOutcomes]int64
	for _, rec := range r.Records {
		t[rec.Outcome]++
	}
	return t
}

// Series buckets outcomes by send time: out[b][o] counts outcome o of the
// requests sent in [b·bucket, (b+1)·bucket). Only requests of clients for
// which keep returns true count (nil keeps all).
func (r *Replay) Series(bucket time.Duration, keep func(client int32) bool) [][NumOutcomes]int64 {
	n := max(1, int((r.Trace.Duration+bucket-1)/bucket))
	out := make([][NumOutcomes]int64, n)
	for _, rec := range r.Records {
		if keep != nil && !keep(rec.Client) {
			continue
		}
		b := int(rec.Sent / bucket)
		if b >= n {
			b = n - 1
		}
		out[b][rec.Outcome]++
	}
	return out
}
