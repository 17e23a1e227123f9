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
	claimWin   int64               // window id + 1 of claimed
	claimed    int64               // the window's home count after this worker's last claim
	exhausted  int64               // window id + 1 whose home count is used up
	prefetched int64               // window id + 1 whose pool this worker prefetched
	nextTry    time.Time           // while the home store is down: next claim
}

// rateBucket is the period over which arrivals are averaged.
const rateBucket = 250 * time.Millisecond

func (a *Allower) state(key string, now time.Time, n int64) *keyState {
	s := &a.shards[xxhash.Sum64String(key)%uint64(len(a.shards))]
	s.mu.Lock()
	ks, ok := s.m[key]
	if !ok {
		ks = &keyState{bucketAt: now, inflight: map[int64]time.Time{}}
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
	inst := float64(ks.arrivals) / max(now.Sub(ks.bucketAt), rateBucket/5).Seconds()
	return max(ks.rate, inst) * float64(workers)
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

func (ks *keyState) isExhausted(win int64) bool {
	ks.mu.Lock()
	defer ks.mu.Unlock()
	return ks.exhausted == win+1
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
			if len(ks.inflight) == 0 && now.Sub(ks.lastSeen) > 3*a.lim.Window {
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
	if _, busy := ks.inflight[win]; busy || ks.exhausted == win+1 || (a.h.down.Load() && now.Before(ks.nextTry)) || (prefetch && ks.prefetched == win+1) {
		ks.mu.Unlock()
		return
	}
	if prefetch {
		ks.prefetched = win + 1
	}
	ks.inflight[win] = now
	ks.mu.Unlock()
	a.h.wg.Add(1)
	go func() {
		defer a.h.wg.Done()
		a.doRefill(key, ks, win, now, rate, prefetch)
		ks.mu.Lock()
		delete(ks.inflight, win)
		ks.mu.Unlock()
	}()
}

// batch is the units one claim asks for at rate (units/s of the PoP): the
// rate over max(Horizon, 1.5 latencies) plus the low-water mark, at least 1,
// at most half of what the window had left at this worker's last claim
// (the whole limit at its first), so that one PoP's burst does not take
// the whole window's count.
func (a *Allower) batch(ks *keyState, win int64, rate float64, lat time.Duration) int64 {
	h := max(a.h.cfg.Horizon, lat+lat/2)
	b := int64(math.Ceil(rate*h.Seconds())) + lowWater(rate, lat, 1)
	left := a.lim.Quantity
	ks.mu.Lock()
	if ks.claimWin == win+1 {
		left -= ks.claimed
	}
	ks.mu.Unlock()
	return min(max(b, 1), max(left/2, 1))
}

// doRefill is one refill of key's pool for window win: take the PoP's
// lock, read the pool, claim a batch from the home count, credit what was
// granted. A prefetch refills a pool that is still absent only. now is
// the instant of the decision that started it.
func (a *Allower) doRefill(key string, ks *keyState, win int64, now time.Time, rate float64, prefetch bool) {
	start := a.h.clock()
	ctx, cancel := context.WithTimeout(context.Background(), a.h.cfg.LockTTL)
	defer cancel()
	local := a.h.cfg.Local
	lk := a.key(key, win, 'l')
	until := start.Add(a.h.cfg.LockTTL)
	end := time.UnixMilli((win + 1) * a.wms)
	if got, holder, _ := a.lock(ctx, lk, start, until); !got {
		if holder >= end.UnixMilli() {
			ks.mu.Lock()
			ks.exhausted = win + 1 // another worker found the window used up
			ks.mu.Unlock()
		}
		return
	}
	held := false
	defer func() {
		if !held {
			a.unlock(ctx, lk, until)
		}
	}()
	pk, ck, dk := a.key(key, win, 'p'), a.key(key, win, 'c'), a.key(key, win, 'd')
	vals, err := local.GetMulti(ctx, []string{pk, ck, dk})
	a.m.localOps.Inc()
	if err != nil {
		return
	}
	pool, present := vals[pk]
	have := number(pool) - poolBase
	lat := a.h.latency()
	if present && (prefetch || have >= lowWater(rate, lat, 1)) {
		return // another worker refilled meanwhile
	}
	credited, debt := number(vals[ck]), number(vals[dk])
	b := a.batch(ks, win, rate, lat)
	hctx, hcancel := context.WithTimeout(ctx, a.h.cfg.HomeTimeout)
	c, err := a.claim(hctx, a.key(key, win, 'h'), uint64(b+debt))
	hcancel()
	if err != nil {
		a.m.refillFailures.Inc()
		a.h.setDown(true, err)
		ks.mu.Lock()
		ks.nextTry = now.Add(a.h.cfg.RetryEvery) // on the decisions' clock
		ks.mu.Unlock()
		if a.fb == FallbackShare {
			a.selfCredit(ctx, key, win, credited)
		}
		return
	}
	a.h.setDown(false, nil)
	if debt > 0 {
		_, _ = local.Decr(ctx, dk, uint64(debt))
		a.m.localOps.Inc()
	}
	ks.mu.Lock()
	ks.claimWin, ks.claimed = win+1, int64(c)
	ks.mu.Unlock()
	prior := int64(c) - b - debt // claimed by all PoPs before this claim
	grant := min(max(a.lim.Quantity-prior-debt, 0), b)
	if grant > 0 {
		a.credit(ctx, key, win, grant)
		a.m.claimed.Add(float64(grant))
	}
	a.h.observe(a.h.clock().Sub(start))
	if grant < b {
		// The window's global count is used up: keep the lock until the
		// window ends so that no worker of the PoP claims again.
		ks.mu.Lock()
		ks.exhausted = win + 1
		ks.mu.Unlock()
		held = a.hold(ctx, lk, until, end)
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

// credit adds grant tokens to the pool of key's window (creating it) and
// to its credited count. The worker that creates a pool counts the tokens
// left in the pool two windows back (over for certain) as expired.
func (a *Allower) credit(ctx context.Context, key string, win, grant int64) {
	local := a.h.cfg.Local
	pk := a.key(key, win, 'p')
	_, err := local.Incr(ctx, pk, uint64(grant))
	a.m.localOps.Inc()
	if errors.Is(err, counter.ErrNotFound) {
		err = local.Add(ctx, pk, []byte(strconv.FormatInt(poolBase+grant, 10)), a.ttl())
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
			_, _ = local.Incr(ctx, pk, uint64(grant))
			a.m.localOps.Inc()
		}
	}
	_, _ = incrCreate(ctx, local, a.key(key, win, 'c'), uint64(grant), 0, a.ttl())
	a.m.localOps.Inc()
}

// selfCredit is FallbackShare's refill while the home store is down: once
// per window and PoP (the debt key's add), share − credited tokens, owed
// to the home count.
func (a *Allower) selfCredit(ctx context.Context, key string, win, credited int64) {
	grant := a.share - credited
	if grant <= 0 {
		return
	}
	err := a.h.cfg.Local.Add(ctx, a.key(key, win, 'd'), []byte(strconv.FormatInt(grant, 10)), a.ttl())
	a.m.localOps.Inc()
	if err != nil {
		return // already credited in this window (or the PoP store failed)
	}
	a.credit(ctx, key, win, grant)
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
