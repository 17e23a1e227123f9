package global

import (
	"context"
	"time"
)

// waitq is the requests of one key and window that found the PoP's pool
// empty and wait on claims of this worker (guarded by keyState.mu).
//
// The units waiting are claimed exactly (no predictive batch, so a burst
// strands nothing): the first claim goes at once, and while claims are in
// flight the next goes minGap after the previous one or, later in the
// burst, after as long as the oldest claim has been in flight (sends at 0,
// 1, 2, 4, 8 ms …), at most maxClaims at once. A request thus waits about
// one home round trip plus its arrival's offset into the burst, and a
// burst costs a logarithmic number of claims.
type waitq struct {
	queue   []*waiter // oldest first
	queued  int64     // units of the queue
	covered int64     // units of waiting demand asked by the claims in flight
	lent    int64     // units of the queue's lent requests (see lend)
	claims  int       // claims for the waiting demand in flight
	first   time.Time // when the oldest of them was sent (Home clock)
	next    time.Time // earliest send of the next one (Home clock)
	timer   bool      // a timer will look at the queue at next
	absent  bool      // a request of the queue found no pool at the PoP
}

// waiter is one request of a waitq.
type waiter struct {
	n       int64
	done    chan struct{} // closed once granted or woken
	granted bool          // its n units were handed to it
	lent    bool          // admitted when its wait ran out: a grant, or the pool, pays its units
}

const (
	minGap    = time.Millisecond
	maxClaims = 8
)

// waitqLocked returns win's queue, making it.
func (ks *keyState) waitqLocked(win int64) *waitq {
	q := ks.waits[win]
	if q == nil {
		q = &waitq{}
		ks.waits[win] = q
	}
	return q
}

// serveLocked hands units to waiting requests, oldest first, and returns
// what is left.
func (q *waitq) serveLocked(units int64) int64 {
	for len(q.queue) > 0 && q.queue[0].n <= units {
		w := q.queue[0]
		q.queue = q.queue[1:]
		q.queued -= w.n
		units -= w.n
		if w.lent {
			q.lent -= w.n
		}
		w.granted = true
		close(w.done)
	}
	return units
}

// wakeAllLocked empties the queue: every request looks at the pool and
// the window's state again. It returns the units of the lent requests
// (admitted already), which the pool owes.
func (q *waitq) wakeAllLocked() (lent int64) {
	for _, w := range q.queue {
		if w.lent {
			lent += w.n
		}
		close(w.done)
	}
	q.queue, q.queued, q.lent = nil, 0, 0
	return lent
}

// lend admits w, whose wait ran out with its claim still in flight, on
// that claim: w stays queued, so a grant (or, once the queue is woken,
// the pool) pays its units. It does so under FallbackShare and
// FallbackOpen while the home store is up, as long as the units lent and
// not yet paid stay within this worker's part of the room it knows the
// window has, (limit − the home count it last read) ÷ (PoPs × Workers);
// otherwise (or once w was granted or woken) it reports false.
func (a *Allower) lend(ks *keyState, win int64, w *waiter) bool {
	if a.fb == FallbackClosed || a.h.down.Load() {
		return false
	}
	ks.mu.Lock()
	defer ks.mu.Unlock()
	select {
	case <-w.done:
		return false // granted (the caller sees it) or woken
	default:
	}
	q := ks.waits[win]
	room := (a.lim.Quantity - ks.knownLocked(win)) / int64(a.h.cfg.PoPs*a.h.cfg.Workers)
	if q == nil || ks.exhausted == win+1 || q.lent+w.n > room {
		return false
	}
	q.lent += w.n
	w.lent = true
	return true
}

// payLent takes units of lent requests that no grant paid from the pool
// of key's window (what the pool lacks is over-admission, within the
// lending cap).
func (a *Allower) payLent(key string, win, units int64) {
	a.h.jobs.start()
	go func() {
		defer a.h.jobs.done()
		ctx, cancel := context.WithTimeout(context.Background(), a.h.cfg.LockTTL)
		defer cancel()
		pk := a.key(key, win, 'p')
		v, err := a.h.cfg.Local.Decr(ctx, pk, uint64(units))
		a.m.localOps.Inc()
		if short := poolBase - int64(v); err == nil && short > 0 {
			_, _ = a.h.cfg.Local.Incr(ctx, pk, uint64(min(short, units)))
			a.m.localOps.Inc()
		}
	}()
}

// join queues a request of n units for win and starts the claim it needs;
// it returns nil when no claim can serve it (the window exhausted, the
// home store down: the caller decides without waiting). now is the
// decision's instant; absent is set when the request found no pool at the
// PoP.
func (a *Allower) join(key string, ks *keyState, win int64, n int64, now time.Time, absent bool) *waiter {
	w := &waiter{n: n, done: make(chan struct{})}
	ks.mu.Lock()
	defer ks.mu.Unlock()
	q := ks.waitqLocked(win)
	q.queue = append(q.queue, w)
	q.queued += n
	q.absent = q.absent || absent
	a.kickLocked(key, ks, win, q, now)
	if !ks.claimingLocked(win) || (ks.exhausted == win+1 && ks.sent[win] == 0) {
		q.queue = q.queue[:len(q.queue)-1]
		q.queued -= n
		a.settleLocked(key, ks, win, q, false)
		return nil
	}
	return w
}

// leave takes w out of its queue (its wait ended without a grant) and
// reports whether it was granted meanwhile.
func (a *Allower) leave(key string, ks *keyState, win int64, w *waiter, now time.Time) bool {
	ks.mu.Lock()
	defer ks.mu.Unlock()
	if w.granted {
		return true
	}
	q := ks.waits[win]
	if q == nil {
		return false
	}
	for i, o := range q.queue {
		if o == w {
			q.queue = append(q.queue[:i], q.queue[i+1:]...)
			q.queued -= w.n
			break
		}
	}
	a.settleLocked(key, ks, win, q, false)
	_ = now
	return false
}

// takeDemand moves the waiting units of win no claim covers into the
// caller's claim; waiting reports whether requests of win wait here.
func (a *Allower) takeDemand(ks *keyState, win int64) (d int64, waiting bool) {
	ks.mu.Lock()
	defer ks.mu.Unlock()
	q := ks.waits[win]
	if q == nil || q.queued <= 0 {
		return 0, false
	}
	d = max(q.queued-q.covered, 0)
	q.covered += d
	return d, true
}

// settleLocked follows a claim's end (or a request's leaving): with wake
// (the window exhausted, a claim failed, tokens in the pool) every
// waiting request looks again once no claim of this worker for win is in
// flight (their grants serve the queue first: nothing is stranded in the
// pool while requests here are refused); otherwise uncovered demand gets
// its claim. An idle queue is dropped.
func (a *Allower) settleLocked(key string, ks *keyState, win int64, q *waitq, wake bool) {
	_, refilling := ks.inflight[win]
	busy := q.claims > 0 || refilling
	switch {
	case ks.exhausted == win+1 && ks.sent[win] > 0:
		// wait for the grants in flight
	case wake || ks.exhausted == win+1 || (a.h.down.Load() && !busy):
		if lent := q.wakeAllLocked(); lent > 0 {
			a.payLent(key, win, lent)
		}
	default:
		a.kickLocked(key, ks, win, q, time.Time{})
	}
	if len(q.queue) == 0 && !busy && q.covered <= 0 && !q.timer {
		delete(ks.waits, win)
	}
}

// claimingLocked reports whether a claim of this worker for win is in
// flight.
func (ks *keyState) claimingLocked(win int64) bool {
	_, refilling := ks.inflight[win]
	return refilling || (ks.waits[win] != nil && ks.waits[win].claims > 0)
}

// kickLocked sends a claim for the waiting units of win no claim covers,
// if the schedule (see waitq) lets it go now, else arranges to look again
// at q.next. A claim sent while no refill of this worker is in flight is
// a refill (under the PoP's lock, with a batch that seeds the pool: for
// the steady rate at the window's first claim, the current one later), so
// a PoP whose requests all wait still gets a pool; the others ask for the
// waiting units only. The worker's first claim of win for requests that
// found no pool at the PoP, of a key it first saw in win (a cold key),
// asks their units at once, beside the refill rather than after its
// lock: a cold key's first request pays one home round trip, not a
// PoP-store one too. (A key seen before keeps the refill first: its
// requests take the pool another worker fills.) now is the decision's
// instant (zero: the Home clock's).
func (a *Allower) kickLocked(key string, ks *keyState, win int64, q *waitq, now time.Time) {
	need := q.queued - q.covered
	if need <= 0 || ks.exhausted == win+1 || a.h.down.Load() {
		return
	}
	t := a.h.clock()
	if now.IsZero() {
		now = t
	}
	if q.claims > 0 && (t.Before(q.next) || q.claims >= maxClaims) {
		if !q.timer && q.claims < maxClaims {
			q.timer = true
			time.AfterFunc(q.next.Sub(t), func() {
				ks.mu.Lock()
				q.timer = false
				if ks.waits[win] == q {
					a.settleLocked(key, ks, win, q, false)
				}
				ks.mu.Unlock()
			})
		}
		return
	}
	q.claims++
	if q.claims == 1 {
		q.first, q.next = t, t.Add(minGap)
	} else {
		q.next = t.Add(max(minGap, t.Sub(q.first)))
	}
	if _, refilling := ks.inflight[win]; !refilling {
		rate := ks.steadyRateLocked(a.h.cfg.Workers)
		if ks.knownLocked(win) > 0 {
			rate = ks.popRateLocked(now, a.h.cfg.Workers)
		}
		if q.absent && ks.born == win+1 && ks.knownLocked(win) == 0 && ks.sent[win] == 0 {
			q.covered += need
			a.h.jobs.start()
			go a.claimDemand(key, ks, win, need, now, false)
			q.claims++ // the refill's, for the seeding batch
			if !a.refillLocked(key, ks, win, now, rate, false, true) {
				q.claims--
			}
			return
		}
		if a.refillLocked(key, ks, win, now, rate, false, true) {
			return // the refill takes the demand when it claims
		}
	}
	q.covered += need
	a.h.jobs.start()
	go a.claimDemand(key, ks, win, need, now, true)
}

// claimDemand claims d units for the requests of win waiting here, hands
// the grant to them and credits what they no longer need to the pool;
// with chargeDebt, the claim also charges the PoP's fallback debt (a
// PoP-store round trip before it).
func (a *Allower) claimDemand(key string, ks *keyState, win, d int64, now time.Time, chargeDebt bool) {
	defer a.h.jobs.done()
	start := a.h.clock()
	ctx, cancel := context.WithTimeout(context.Background(), a.h.cfg.LockTTL)
	defer cancel()
	wake := false
	if !ks.send(win) {
		a.claimed(key, ks, win, d, true)
		return
	}
	dk := a.key(key, win, 'd')
	var debt int64
	if chargeDebt {
		debt = a.takeDebt(ctx, dk)
	}
	c, landed, err := a.claimInFlight(ctx, key, win, uint64(d+debt))
	if err != nil {
		landed()
		a.returnDebt(ctx, dk, debt)
		vals, _ := a.h.cfg.Local.GetMulti(ctx, []string{a.key(key, win, 'c')})
		a.m.localOps.Inc()
		a.claimFailed(ctx, key, ks, win, now, number(vals[a.key(key, win, 'c')]), err)
		wake = true
	} else {
		a.h.setDown(false, nil)
		grant := a.granted(ks, win, int64(c), d, debt)
		a.deliver(ctx, key, ks, win, grant)
		landed()
		a.h.observe(a.h.clock().Sub(start))
		if grant < d {
			ks.mu.Lock()
			ks.exhausted = win + 1
			ks.mu.Unlock()
			a.exhaust(ctx, a.key(key, win, 'l'), time.UnixMilli((win+1)*a.wms))
			wake = true
		}
	}
	a.delivered(ks, win)
	a.claimed(key, ks, win, d, wake)
}

// claimed ends a demand claim of d units.
func (a *Allower) claimed(key string, ks *keyState, win, d int64, wake bool) {
	ks.mu.Lock()
	if q := ks.waits[win]; q != nil {
		q.covered -= d
		q.claims--
		a.settleLocked(key, ks, win, q, wake)
	}
	ks.mu.Unlock()
}
