package global

import (
	"bytes"
	"context"
	"errors"
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/poplimit/poplimit/counter"
)

// keyShard holds the per-key state of one sixteenth of the keys.
type keyShard struct {
	mu sync.Mutex
	m  map[string]*keyState
}

// keyState is one worker's view of one global key.
type keyState struct {
	mu         sync.Mutex
	bucketAt   time.Time // start of the current rate bucket
	arrivals   int64     // units asked in the current bucket
	rate       float64   // smoothed units per second asked of this worker
	lastSeen   time.Time
	inflight   map[int64]time.Time // windows with a refill in flight: since (decision clock)
	seen       [2]seenCount        // the home count last read, by window parity
	exhausted  int64               // window id + 1 whose home count is used up
	prefetched int64               // window id + 1 whose pool this worker prefetched
	scheduled  int64               // window id + 1 whose end has a prefetch timer
	nextTry    time.Time           // while the home store is down: next claim
	waits      map[int64]*waitq    // windows with requests waiting on a claim
	sent       map[int64]int       // claims sent to the home store, not yet delivered
	suspect    map[int64]int64     // rejections whose claims in flight tell whether they were false
	born       int64               // window id + 1 of the key's first request at this worker
}

// seenCount is the largest home count of window win−1 that a claim of
// this worker returned.
type seenCount struct{ win, count int64 }

// knownLocked is the home count of win as this worker last read it (0
// before its first claim in win): a lower bound of the true count.
func (ks *keyState) knownLocked(win int64) int64 {
	if s := ks.seen[win&1]; s.win == win+1 {
		return s.count
	}
	return 0
}

// readLocked records a home count c of win returned by a claim.
func (ks *keyState) readLocked(win, c int64) {
	s := &ks.seen[win&1]
	if s.win != win+1 {
		*s = seenCount{win: win + 1}
	}
	s.count = max(s.count, c)
}

// coldBatch bounds the batch of a refill sent while requests of its window
// wait at the worker: at most 1/coldBatch of the limit.
const coldBatch = 50

// rateBucket is the period over which arrivals are averaged.
const rateBucket = 250 * time.Millisecond

func (a *Allower) state(key string, now time.Time, n int64) *keyState {
	s := &a.shards[xxhash.Sum64String(key)%uint64(len(a.shards))]
	s.mu.Lock()
	ks, ok := s.m[key]
	if !ok {
		ks = &keyState{bucketAt: now, inflight: map[int64]time.Time{}, waits: map[int64]*waitq{}, sent: map[int64]int{}, suspect: map[int64]int64{},
			born: now.UnixMilli()/a.wms + 1}
		s.m[key] = ks
	}
	s.mu.Unlock()
	ks.mu.Lock()
	if el := now.Sub(ks.bucketAt); el >= rateBucket {
		inst := float64(ks.arrivals) / el.Seconds()
		if el >= 8*rateBucket {
			inst = 0
		}
		ks.rate = 0.5*ks.rate + 0.5*inst
		ks.arrivals, ks.bucketAt = 0, now
	}
	ks.arrivals += n
	ks.lastSeen = now
	ks.mu.Unlock()
	return ks
}

// popRate estimates the PoP's arrival rate at the key at now: this
// worker's (the smoothed rate, or the current bucket's when higher, so a
// burst is seen at once) × workers.
func (ks *keyState) popRate(now time.Time, workers int) float64 {
	ks.mu.Lock()
	defer ks.mu.Unlock()
	return ks.popRateLocked(now, workers)
}

func (ks *keyState) popRateLocked(now time.Time, workers int) float64 {
	inst := float64(ks.arrivals) / max(now.Sub(ks.bucketAt), rateBucket/5).Seconds()
	return max(ks.rate, inst) * float64(workers)
}

// steadyRateLocked is the PoP's rate at the key without the current
// bucket (whose arrivals a burst fills with requests that wait and are
// claimed exactly), at least one arrival per rateBucket/5 per worker: the
// batch of a window's first claim, so a sequential client's next requests
// find tokens.
func (ks *keyState) steadyRateLocked(workers int) float64 {
	return max(ks.rate, 1/(rateBucket/5).Seconds()) * float64(workers)
}

// retryAfter is when the refill of win in flight here should be done
// (its start + one refill latency, at least 1ms); at most 100ms when none
// is (another worker of the PoP refills). Kept short: a rejection with it
// blocks the key in pop's mitigation cache, which hides demand from the
// rate estimate.
func (ks *keyState) retryAfter(win int64, now time.Time, lat time.Duration) time.Duration {
	ks.mu.Lock()
	defer ks.mu.Unlock()
	if since, ok := ks.inflight[win]; ok {
		return min(max(since.Add(lat).Sub(now), time.Millisecond), lat)
	}
	return max(min(lat, 100*time.Millisecond), time.Millisecond)
}

// refilling reports whether a refill of win is in flight in this worker.
func (ks *keyState) refilling(win int64) bool {
	ks.mu.Lock()
	defer ks.mu.Unlock()
	_, ok := ks.inflight[win]
	return ok
}

// isExhausted reports whether win's home count is used up and no claim of
// this worker for win is in flight (whose grant a request may still get).
func (ks *keyState) isExhausted(win int64) bool {
	ks.mu.Lock()
	defer ks.mu.Unlock()
	return ks.exhausted == win+1 && ks.sent[win] == 0
}

// send counts a claim of win about to go to the home store; it reports
// false (send nothing) once the window is known to be used up.
func (ks *keyState) send(win int64) bool {
	ks.mu.Lock()
	defer ks.mu.Unlock()
	if ks.exhausted == win+1 {
		return false
	}
	ks.sent[win]++
	return true
}

// delivered ends what send began. Once no claim of win is in flight, the
// rejections that waited for their counts (see reject) are false refusals
// if the window is still not known to be used up.
func (a *Allower) delivered(ks *keyState, win int64) {
	ks.mu.Lock()
	defer ks.mu.Unlock()
	if ks.sent[win]--; ks.sent[win] > 0 {
		return
	}
	delete(ks.sent, win)
	n := ks.suspect[win]
	delete(ks.suspect, win)
	if n > 0 && a.roomLocked(ks, win) {
		a.m.falseRefusals.Add(float64(n))
	}
}

// Sweep drops the state of keys idle for three windows.
func (a *Allower) Sweep(now time.Time) {
	for i := range a.shards {
		s := &a.shards[i]
		s.mu.Lock()
		for k, ks := range s.m {
			if !ks.mu.TryLock() {
				continue
			}
			if len(ks.inflight) == 0 && len(ks.waits) == 0 && now.Sub(ks.lastSeen) > 3*a.lim.Window {
				delete(s.m, k)
			}
			ks.mu.Unlock()
		}
		s.mu.Unlock()
	}
}

// refill starts a refill of key's pool for window win unless one is in
// flight in this worker, the window is exhausted, or the home store is
// down and the key's retry time has not come.
func (a *Allower) refill(key string, ks *keyState, win int64, now time.Time, rate float64, prefetch bool) {
	ks.mu.Lock()
	defer ks.mu.Unlock()
	a.refillLocked(key, ks, win, now, rate, prefetch, false)
}

// refillLocked is refill with ks.mu held; counted is set when the refill
// is one of the window's waitq claims. It reports whether it started one.
func (a *Allower) refillLocked(key string, ks *keyState, win int64, now time.Time, rate float64, prefetch, counted bool) bool {
	if _, busy := ks.inflight[win]; busy || ks.exhausted == win+1 || (a.h.down.Load() && now.Before(ks.nextTry)) || (prefetch && ks.prefetched == win+1) {
		return false
	}
	if prefetch {
		ks.prefetched = win + 1
	}
	ks.inflight[win] = now
	a.h.jobs.start()
	go func() {
		defer a.h.jobs.done()
		demand, wake := a.doRefill(key, ks, win, now, rate, prefetch)
		ks.mu.Lock()
		delete(ks.inflight, win)
		if q := ks.waits[win]; q != nil {
			q.covered -= demand
			if counted {
				q.claims--
			}
			a.settleLocked(key, ks, win, q, wake)
		}
		ks.mu.Unlock()
	}()
	return true
}

// batch is the units one claim asks for at rate (units/s of the PoP): the
// rate over max(Horizon, 1.5 latencies) plus the low-water mark, at least 1,
// at most half of the PoP's share of what the window had left at this
// worker's last claim (the whole limit at its first), so that one PoP's
// burst does not take the whole window's count, nor strand much of it in
// its pool when the burst ends.
func (a *Allower) batch(ks *keyState, win int64, rate float64, lat time.Duration) int64 {
	h := max(a.h.cfg.Horizon, lat+lat/2)
	b := int64(math.Ceil(rate*h.Seconds())) + lowWater(rate, lat, 1)
	ks.mu.Lock()
	left := a.lim.Quantity - ks.knownLocked(win)
	ks.mu.Unlock()
	return min(max(b, 1), max(left/int64(2*max(1, a.h.cfg.PoPs)), 1))
}

// doRefill is one refill of key's pool for window win: take the PoP's
// lock, read the pool, claim a batch from the home count plus the units
// of this worker's requests waiting on win (demand), hand the grant to
// them first and credit the rest. Without the lock (another worker
// refills) only the demand is claimed. A prefetch refills a pool that is
// still absent only. now is the instant of the decision that started it.
// wake is set when the waiting requests must look again (exhausted,
// failed, or the pool already holds tokens).
func (a *Allower) doRefill(key string, ks *keyState, win int64, now time.Time, rate float64, prefetch bool) (demand int64, wake bool) {
	start := a.h.clock()
	ctx, cancel := context.WithTimeout(context.Background(), a.h.cfg.LockTTL)
	defer cancel()
	local := a.h.cfg.Local
	lk := a.key(key, win, 'l')
	until := start.Add(a.h.cfg.LockTTL)
	end := time.UnixMilli((win + 1) * a.wms)
	pk, ck, dk := a.key(key, win, 'p'), a.key(key, win, 'c'), a.key(key, win, 'd')
	type read struct {
		vals map[string][]byte
		err  error
	}
	reads := make(chan read, 1)
	go func() { // the pool's read goes with the lock's round trip
		vals, err := local.GetMulti(ctx, []string{pk, ck, dk})
		reads <- read{vals, err}
	}()
	got, holder, _ := a.lock(ctx, lk, start, until)
	r := <-reads
	a.m.localOps.Inc()
	if !got && holder >= end.UnixMilli() {
		ks.mu.Lock()
		ks.exhausted = win + 1 // another worker found the window used up
		ks.mu.Unlock()
		return 0, true
	}
	held := false
	defer func() {
		if got && !held {
			a.unlock(ctx, lk, until)
		}
	}()
	vals := r.vals
	if r.err != nil {
		return 0, true
	}
	pool, present := vals[pk]
	have := number(pool) - poolBase
	lat := a.h.latency()
	credited := number(vals[ck])
	var b int64
	if got && !(present && (prefetch || have >= lowWater(rate, lat, 1))) {
		b = a.batch(ks, win, rate, lat)
	}
	waiting := false
	if !prefetch {
		demand, waiting = a.takeDemand(ks, win)
	}
	if waiting {
		// Requests of win wait here: maybe a burst, whose claims are exact
		// and after which a batch would be stranded in the pool; the batch
		// only seeds the pool (the refills after the wait size it).
		b = min(b, max(1, a.lim.Quantity/coldBatch))
	}
	if present && have > 0 && demand > 0 && b == 0 {
		return demand, true // the pool holds tokens: the waiting requests take them
	}
	if b+demand == 0 {
		return 0, false // another worker refilled meanwhile
	}
	ask := b + demand
	if !ks.send(win) {
		return demand, true
	}
	defer a.delivered(ks, win)
	var debt int64
	if number(vals[dk]) > 0 {
		debt = a.takeDebt(ctx, dk)
	}
	c, landed, err := a.claimInFlight(ctx, key, win, uint64(ask+debt))
	if err != nil {
		landed()
		a.returnDebt(ctx, dk, debt)
		a.claimFailed(ctx, key, ks, win, now, credited, err)
		return demand, true
	}
	a.h.setDown(false, nil)
	grant := a.granted(ks, win, int64(c), ask, debt)
	a.deliver(ctx, key, ks, win, grant)
	landed()
	a.h.observe(a.h.clock().Sub(start))
	if grant < ask {
		// The window's global count is used up: keep the lock until the
		// window ends so that no worker of the PoP claims again.
		ks.mu.Lock()
		ks.exhausted = win + 1
		ks.mu.Unlock()
		if got {
			held = a.hold(ctx, lk, until, end)
		} else {
			a.exhaust(ctx, lk, end)
		}
		return demand, true
	}
	return demand, false
}

// takeDebt takes the PoP's fallback debt of a window (key dk) for the
// caller's claim to charge: the one caller whose compare-and-swap zeroes
// it.
func (a *Allower) takeDebt(ctx context.Context, dk string) int64 {
	local := a.h.cfg.Local
	cur, cas, err := local.Gets(ctx, dk)
	a.m.localOps.Inc()
	d := number(cur)
	if err != nil || d <= 0 {
		return 0
	}
	err = local.CompareAndSwap(ctx, dk, []byte("0"), cas, a.ttl())
	a.m.localOps.Inc()
	if err != nil {
		return 0
	}
	return d
}

// returnDebt puts back a debt whose claim failed.
func (a *Allower) returnDebt(ctx context.Context, dk string, d int64) {
	if d > 0 {
		_, _ = a.h.cfg.Local.Incr(ctx, dk, uint64(d))
		a.m.localOps.Inc()
	}
}

// granted is what a claim of ask units (plus debt) that returned the home
// count c gets: what the limit had left before it, at most ask.
func (a *Allower) granted(ks *keyState, win, c, ask, debt int64) int64 {
	ks.mu.Lock()
	ks.readLocked(win, c)
	ks.mu.Unlock()
	prior := c - ask - debt // claimed by all PoPs before this claim
	return min(max(a.lim.Quantity-prior-debt, 0), ask)
}

// claimFailed marks the home store down after a failed claim, sets the
// key's next try and, for FallbackShare, credits the PoP's share.
func (a *Allower) claimFailed(ctx context.Context, key string, ks *keyState, win int64, now time.Time, credited int64, err error) {
	a.m.refillFailures.Inc()
	a.h.setDown(true, err)
	ks.mu.Lock()
	ks.nextTry = now.Add(a.h.cfg.RetryEvery) // on the decisions' clock
	ks.mu.Unlock()
	if a.fb == FallbackShare {
		a.selfCredit(ctx, key, ks, win, credited)
	}
}

// claimInFlight is claim on key's home count of win, counted in the PoP's
// claims in flight for win (kind 'f', see lastTokens) until landed is
// called (exactly once): after the grant is credited, or the claim failed.
func (a *Allower) claimInFlight(ctx context.Context, key string, win int64, delta uint64) (c uint64, landed func(), err error) {
	fk := a.key(key, win, 'f')
	counted := make(chan error, 1)
	go func() { // counted while the claim travels: it lands long before the grant
		_, err := incrCreate(ctx, a.h.cfg.Local, fk, 1, 0, a.ttl())
		counted <- err
	}()
	landed = func() {
		if <-counted == nil {
			_, _ = a.h.cfg.Local.Decr(ctx, fk, 1)
			a.m.localOps.Inc()
		}
	}
	a.m.localOps.Inc()
	hctx, hcancel := context.WithTimeout(ctx, a.h.cfg.HomeTimeout)
	defer hcancel()
	c, err = a.claim(hctx, a.key(key, win, 'h'), delta)
	return c, landed, err
}

// lastTokens is the last look at the pool of a request about to be
// refused because win is used up: while claims of the PoP's workers are
// in flight for win (their grants may still be credited to the pool),
// it retries the pool until deadline; it reports whether it took n units
// and the pool's tokens left.
func (a *Allower) lastTokens(ctx context.Context, key string, win, n int64, deadline time.Time) (bool, int64) {
	local := a.h.cfg.Local
	pk, fk := a.key(key, win, 'p'), a.key(key, win, 'f')
	poll := max(2*time.Millisecond, a.h.latency()/4)
	for {
		vals, err := local.GetMulti(ctx, []string{fk})
		a.m.localOps.Inc()
		if err != nil || number(vals[fk]) <= 0 || !a.h.clock().Add(poll).Before(deadline) {
			return false, 0
		}
		t := time.NewTimer(poll)
		select {
		case <-ctx.Done():
			t.Stop()
			return false, 0
		case <-t.C:
		}
		v, err := local.Decr(ctx, pk, uint64(n))
		a.m.localOps.Inc()
		if err == nil && int64(v)-poolBase >= 0 {
			return true, int64(v) - poolBase
		}
		if err == nil {
			_, _ = local.Incr(ctx, pk, uint64(n))
			a.m.localOps.Inc()
		}
	}
}

// claim adds delta to the home count hk and returns its new value: one
// round trip when the home store is a counter.Batcher (add-if-absent and
// incr written together), else incr, then add and incr when the count is
// new.
func (a *Allower) claim(ctx context.Context, hk string, delta uint64) (uint64, error) {
	a.m.homeOps.Inc()
	if b, ok := a.h.cfg.Home.(counter.Batcher); ok {
		_, v, err := b.GetMultiIncr(ctx, nil, hk, delta, a.ttl())
		if !errors.Is(err, counter.ErrNotSupported) {
			return v, err
		}
	}
	return incrCreate(ctx, a.h.cfg.Home, hk, delta, 0, a.ttl())
}

// deliver hands grant units, granted to this worker for win, to its
// waiting requests (oldest first) and credits the rest to the pool.
func (a *Allower) deliver(ctx context.Context, key string, ks *keyState, win, grant int64) {
	if grant <= 0 {
		return
	}
	a.m.claimed.Add(float64(grant))
	ks.mu.Lock()
	left := grant
	if q := ks.waits[win]; q != nil {
		left = q.serveLocked(grant)
	}
	ks.mu.Unlock()
	a.credit(ctx, key, win, left, grant)
}

// credit adds pool tokens to the pool of key's window (creating it) and
// counted to its credited count. The worker that creates a pool counts
// the tokens left in the pool two windows back (over for certain) as
// expired.
func (a *Allower) credit(ctx context.Context, key string, win, pool, counted int64) {
	local := a.h.cfg.Local
	pk := a.key(key, win, 'p')
	var err error
	if pool > 0 {
		_, err = local.Incr(ctx, pk, uint64(pool))
		a.m.localOps.Inc()
	}
	if pool > 0 && errors.Is(err, counter.ErrNotFound) {
		err = local.Add(ctx, pk, []byte(strconv.FormatInt(poolBase+pool, 10)), a.ttl())
		a.m.localOps.Inc()
		if err == nil {
			old := a.key(key, win-2, 'p')
			if vals, gerr := local.GetMulti(ctx, []string{old}); gerr == nil {
				if left := number(vals[old]) - poolBase; left > 0 {
					a.m.expired.Add(float64(left))
				}
			}
			a.m.localOps.Inc()
		} else if errors.Is(err, counter.ErrNotStored) {
			_, _ = local.Incr(ctx, pk, uint64(pool))
			a.m.localOps.Inc()
		}
	}
	if counted > 0 {
		_, _ = incrCreate(ctx, local, a.key(key, win, 'c'), uint64(counted), 0, a.ttl())
		a.m.localOps.Inc()
	}
}

// selfCredit is FallbackShare's refill while the home store is down: once
// per window and PoP (the debt key's add), share − credited tokens, owed
// to the home count.
func (a *Allower) selfCredit(ctx context.Context, key string, ks *keyState, win, credited int64) {
	grant := a.share - credited
	if grant <= 0 {
		return
	}
	err := a.h.cfg.Local.Add(ctx, a.key(key, win, 'd'), []byte(strconv.FormatInt(grant, 10)), a.ttl())
	a.m.localOps.Inc()
	if err != nil {
		return // already credited in this window (or the PoP store failed)
	}
	ks.mu.Lock()
	left := grant
	if q := ks.waits[win]; q != nil {
		left = q.serveLocked(grant)
	}
	ks.mu.Unlock()
	a.credit(ctx, key, win, left, grant)
	a.m.fallback.Add(float64(grant))
}

// lock takes the PoP's refill lock lk until until: add, or take over an
// expired or released one by compare-and-swap. When it is held, holder is
// the holder's deadline (unix ms).
func (a *Allower) lock(ctx context.Context, lk string, now, until time.Time) (got bool, holder int64, err error) {
	local := a.h.cfg.Local
	val := []byte(strconv.FormatInt(until.UnixMilli(), 10))
	err = local.Add(ctx, lk, val, a.ttl())
	a.m.localOps.Inc()
	if err == nil || !errors.Is(err, counter.ErrNotStored) {
		return err == nil, 0, err
	}
	cur, cas, err := local.Gets(ctx, lk)
	a.m.localOps.Inc()
	if holder = number(cur); err != nil || holder > now.UnixMilli() {
		return false, holder, err
	}
	err = local.CompareAndSwap(ctx, lk, val, cas, a.ttl())
	a.m.localOps.Inc()
	return err == nil, 0, err
}

// exhaust sets the PoP's lock lk to end (the window is used up), taking
// it over from any holder: no worker of the PoP claims again in it.
func (a *Allower) exhaust(ctx context.Context, lk string, end time.Time) {
	local := a.h.cfg.Local
	val := []byte(strconv.FormatInt(end.UnixMilli(), 10))
	for range 3 {
		err := local.Add(ctx, lk, val, a.ttl())
		a.m.localOps.Inc()
		if err == nil || !errors.Is(err, counter.ErrNotStored) {
			return
		}
		cur, cas, err := local.Gets(ctx, lk)
		a.m.localOps.Inc()
		if err != nil || number(cur) >= end.UnixMilli() {
			return
		}
		if local.CompareAndSwap(ctx, lk, val, cas, a.ttl()) == nil {
			return
		}
		a.m.localOps.Inc()
	}
}

// unlock releases lk if it still holds until (ours).
func (a *Allower) unlock(ctx context.Context, lk string, until time.Time) {
	a.hold(ctx, lk, until, time.UnixMilli(0))
}

// hold replaces our lock value until with next; it reports success.
func (a *Allower) hold(ctx context.Context, lk string, until, next time.Time) bool {
	local := a.h.cfg.Local
	cur, cas, err := local.Gets(ctx, lk)
	a.m.localOps.Inc()
	if err != nil || number(cur) != until.UnixMilli() {
		return false
	}
	err = local.CompareAndSwap(ctx, lk, []byte(strconv.FormatInt(next.UnixMilli(), 10)), cas, a.ttl())
	a.m.localOps.Inc()
	return err == nil
}

// number parses a stored decimal (memcached pads a shrunk counter with
// spaces); anything else is 0.
func number(b []byte) int64 {
	v, err := strconv.ParseInt(string(bytes.TrimSpace(b)), 10, 64)
	if err != nil {
		return 0
	}
	return v
}
