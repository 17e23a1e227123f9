package pop

// Token leases: a worker reserves a batch of a hot key's shared count in
// one store call and serves it locally.

import (
	"context"
	"math"
	"sync"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/poplimit/poplimit/counter"
	"github.com/poplimit/poplimit/pop/policy"
)

const leaseShards = 16

// leaser serves one limit from locally held batches of the shared count.
// A worker that sees a key arrive at rate r reserves about r×horizon units
// in one store call and hands them out locally until they run out or the
// lease expires (after horizon, or at the limit's Reset if sooner, so a
// fixed window's batch never outlives its window). Leftovers of an expired
// lease are returned with Undo at the instant they were taken. An idle key's
// rate decays to zero, so its batch shrinks to the request itself: idle
// workers strand nothing.
//
// Safe for concurrent use. Requests for one key in one worker are
// serialised while a batch is fetched (one store call for all of them).
type leaser struct {
	a counter.Allower
	// cost is the units of a and batchA one request takes: every count
	// below (tokens, batches, n) is in requests, multiplied by cost at
	// the store.
	cost int64
	// batchA fetches batches bigger than the request: a Refund copy of a
	// Count token bucket (so that a refused batch takes no debt), a
	// otherwise.
	batchA   counter.Allower
	maxBatch int64 // at most allowance/cost (see policy.Allowance)
	horizon  time.Duration
	perShard int
	shards   [leaseShards]leaseShard
}

type leaseShard struct {
	mu       sync.Mutex
	m        map[string]*lease
	examined int // leases looked at by evict, for tests
}

type lease struct {
	mu       sync.Mutex
	tokens   int64     // units held locally
	takenAt  time.Time // when the batch was reserved
	expires  time.Time
	last     counter.Result // the store's answer for the batch
	bucketAt time.Time      // start of the current rate bucket
	arrivals int64          // units asked in the current bucket
	rate     float64        // smoothed units per second
	seenAt   time.Time      // when the store last answered for this key
	seen     counter.Result // that answer
}

func newLeaser(a counter.Allower, cost, maxBatch int64, horizon time.Duration, maxKeys int) *leaser {
	per := maxKeys / leaseShards
	if per < 1 {
		per = 1
	}
	// A batch bigger than the limit's whole allowance can never be
	// granted (and a window in Count mode would then be undone for
	// nothing): cap it at what one window or bucket can hold.
	cost = max(1, cost)
	if lim := max(1, policy.Allowance(a.Limit())/cost); maxBatch > lim {
		maxBatch = lim
	}
	l := &leaser{a: a, cost: cost, batchA: a, maxBatch: maxBatch, horizon: horizon, perShard: per}
	for i := range l.shards {
		l.shards[i].m = make(map[string]*lease)
	}
	return l
}

func (l *leaser) get(key string, now time.Time) *lease {
	s := &l.shards[xxhash.Sum64String(key)%leaseShards]
	s.mu.Lock()
	le, ok := s.m[key]
	if !ok {
		if len(s.m) >= l.perShard {
			s.evict(now, l.perShard)
		}
		le = &lease{bucketAt: now}
		s.m[key] = le
	}
	s.mu.Unlock()
	return le
}

// evictSample is how many leases one insert into a full shard looks at.
const evictSample = 8

// evict makes room in a shard holding at least per leases, looking at no
// more than evictSample of them (map iteration order is random, so they are
// a sample): idle leases among them are dropped (their leftovers expire
// with them) until the shard is under per; if none was idle and the shard
// holds 2×per or more, the sampled lease expiring soonest is dropped. A
// lease in use (locked) is never dropped. Caller holds mu.
func (s *leaseShard) evict(now time.Time, per int) {
	var (
		soonest    string
		soonestExp time.Time
		found      bool
		seen       int
	)
	for k, old := range s.m {
		if seen == evictSample || len(s.m) < per {
			break
		}
		seen++
		if !old.mu.TryLock() {
			continue
		}
		exp := old.expires
		old.mu.Unlock()
		if now.After(exp) {
			delete(s.m, k)
			continue
		}
		if !found || exp.Before(soonestExp) {
			soonest, soonestExp, found = k, exp, true
		}
	}
	s.examined += seen
	if found && len(s.m) >= 2*per {
		delete(s.m, soonest)
	}
}

// batch sizes the next reservation for n units at now: the arrivals
// expected over one horizon, capped by MaxBatch (itself at most the
// limit's allowance ÷ cost) and, while the store's last
// answer still holds, by the remaining it reported (a refused batch of a
// Count limit would consume quota for nothing).
func (l *leaser) batch(le *lease, n int64, now time.Time) int64 {
	want := int64(math.Ceil(le.rate*l.horizon.Seconds())) + n
	if want > l.maxBatch {
		want = l.maxBatch
	}
	if !le.seenAt.IsZero() && now.Sub(le.seenAt) < le.seen.Reset && want > le.seen.Remaining {
		want = le.seen.Remaining
	}
	if want < n {
		want = n
	}
	return want
}

// take asks for n units of key at now. served reports a local answer (no
// store call). A non-nil error means the store could not be consulted.
func (l *leaser) take(ctx context.Context, key string, now time.Time, n int64) (res counter.Result, served bool, err error) {
	le := l.get(key, now)
	le.mu.Lock()
	defer le.mu.Unlock()

	// Arrival rate, measured over buckets of one horizon.
	if el := now.Sub(le.bucketAt); el >= l.horizon {
		inst := float64(le.arrivals) / el.Seconds()
		if el >= 4*l.horizon {
			inst = 0 // idle for a while: forget the old rate
		}
		le.rate = 0.5*le.rate + 0.5*inst
		le.arrivals = 0
		le.bucketAt = now
	}
	le.arrivals += n

	if le.tokens >= n && now.Before(le.expires) {
		le.tokens -= n
		return l.localResult(le, now), true, nil
	}
	if le.tokens > 0 {
		// Expired lease: give the leftovers back to the window they came
		// from, best effort.
		_ = l.a.Undo(ctx, key, le.takenAt, le.tokens*l.cost)
		le.tokens = 0
	}
	b := l.batch(le, n, now)
	ba := l.a
	if b > n {
		ba = l.batchA
	}
	r, err := ba.AllowN(ctx, key, now, b*l.cost)
	if err != nil {
		return counter.Result{}, false, err
	}
	le.seenAt, le.seen = now, r
	// A refused batch costs nothing (batches of a Count limit go through
	// a Refund copy): the request alone is then judged, and counted, as
	// without leases, so its Retry-After is the shared count's.
	retry := !r.Allowed && b > n
	if lim := l.a.Limit(); retry && l.batchA == l.a && lim.OnReject != counter.Refund &&
		lim.Algorithm != counter.TokenBucket && r.RetryAfter != counter.Never {
		// No Refund copy: the window kept the refused batch in its
		// count; take it back first.
		retry = l.a.Undo(ctx, key, now, b*l.cost) == nil
	}
	if retry {
		// Not enough for a batch: ask for the request alone.
		b = n
		if r, err = l.a.AllowN(ctx, key, now, n*l.cost); err != nil {
			return counter.Result{}, false, err
		}
		le.seenAt, le.seen = now, r
	}
	if !r.Allowed {
		return r, false, nil
	}
	le.last = r
	le.takenAt = now
	life := l.horizon
	if r.Reset > 0 && r.Reset < life {
		life = r.Reset
	}
	le.expires = now.Add(life)
	le.tokens = b - n
	return l.localResult(le, now), false, nil
}

// localResult reports the lease's view: the shared remaining at the batch
// plus what is still held locally.
func (l *leaser) localResult(le *lease, now time.Time) counter.Result {
	r := le.last
	r.Allowed = true
	r.Remaining += le.tokens
	if r.Remaining > r.Limit {
		r.Remaining = r.Limit
	}
	r.Reset -= now.Sub(le.takenAt)
	if r.Reset < 0 {
		r.Reset = 0
	}
	r.Next = max(0, r.Next-now.Sub(le.takenAt))
	r.RetryAfter = 0
	return r
}

// giveBack returns n units taken at now (another limit of the rule refused
// the request) to the key's lease, if it is still valid.
func (l *leaser) giveBack(key string, now time.Time, n int64) {
	le := l.get(key, now)
	le.mu.Lock()
	if now.Before(le.expires) {
		le.tokens += n
	}
	le.mu.Unlock()
}
