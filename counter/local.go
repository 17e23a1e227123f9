package counter

import (
	"context"
	"math"
	"sync"
	"time"

	"github.com/cespare/xxhash/v2"
)

// local is NewLocal's limiter.
type local struct {
	l      Limit
	win    window
	g      gcra
	shards [localShards]localShard
}

const localShards = 64

type localShard struct {
	mu sync.Mutex
	m  map[string]*localEntry
	_  [40]byte // keep shards on separate cache lines
}

// localEntry is one key's state: a ring of n+1 sub-window counts (slot =
// sub-window id mod n+1) for the window algorithms, tat for the bucket.
type localEntry struct {
	sids, vals, scratch []int64
	tat                 int64
	clock               int64 // the latest now the bucket decided at
	// The sub-window of the last call, to skip divisions on the hot path.
	curID, curStart int64 // id and its first ms
	curSlot         int   // slot of sub-window curID − n
}

var _ Allower = (*local)(nil)

// NewLocal returns an in-process limiter for l: the same three algorithms
// and the same arithmetic as Limiter, without a store. It is safe for
// concurrent use, allocation-free on the hot path once a key has been seen,
// and keeps one small entry per key until its Sweep(now time.Time) method
// drops the idle ones (call it from time to time: memory is bounded by the
// keys active within a window).
func NewLocal(l Limit) (Allower, error) {
	if err := l.Validate(); err != nil {
		return nil, err
	}
	lo := &local{l: l}
	switch l.Algorithm {
	case SlidingWindow, FixedWindow:
		var err error
		if lo.win, err = windowOf(l); err != nil {
			return nil, err
		}
	case TokenBucket:
		lo.g = newGCRA(l)
	}
	for i := range lo.shards {
		lo.shards[i].m = make(map[string]*localEntry)
	}
	return lo, nil
}

// Limit implements Allower.
func (lo *local) Limit() Limit { return lo.l }

func (lo *local) shard(key string) *localShard {
	return &lo.shards[xxhash.Sum64String(key)%localShards]
}

func (lo *local) newEntry() *localEntry {
	if lo.l.Algorithm == TokenBucket {
		return &localEntry{tat: math.MinInt64}
	}
	k := lo.win.n + 1
	all := make([]int64, 3*k)
	e := &localEntry{sids: all[:k:k], vals: all[k : 2*k : 2*k], scratch: all[2*k:],
		curID: math.MinInt64, curStart: math.MaxInt64}
	for i := range e.sids {
		e.sids[i] = math.MinInt64
	}
	return e
}

// AllowN implements Allower; it never returns an error except ErrBadCost.
func (lo *local) AllowN(_ context.Context, key string, now time.Time, n int64) (Result, error) {
	if n < 1 {
		return Result{}, ErrBadCost
	}
	s := lo.shard(key)
	s.mu.Lock()
	e := s.m[key]
	if e == nil {
		e = lo.newEntry()
		s.m[key] = e
	}
	var r Result
	if lo.l.Algorithm == TokenBucket {
		t := now.UnixNano()
		e.clock = max(e.clock, t) // as the store-backed bucket: bucket.go
		next, ok := lo.g.decide(e.tat, e.clock, n)
		e.tat = next
		r = lo.g.result(next, t, n, ok)
	} else {
		r = lo.allowWindow(e, now, n)
	}
	s.mu.Unlock()
	return r, nil
}

// allowWindow decides for a window algorithm. s.mu held.
func (lo *local) allowWindow(e *localEntry, now time.Time, n int64) Result {
	w := lo.win
	nowNs := now.UnixNano()
	ms := floorDiv(nowNs, 1e6)
	var id, el int64
	var slot int
	if el = ms - e.curStart; el >= 0 && el < w.sub {
		id, slot = e.curID, e.curSlot
	} else {
		var start int64
		id, start = w.locate(ms)
		el = ms - start
		slot = floorMod(id-int64(w.n), w.n+1)
		e.curID, e.curStart, e.curSlot = id, start, slot
	}
	counts := e.scratch
	k := w.n + 1
	sid := id - int64(w.n)
	for i := range counts {
		if e.sids[slot] == sid {
			counts[i] = e.vals[slot]
		} else {
			counts[i] = 0
		}
		sid++
		if slot++; slot == k {
			slot = 0
		}
	}
	if n > w.q { // can never pass: not counted
		return w.result(counts, id, el, nowNs, n, false, -1)
	}
	counts[w.n] += n
	sl, allowed := w.slack(counts, el)
	if !allowed && (lo.l.OnReject == Refund || lo.l.OnReject == CountFirst && !w.charged(counts, el, n)) {
		counts[w.n] -= n
		sl = -1
	}
	// The current sub-window's slot is the one before slot (wrapped).
	cur := slot - 1
	if cur < 0 {
		cur = k - 1
	}
	if e.sids[cur] <= id { // a lagging clock must not overwrite a newer slot
		e.sids[cur], e.vals[cur] = id, counts[w.n]
	}
	return w.result(counts, id, el, nowNs, n, allowed, sl)
}

// Undo implements Allower.
func (lo *local) Undo(_ context.Context, key string, now time.Time, n int64) error {
	if n < 1 {
		return ErrBadCost
	}
	s := lo.shard(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.m[key]
	if e == nil {
		return nil
	}
	if lo.l.Algorithm == TokenBucket {
		t := max(now.UnixNano(), e.clock)
		if e.tat > t {
			e.tat = max(e.tat-n*lo.g.t, t)
		}
		return nil
	}
	id := lo.win.id(unixMs(now))
	slot := floorMod(id, lo.win.n+1)
	if e.sids[slot] == id {
		e.vals[slot] = max(0, e.vals[slot]-n)
	}
	return nil
}

// Sweep drops the state of keys that no longer affect any decision at now
// or later (every counted sub-window slid out, or the bucket full again).
func (lo *local) Sweep(now time.Time) {
	t := now.UnixNano()
	var id int64
	if lo.l.Algorithm != TokenBucket {
		id = lo.win.id(unixMs(now))
	}
	for i := range lo.shards {
		s := &lo.shards[i]
		s.mu.Lock()
		for key, e := range s.m {
			if lo.idle(e, t, id) {
				delete(s.m, key)
			}
		}
		s.mu.Unlock()
	}
}

func (lo *local) idle(e *localEntry, t, id int64) bool {
	if lo.l.Algorithm == TokenBucket {
		return e.tat <= t
	}
	for _, sid := range e.sids {
		if sid != math.MinInt64 && sid+int64(lo.win.n) >= id {
			return false
		}
	}
	return true
}

// size returns the number of keys with state.
func (lo *local) size() int {
	n := 0
	for i := range lo.shards {
		s := &lo.shards[i]
		s.mu.Lock()
		n += len(s.m)
		s.mu.Unlock()
	}
	return n
}
