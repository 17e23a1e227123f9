// Package global enforces one limit across PoPs (a policy's "scope:
// global" limits) without a wide-area round trip on any request.
//
// # Model
//
// The global count lives in a home region's memcached (Config.Home, behind
// its mcproxy): one counter per identity and fixed, epoch-aligned window,
// holding the units claimed by all PoPs in that window. Each PoP keeps a
// pool of tokens per identity and window in its own memcached
// (Config.Local, the PoP's mcproxy), so every worker of the PoP draws from
// one pool:
//
//   - a decision is one local decr on the pool (an offset counter: the
//     pool holds poolBase + tokens, so memcached's decr never clamps and an
//     overdraw is seen and refunded); a request that finds tokens never
//     waits on the home store;
//   - when the pool falls below a low-water mark (the PoP's arrival rate ×
//     1.5 refill latencies), one worker of the PoP, elected per key and
//     window with a memcached add lock (a deadline value, released by
//     compare-and-swap, abandoned after Config.LockTTL), claims the next
//     batch with one incr on the home counter and credits the pool;
//   - the batch covers the PoP's observed arrival rate over
//     max(Config.Horizon, 1.5 refill latencies): a PoP with 1% of the traffic
//     claims 1% of the batches' volume; a worker estimates its PoP's rate as
//     its own arrival rate × Config.Workers;
//   - a claim that overshoots the limit is granted only what was left
//     (limit − prior claims), and the window is then exhausted for the PoP:
//     its lock is held until the window ends, so no more claims are made;
//   - a request that finds the pool empty waits, at most Config.Wait (and
//     until shortly before its context's deadline), for a claim of its
//     worker: the window's
//     first claim (a batch, as above) or claims of exactly the units
//     waiting, which every waiting request shares (one claim in flight
//     covers them all; see waitq) and whose grant is handed to the
//     waiting requests first. It is rejected only once the window's count
//     is known to be used up (Retry-After: the window's end) and no claim
//     of the PoP's workers is in flight for it (a count in the PoP's
//     store: their grants may still reach the pool, which it retries
//     until its wait runs out); a claim that
//     fails hands it to the Fallback. A wait that runs out while the home
//     store is up admits it on the claim it waits for (it stays queued: a
//     grant pays its units, or the pool once the queue is woken), within
//     the room this worker knows the window has, (limit − the home count
//     it last read) ÷ (PoPs × Workers) units lent and unpaid at a time;
//     past that room the pool, then the Fallback without its share,
//     decides. A key new to a worker thus costs its first request one home
//     round trip;
//   - before a window ends (2 refill latencies + 100ms ahead) the next
//     window's pool is claimed for every key active in it (prefetch), so
//     steady traffic does not wait at a boundary;
//   - Config.Overdraft units per PoP and window may instead be admitted at
//     once, without waiting, on an empty pool;
//   - tokens left in a pool when its window ends are not returned: the
//     window is over, they expire with the pool's TTL (three windows) and are
//     counted as expired (under-admission, never over).
//
// A rejection issued while the home count this worker last read for the
// window is below the limit is counted as a false refusal
// (poplimit_global_false_refusals_total).
//
// # Home store unreachable
//
// A failed claim marks the home store down (Home.Status, metrics). The PoP
// keeps serving what its pool holds (its last allocation); when that runs
// out the Fallback decides: FallbackShare (the policy's local fail mode)
// credits the pool once per window with share − credited, share = limit ÷
// Config.PoPs and credited = what the home store granted the PoP in that
// window, and records it as a debt that the next successful claim of the
// same window adds to the home counter; FallbackOpen admits; FallbackClosed
// rejects. A request whose wait for a claim runs out (Config.Wait) while
// the store is up is lent its units under FallbackShare and FallbackOpen
// (see above) and rejected under FallbackClosed: a slow home store never
// gives a PoP its share on top of its grants. Claims are
// retried every Config.RetryEvery per worker and key;
// the first success marks the store up again, without restart.
//
// # Bound
//
// Every unit admitted from a pool or handed to a waiting request was
// granted by the home counter of its window or, while the home store is
// down (a claim failed: the PoP counts as down in that window), by the
// share, or was lent to a request whose wait ran out and paid by a later
// grant or the pool; lent units left unpaid (their claims fell short or
// failed) are at most the lending room, S per PoP. With P PoPs, D =
// Config.Overdraft, S = limit ÷ P, L the limit, the units admitted in one
// window w (each PoP reading its own clock) satisfy
//
//	admitted(w) ≤ L + P·D + Σ_{p down or unpaid in w} S + Σ_p rate_p·|skew_p|
//
// where the skew term counts the tokens a PoP whose clock is off by skew_p
// spends in a neighbouring window (windows are epoch-aligned on each PoP's
// clock). With the home store answering within the wait and D = 0 (the
// default) that is admitted(w) ≤ L + Σ_p rate_p·|skew_p|: the tokens
// outstanding in pools are part of L, never in excess of it; answering
// later, the excess is the lent units whose claims fell short. A worker killed mid-refill loses
// the claimed batch (under-admission), blocks refills of its key for at
// most LockTTL and leaves its claim counted in flight (refusals of that
// window then wait out their wait); it never over-admits. Under-admission in a window whose
// demand exceeds L is at most the tokens left in pools when it ends,
// Σ_p rate_p·(Horizon + 1.5·latency).
//
// The bound is this Allower's. A pop.Limiter also decides by its
// in-process budget when its own store call does not return within the
// store deadline (reason store_slow or store_busy) or under fail_mode
// local with the breaker open: that budget is limit ÷ (workers × PoPs)
// per worker and window (pop.Config.PoPs), so those decisions add at most
// L more to a window in which every worker of every PoP fell back all the
// time, and nothing when the stores answer in time.
//
// Only fixed windows are supported (ErrAlgorithm otherwise).
package global

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/poplimit/poplimit/counter"
)

// Errors.
var (
	// ErrConfig: a Config field is missing or out of range.
	ErrConfig = errors.New("global: bad configuration")
	// ErrAlgorithm: a global limit must be a fixed window.
	ErrAlgorithm = errors.New("global: a global limit counts fixed windows (algorithm: fixed_window)")
)

// poolBase is the offset a pool counter holds besides its tokens: decr
// then never reaches memcached's floor of 0, so a decr that overdraws
// shows a value below poolBase and is refunded.
const poolBase = 1 << 40

// Fallback is what a PoP does once its pool is empty while the home store
// is unreachable.
type Fallback int

const (
	// FallbackShare credits limit ÷ PoPs per window, minus what the home
	// store already granted the PoP in that window (default).
	FallbackShare Fallback = iota
	// FallbackOpen admits.
	FallbackOpen
	// FallbackClosed rejects.
	FallbackClosed
)

func (f Fallback) String() string {
	switch f {
	case FallbackOpen:
		return "open"
	case FallbackClosed:
		return "closed"
	}
	return "share"
}

// Config configures a Home. Zero means default, except Local and Home.
type Config struct {
	// Local is the PoP's store (its mcproxy): pools, locks, debts.
	// Required.
	Local counter.Store
	// Home is the home region's store: the global counters. Required. A
	// counter.Batcher (memcached.PipeStore) claims in one round trip.
	Home counter.Store
	// PoPs is the number of PoPs sharing each global limit; FallbackShare
	// credits limit ÷ PoPs. Default 1.
	PoPs int
	// Workers is the number of edge workers of this PoP; a worker's arrival
	// rate × Workers estimates the PoP's. Default 1.
	Workers int
	// Overdraft is how many units per PoP and window are admitted at
	// once, without waiting, while the pool is empty; default 0 (wait).
	// Each unit adds to the bound.
	Overdraft int64
	// Wait bounds how long a request that finds the pool empty waits for
	// the claim it needs: max(Wait, 2 refill latencies), at most
	// HomeTimeout (a claim that answers is waited for, however loaded the
	// host; the request's context may end it sooner, e.g. pop's store
	// deadline); then the Fallback decides. Default 300ms: one home round
	// trip with margin.
	Wait time.Duration
	// Horizon is how much of the PoP's arrival rate one batch covers
	// (at least 1.5 refill latencies are used); default 250ms. The
	// tokens a PoP holds, about rate × (Horizon + 1.5 latencies), are
	// what it can strand when its traffic moves away late in a window.
	Horizon time.Duration
	// LockTTL is the longest a refiller holds a key's lock (a crashed one
	// blocks its key's refills that long); default 2s.
	LockTTL time.Duration
	// HomeTimeout bounds one claim on the home store; default 1s.
	HomeTimeout time.Duration
	// RetryEvery is how often a worker retries a key's claim while the
	// home store is down; default 1s.
	RetryEvery time.Duration
	// Metrics, if not nil, receives claims, refills and decisions.
	Metrics *Metrics
	// Clock times refills (latency, lock deadlines); default time.Now.
	// Decisions use the instant passed to AllowN.
	Clock func() time.Time
}

func dur(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

// Home is one worker's connection to the global counts: it builds the
// Allower of each global limit and tracks the home store's health. Safe for
// concurrent use.
type Home struct {
	cfg   Config
	clock func() time.Time
	jobs  jobs         // refills and payments running
	lat   atomic.Int64 // smoothed refill latency, ns
	down  atomic.Bool
	since atomic.Int64 // unix ns of the last up/down change
	err   atomic.Pointer[string]
}

// NewHome checks cfg and returns a Home.
func NewHome(cfg Config) (*Home, error) {
	switch {
	case cfg.Local == nil || cfg.Home == nil:
		return nil, fmt.Errorf("%w: Local and Home stores are required", ErrConfig)
	case cfg.PoPs < 0 || cfg.Workers < 0 || cfg.Overdraft < 0 || cfg.Horizon < 0 || cfg.LockTTL < 0 || cfg.HomeTimeout < 0 || cfg.RetryEvery < 0 || cfg.Wait < 0:
		return nil, fmt.Errorf("%w: negative PoPs, Workers, Overdraft, Horizon, LockTTL, HomeTimeout, RetryEvery or Wait", ErrConfig)
	}
	cfg.PoPs = max(1, cfg.PoPs)
	cfg.Workers = max(1, cfg.Workers)
	cfg.Horizon = dur(cfg.Horizon, 250*time.Millisecond)
	cfg.LockTTL = dur(cfg.LockTTL, 2*time.Second)
	cfg.HomeTimeout = dur(cfg.HomeTimeout, time.Second)
	cfg.RetryEvery = dur(cfg.RetryEvery, time.Second)
	cfg.Wait = dur(cfg.Wait, 300*time.Millisecond)
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	h := &Home{cfg: cfg, clock: cfg.Clock}
	h.since.Store(cfg.Clock().UnixNano())
	cfg.Metrics.homeUp(true)
	return h, nil
}

// Status is the home store's health as this worker last saw it.
type Status struct {
	Up bool `json:"up"`
	// Since is when it last changed (or the Home was built).
	Since time.Time `json:"since"`
	// Err is the last claim's error while down.
	Err string `json:"error,omitempty"`
	// RefillLatency is the smoothed duration of a refill (lock, claim,
	// credit).
	RefillLatency time.Duration `json:"refill_latency"`
}

// Status reports the home store's health.
func (h *Home) Status() Status {
	s := Status{Up: !h.down.Load(), Since: time.Unix(0, h.since.Load()), RefillLatency: h.latency()}
	if e := h.err.Load(); e != nil && !s.Up {
		s.Err = *e
	}
	return s
}

// HealthReasons is Status as /healthz reasons: none while the home store
// is up.
func (h *Home) HealthReasons() []string {
	s := h.Status()
	if s.Up {
		return nil
	}
	return []string{fmt.Sprintf("global store unreachable since %s (%s): PoP enforcing its allocation, then the fallback", s.Since.UTC().Format(time.RFC3339), s.Err)}
}

// Wait waits for the refills in flight (tests, shutdown); refills that
// start later (a prefetch timer) are not waited for.
func (h *Home) Wait() { h.jobs.wait() }

// jobs counts background work; wait returns once none runs. Unlike a
// sync.WaitGroup, work may start while or after wait runs (timers do).
type jobs struct {
	mu   sync.Mutex
	n    int
	idle chan struct{} // closed while n is 0; nil before the first start
}

// start counts one job; done must follow.
func (j *jobs) start() {
	j.mu.Lock()
	if j.n == 0 {
		j.idle = make(chan struct{})
	}
	j.n++
	j.mu.Unlock()
}

// done ends one job.
func (j *jobs) done() {
	j.mu.Lock()
	if j.n--; j.n == 0 {
		close(j.idle)
	}
	j.mu.Unlock()
}

func (j *jobs) wait() {
	j.mu.Lock()
	idle := j.idle
	j.mu.Unlock()
	if idle != nil {
		<-idle
	}
}

// latency is the smoothed refill latency; 100ms before the first refill.
func (h *Home) latency() time.Duration {
	if l := h.lat.Load(); l > 0 {
		return time.Duration(l)
	}
	return 100 * time.Millisecond
}

// waitBound is how long a request waits for a claim: Config.Wait, or two
// refill latencies when claims take longer, at most one claim's timeout.
func (h *Home) waitBound() time.Duration {
	return min(max(h.cfg.Wait, 2*h.latency()), max(h.cfg.HomeTimeout, h.cfg.Wait))
}

// observe adds one refill's duration to the smoothed latency (the first
// one sets it).
func (h *Home) observe(d time.Duration) {
	h.cfg.Metrics.refillLatency(d)
	s := int64(max(d, time.Microsecond))
	if old := h.lat.Load(); old > 0 {
		s = old - old/4 + s/4
	}
	h.lat.Store(s)
}

func (h *Home) setDown(down bool, err error) {
	if err != nil {
		msg := err.Error()
		h.err.Store(&msg)
	}
	if h.down.Swap(down) != down {
		h.since.Store(h.clock().UnixNano())
		h.cfg.Metrics.homeUp(!down)
	}
}

// New returns the Allower of one global limit; fb applies once the pool is
// empty while the home store is down. The Allower shares h's stores and
// health.
func (h *Home) New(l counter.Limit, fb Fallback) (*Allower, error) {
	if err := l.Validate(); err != nil {
		return nil, err
	}
	if l.Algorithm != counter.FixedWindow {
		return nil, fmt.Errorf("%w: limit %s", ErrAlgorithm, l)
	}
	if fb < FallbackShare || fb > FallbackClosed {
		return nil, fmt.Errorf("%w: fallback %d", ErrConfig, fb)
	}
	a := &Allower{h: h, lim: l, fb: fb, wms: l.Window.Milliseconds(), share: max(1, l.Quantity/int64(h.cfg.PoPs)),
		suffix: "g" + strconv.FormatInt(l.Window.Milliseconds(), 36) + "."}
	a.m = h.cfg.Metrics.family(l.Name)
	for i := range a.shards {
		a.shards[i].m = map[string]*keyState{}
	}
	return a, nil
}

// Allower is a global limit: counter.Allower over a PoP pool refilled from
// the home store (see the package doc). Safe for concurrent use.
type Allower struct {
	h      *Home
	lim    counter.Limit
	fb     Fallback
	wms    int64 // window in ms
	share  int64 // FallbackShare's units per window
	suffix string
	m      family
	shards [16]keyShard
}

var _ counter.Allower = (*Allower)(nil)

// Limit implements counter.Allower.
func (a *Allower) Limit() counter.Limit { return a.lim }

// key is identity + "g<win>.<id>" + kind: p pool, c credited, l lock, d
// debt, o overdraft, f claims in flight (PoP store); h the global count
// (home store).
func (a *Allower) key(identity string, win int64, kind byte) string {
	return identity + a.suffix + strconv.FormatInt(win, 36) + string(kind)
}

// ttl of every item: three windows (the expired count reads a pool two
// windows back).
func (a *Allower) ttl() time.Duration { return 3 * a.lim.Window }

// AllowN implements counter.Allower: one decr on the PoP's pool (plus a
// refund when it overdraws); a low pool starts a refill in the background.
// Errors are the PoP store's. Remaining is the tokens the PoP's pool holds.
func (a *Allower) AllowN(ctx context.Context, key string, now time.Time, n int64) (counter.Result, error) {
	if n < 1 {
		return counter.Result{}, counter.ErrBadCost
	}
	win := now.UnixMilli() / a.wms
	end := time.UnixMilli((win + 1) * a.wms)
	ks := a.state(key, now, n)
	res := counter.Result{Limit: a.lim.Quantity, Reset: end.Sub(now)}
	if n > a.lim.Quantity {
		res.RetryAfter = counter.Never
		return res, nil
	}
	pk := a.key(key, win, 'p')
	v, err := a.h.cfg.Local.Decr(ctx, pk, uint64(n))
	a.m.localOps.Inc()
	have := -n
	switch {
	case err == nil:
		have = int64(v) - poolBase
	case !errors.Is(err, counter.ErrNotFound):
		return counter.Result{}, err
	}
	lat := a.h.latency()
	rate := ks.popRate(now, a.h.cfg.Workers)
	if end.Sub(now) < 2*lat+100*time.Millisecond {
		a.refill(key, ks, win+1, now, rate, true)
	} else {
		a.schedulePrefetch(key, ks, win, now, lat)
	}
	if have >= 0 {
		a.m.pool.Set(float64(have))
		if have < lowWater(rate, lat, n) {
			a.refill(key, ks, win, now, rate, false)
		}
		res.Allowed, res.Remaining = true, have
		a.m.decisions(pathPool).Inc()
		return res, nil
	}
	if err == nil {
		// Overdrawn: give the units back (best effort: a lost refund is
		// under-admission).
		_, _ = a.h.cfg.Local.Incr(ctx, pk, uint64(n))
		a.m.localOps.Inc()
	}
	a.m.pool.Set(0)
	return a.empty(ctx, key, ks, win, now, n, err != nil, res)
}

// empty decides a request that found the pool empty: it waits (at most
// Config.Wait, and until 10ms before ctx's deadline) for the claims of
// this worker, then
// takes its units from their grant or the pool; the window exhausted, it
// is rejected until the window ends; the home store down, or the wait
// over, the Fallback decides.
func (a *Allower) empty(ctx context.Context, key string, ks *keyState, win int64, now time.Time, n int64, absent bool, res counter.Result) (counter.Result, error) {
	pk := a.key(key, win, 'p')
	deadline := a.h.clock().Add(a.h.waitBound())
	if d, ok := ctx.Deadline(); ok {
		// Leave the Fallback time to decide within the request's deadline
		// (rather than let it expire mid-wait).
		deadline = minTime(deadline, d.Add(-deadlineMargin))
	}
	overdraft := a.h.cfg.Overdraft > 0
	joins := 0
	for {
		if ks.isExhausted(win) {
			return a.usedUp(ctx, key, win, n, deadline, res), nil
		}
		down := a.h.down.Load()
		if down {
			a.refill(key, ks, win, now, ks.popRate(now, a.h.cfg.Workers), false)
			switch a.fb {
			case FallbackOpen:
				res.Allowed = true
				a.m.decisions(pathOpen).Inc()
				return res, nil
			case FallbackClosed:
				res.RetryAfter = min(a.h.cfg.RetryEvery, res.Reset)
				return a.reject(ks, win, res, pathClosed), nil
			}
		}
		if overdraft {
			overdraft = false
			o, err := incrCreate(ctx, a.h.cfg.Local, a.key(key, win, 'o'), uint64(n), 0, a.ttl())
			a.m.localOps.Add(2)
			if err == nil && int64(o) <= a.h.cfg.Overdraft {
				res.Allowed = true
				a.m.decisions(pathOverdraft).Inc()
				return res, nil
			}
		}
		if down && !ks.refilling(win) {
			res.RetryAfter = min(ks.retryAfter(win, now, a.h.latency()), res.Reset)
			return a.reject(ks, win, res, pathEmpty), nil
		}
		w := a.join(key, ks, win, n, now, absent)
		if w == nil {
			if joins++; joins > 2 {
				res.RetryAfter = min(ks.retryAfter(win, now, a.h.latency()), res.Reset)
				return a.reject(ks, win, res, pathEmpty), nil
			}
			continue
		}
		t := time.NewTimer(deadline.Sub(a.h.clock()))
		timedOut := false
		select {
		case <-w.done:
		case <-t.C:
			timedOut = true
		case <-ctx.Done():
		}
		t.Stop()
		if timedOut && a.lend(ks, win, w) {
			res.Allowed = true
			a.m.decisions(pathTimeout).Inc()
			return res, nil
		}
		if a.leave(key, ks, win, w, now) {
			res.Allowed = true
			a.m.decisions(pathWaited).Inc()
			return res, nil
		}
		if err := ctx.Err(); err != nil {
			return counter.Result{}, err
		}
		if timedOut {
			return a.timedOut(ctx, key, ks, win, n, res)
		}
		// Woken without a grant: the pool may hold tokens now.
		v, err := a.h.cfg.Local.Decr(ctx, pk, uint64(n))
		a.m.localOps.Inc()
		absent = errors.Is(err, counter.ErrNotFound)
		switch {
		case err == nil && int64(v)-poolBase >= 0:
			res.Allowed, res.Remaining = true, int64(v)-poolBase
			a.m.decisions(pathWaited).Inc()
			return res, nil
		case err == nil:
			_, _ = a.h.cfg.Local.Incr(ctx, pk, uint64(n))
			a.m.localOps.Inc()
		case !errors.Is(err, counter.ErrNotFound):
			return counter.Result{}, err
		}
	}
}

// usedUp decides a request of a window whose count is used up: the
// tokens claims in flight at the PoP still credit (lastTokens), else a
// rejection until the window ends.
func (a *Allower) usedUp(ctx context.Context, key string, win, n int64, deadline time.Time, res counter.Result) counter.Result {
	if ok, left := a.lastTokens(ctx, key, win, n, deadline); ok {
		res.Allowed, res.Remaining = true, left
		a.m.decisions(pathWaited).Inc()
		return res
	}
	res.RetryAfter = res.Reset
	a.m.decisions(pathExhausted).Inc()
	return res
}

// deadlineMargin is how long before its context's deadline a waiting
// request stops waiting, for the Fallback's store calls.
const deadlineMargin = 10 * time.Millisecond

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// timedOut is the Fallback's decision for a request whose wait ran out
// with its claim still in flight and that lend did not admit:
// FallbackShare takes from the pool, after crediting the PoP's share
// (once per window) only if the home store is down, so that a slow but
// answering home store never lets a PoP admit its share on top of its
// grants.
func (a *Allower) timedOut(ctx context.Context, key string, ks *keyState, win, n int64, res counter.Result) (counter.Result, error) {
	switch a.fb {
	case FallbackOpen:
		res.Allowed = true
		a.m.decisions(pathTimeout).Inc()
		return res, nil
	case FallbackClosed:
		res.RetryAfter = min(a.h.cfg.RetryEvery, res.Reset)
		return a.reject(ks, win, res, pathTimeout), nil
	}
	ck, pk := a.key(key, win, 'c'), a.key(key, win, 'p')
	if a.h.down.Load() {
		vals, err := a.h.cfg.Local.GetMulti(ctx, []string{ck})
		a.m.localOps.Inc()
		if err != nil {
			return counter.Result{}, err
		}
		a.selfCredit(ctx, key, ks, win, number(vals[ck]))
	}
	v, err := a.h.cfg.Local.Decr(ctx, pk, uint64(n))
	a.m.localOps.Inc()
	if err == nil && int64(v)-poolBase >= 0 {
		res.Allowed, res.Remaining = true, int64(v)-poolBase
		a.m.decisions(pathTimeout).Inc()
		return res, nil
	}
	if err == nil {
		_, _ = a.h.cfg.Local.Incr(ctx, pk, uint64(n))
		a.m.localOps.Inc()
	}
	res.RetryAfter = min(a.h.latency(), res.Reset)
	return a.reject(ks, win, res, pathTimeout), nil
}

// roomLocked reports whether a refusal in win now would be false: the
// window is not known to be used up and the home count this worker last
// read is under the limit.
func (a *Allower) roomLocked(ks *keyState, win int64) bool {
	return ks.exhausted != win+1 && ks.knownLocked(win) < a.lim.Quantity
}

// reject counts a rejection on path, and as a false refusal when the home
// count this worker last read for win is below the limit (the window is
// not known to be used up); while claims of this worker for win are in
// flight, the counts they return decide instead (see delivered).
func (a *Allower) reject(ks *keyState, win int64, res counter.Result, path int) counter.Result {
	a.m.decisions(path).Inc()
	ks.mu.Lock()
	under := a.roomLocked(ks, win)
	if under && ks.sent[win] > 0 {
		ks.suspect[win]++
		under = false
	}
	ks.mu.Unlock()
	if under {
		a.m.falseRefusals.Inc()
	}
	return res
}

// schedulePrefetch arranges, once per key and window, for the next
// window's pool to be claimed 2 refill latencies + 100ms before win ends
// (decision clock), so a key active in win does not start win+1 empty
// even if no request comes that close to the boundary.
func (a *Allower) schedulePrefetch(key string, ks *keyState, win int64, now time.Time, lat time.Duration) {
	ks.mu.Lock()
	if ks.scheduled == win+1 || ks.prefetched == win+2 {
		ks.mu.Unlock()
		return
	}
	ks.scheduled = win + 1
	ks.mu.Unlock()
	at := time.UnixMilli((win + 1) * a.wms).Add(-2*lat - 100*time.Millisecond)
	time.AfterFunc(at.Sub(now), func() {
		t := now.Add(at.Sub(now))
		a.refill(key, ks, win+1, t, ks.popRate(t, a.h.cfg.Workers), true)
	})
}

// Undo implements counter.Allower: the n units go back to the pool of the
// window of now (if it still exists).
func (a *Allower) Undo(ctx context.Context, key string, now time.Time, n int64) error {
	if n < 1 {
		return counter.ErrBadCost
	}
	win := now.UnixMilli() / a.wms
	_, err := a.h.cfg.Local.Incr(ctx, a.key(key, win, 'p'), uint64(n))
	a.m.localOps.Inc()
	if errors.Is(err, counter.ErrNotFound) {
		return nil // the window's pool is gone: nothing to return to
	}
	if err == nil {
		a.m.returned.Add(float64(n))
	}
	return err
}

// lowWater is the pool level under which a refill starts: the units the
// PoP consumes during 1.5 refill latencies, plus the request itself.
func lowWater(rate float64, lat time.Duration, n int64) int64 {
	return int64(rate*1.5*lat.Seconds()) + n
}

// incrCreate adds delta to the counter key, creating it at init+delta
// with ttl when absent; it returns the new value.
func incrCreate(ctx context.Context, s counter.Store, key string, delta, init uint64, ttl time.Duration) (uint64, error) {
	v, err := s.Incr(ctx, key, delta)
	if !errors.Is(err, counter.ErrNotFound) {
		return v, err
	}
	err = s.Add(ctx, key, []byte(strconv.FormatUint(init+delta, 10)), ttl)
	if err == nil {
		return init + delta, nil
	}
	if !errors.Is(err, counter.ErrNotStored) {
		return 0, err
	}
	return s.Incr(ctx, key, delta)
}
