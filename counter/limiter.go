package counter

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cespare/xxhash/v2"
)

// Config tunes a store-backed Limiter. Zero means default.
type Config struct {
	// CASRetries is how many times the token bucket retries a lost
	// compare-and-swap before giving up with ErrContention; default 32.
	CASRetries int
	// MaxCachedKeys bounds the per-key cache of closed sub-window counts:
	// the cache never holds more than MaxCachedKeys rounded up to a
	// multiple of 64 (its shard count) identities. When a cache shard is
	// at its share, entries of keys idle for a whole window are dropped,
	// and if it is still at least three-quarters full, arbitrary entries
	// are evicted (their state is re-read from the store on next use).
	// Default 1<<20. Sweep drops idle entries explicitly.
	MaxCachedKeys int
	// Grace is how long after a sub-window closes its count is still read
	// from the store at every decision before being cached, to absorb clock
	// skew between workers (their late increments are then seen). Default
	// 0: cached at once. With a Batcher store the re-reads ride along with
	// the increment and cost no extra round trip.
	Grace time.Duration
}

func (c Config) casRetries() int {
	if c.CASRetries > 0 {
		return c.CASRetries
	}
	return 32
}

func (c Config) maxCachedKeys() int {
	if c.MaxCachedKeys > 0 {
		return c.MaxCachedKeys
	}
	return 1 << 20
}

// Limiter enforces one Limit over a Store shared by every worker of a PoP.
// It is safe for concurrent use. Steady state costs one store round trip
// per decision (incr of the current window). The closed sub-windows a
// sliding window needs are read once per worker (one multi-get, one shard)
// after they close and kept in a local cache until they slide out. With a
// Batcher store (memcached.PipeStore, memstore.Store) that read and the create-or-
// increment of a window this worker has not counted in go in one round
// trip, so every decision costs exactly one; without (memcached.Store over
// gomemcache) they cost a multi-get plus an add (or incr first for keys
// other workers counted last window). A token bucket costs gets + cas.
//
// Exactness: fixed window and token bucket never admit more than the
// allowance, whatever the number of workers (incr and cas are atomic). In
// Refund mode a rejected request is incremented then decremented, so a
// concurrent request may see the transient count and be rejected: errors
// are always on the side of rejection.
type Limiter struct {
	store   Store
	l       Limit
	cfg     Config
	suffix  string
	win     window
	g       gcra
	ttl     time.Duration
	graceMs int64
	cache   [cacheShards]cacheShard

	casRetries, casFailures, casOps atomic.Int64
	// coalesced counts decisions that joined another's store call;
	// refundErrors Refund-mode give-backs of a batch that failed.
	coalesced, refundErrors atomic.Int64
}

var _ Allower = (*Limiter)(nil)

const cacheShards = 64

type cacheShard struct {
	mu sync.Mutex
	m  map[string]*winEntry
	// fl holds the keys with a store call in flight (coalesce.go): the
	// batch waiting for it, or nil when none is.
	fl map[string]*pendingBatch
}

// winEntry is what one worker knows of one identity's windows.
type winEntry struct {
	id   int64 // newest sub-window this entry has seen
	seen bool  // the sub-window id exists in the store (we added/incremented it)
	warm bool  // other workers counted the sub-window before id too
	// mine is what this worker added to sub-window id; others is set once
	// the store's count exceeded it (other workers are counting too).
	mine   int64
	others bool
	ids    []int64 // ring of closed sub-windows, slot = id mod n
	vals   []int64
}

// New returns a Limiter enforcing l over store with the default Config.
func New(store Store, l Limit) (*Limiter, error) { return NewWithConfig(store, l, Config{}) }

// NewWithConfig is New with explicit tuning.
func NewWithConfig(store Store, l Limit, cfg Config) (*Limiter, error) {
	if store == nil {
		return nil, fmt.Errorf("%w: nil store", ErrBadLimit)
	}
	if err := l.Validate(); err != nil {
		return nil, err
	}
	lim := &Limiter{store: store, l: l, cfg: cfg, suffix: limitSuffix(l), graceMs: cfg.Grace.Milliseconds()}
	if l.Algorithm != TokenBucket {
		var err error
		if lim.win, err = windowOf(l); err != nil {
			return nil, err
		}
	}
	switch l.Algorithm {
	case SlidingWindow:
		// A sub-window is read until it slides out: n+1 sub-windows after
		// its start, i.e. window + sub ≤ twice the window (+1 s because
		// memcached's clock ticks in seconds).
		lim.ttl = l.Window + time.Duration(lim.win.sub)*time.Millisecond + time.Second
	case FixedWindow:
		// A calendar window's TTL is set per window (windowTTL).
		lim.ttl = l.Window + time.Second
	case TokenBucket:
		lim.g = newGCRA(l)
		// Each write sets the TTL to tat − now + 1 s: the item is useless
		// once tat ≤ now.
	}
	for i := range lim.cache {
		lim.cache[i].m = make(map[string]*winEntry)
		lim.cache[i].fl = make(map[string]*pendingBatch)
	}
	return lim, nil
}

// Limit implements Allower.
func (lim *Limiter) Limit() Limit { return lim.l }

// bucketStats reports the token bucket's compare-and-swap behaviour:
// decisions that needed a cas, retries after a lost race, and decisions
// that gave up with ErrContention.
type bucketStats struct{ Ops, Retries, Failures int64 }

// bucketStats returns the counts so far (zero for window algorithms).
func (lim *Limiter) bucketStats() bucketStats {
	return bucketStats{lim.casOps.Load(), lim.casRetries.Load(), lim.casFailures.Load()}
}

// coalescedDecisions returns the number of decisions so far that shared another
// decision's store operation (see coalesce.go).
func (lim *Limiter) coalescedDecisions() int64 { return lim.coalesced.Load() }

// AllowN implements Allower.
func (lim *Limiter) AllowN(ctx context.Context, key string, now time.Time, n int64) (Result, error) {
	if n < 1 {
		return Result{}, ErrBadCost
	}
	if err := checkIdentity(key); err != nil {
		return Result{}, err
	}
	if lim.l.Algorithm == TokenBucket {
		return lim.coalesce(ctx, key, now, n, 0)
	}
	return lim.allowWindow(ctx, key, now, n)
}

// Undo implements Allower: it returns n units admitted at now.
func (lim *Limiter) Undo(ctx context.Context, key string, now time.Time, n int64) error {
	if n < 1 {
		return ErrBadCost
	}
	if err := checkIdentity(key); err != nil {
		return err
	}
	if lim.l.Algorithm == TokenBucket {
		return lim.undoBucket(ctx, key, now, n)
	}
	id := lim.win.id(unixMs(now))
	_, err := lim.store.Decr(ctx, windowKey(key, lim.suffix, id), uint64(n))
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	return err
}

// shardCap is the most entries one cache shard holds.
func (lim *Limiter) shardCap() int {
	return (lim.cfg.maxCachedKeys() + cacheShards - 1) / cacheShards
}

func (lim *Limiter) shard(key string) *cacheShard {
	return &lim.cache[xxhash.Sum64String(key)%cacheShards]
}

// entry returns the cache entry of key, creating it. s.mu held.
func (lim *Limiter) entry(s *cacheShard, key string, id int64) *winEntry {
	e := s.m[key]
	if e != nil {
		return e
	}
	if limit := lim.shardCap(); len(s.m) >= limit {
		lim.sweepShard(s, id)
		// Still crowded with active keys: evict arbitrary ones (map
		// order) down to three-quarters, so the bound holds and the
		// O(len) sweep runs at most once per limit/4 insertions.
		keep := limit - max(1, limit/4)
		for k := range s.m {
			if len(s.m) <= keep {
				break
			}
			delete(s.m, k)
		}
	}
	e = &winEntry{id: id}
	if n := lim.win.n; n > 0 {
		e.ids = make([]int64, n)
		e.vals = make([]int64, n)
		for i := range e.ids {
			e.ids[i] = math.MinInt64 // no sub-window
		}
	}
	s.m[key] = e
	return e
}

// sweepShard drops entries whose newest sub-window ended more than a
// window before sub-window id. s.mu held.
func (lim *Limiter) sweepShard(s *cacheShard, id int64) {
	for k, e := range s.m {
		if e.id+int64(lim.win.n)+1 < id {
			delete(s.m, k)
		}
	}
}

// Sweep drops cached state of keys idle for more than a window at now.
func (lim *Limiter) Sweep(now time.Time) {
	if lim.l.Algorithm == TokenBucket {
		return
	}
	id := lim.win.id(unixMs(now))
	for i := range lim.cache {
		s := &lim.cache[i]
		s.mu.Lock()
		lim.sweepShard(s, id)
		s.mu.Unlock()
	}
}

// cachedKeys returns the number of identities with cached window state.
func (lim *Limiter) cachedKeys() int {
	n := 0
	for i := range lim.cache {
		s := &lim.cache[i]
		s.mu.Lock()
		n += len(s.m)
		s.mu.Unlock()
	}
	return n
}

func (lim *Limiter) allowWindow(ctx context.Context, key string, now time.Time, n int64) (Result, error) {
	if n > lim.win.q {
		return lim.peekWindow(ctx, key, now, n)
	}
	return lim.coalesce(ctx, key, now, n, lim.win.id(unixMs(now)))
}

// peekWindow answers a request of more than the limit's quantity: it can
// never pass, so it is not counted; the current count is read (incr by 0).
func (lim *Limiter) peekWindow(ctx context.Context, key string, now time.Time, n int64) (Result, error) {
	var buf [8]int64
	counts, id, e, err := lim.peekCounts(ctx, key, now, &buf)
	if err != nil {
		return Result{}, err
	}
	return lim.win.result(counts, id, e, now.UnixNano(), n, false, -1), nil
}

// peekCounts reads the sub-window counts of key at now (counts[w.n] the
// current one, read with incr 0) without counting anything: the
// sub-window id and the elapsed ms e within it come with them.
func (lim *Limiter) peekCounts(ctx context.Context, key string, now time.Time, buf *[8]int64) (counts []int64, id, e int64, err error) {
	w := lim.win
	ms := floorDiv(now.UnixNano(), 1e6)
	id, start := w.locate(ms)
	counts = countsBuf(buf, w.n+1)
	s := lim.shard(key)
	s.mu.Lock()
	ent := lim.entry(s, key, id)
	current := id == ent.id
	missing := lim.cachedClosed(ent, id, current, counts)
	s.mu.Unlock()
	e = ms - start
	if len(missing) > 0 {
		if err := lim.fetchClosed(ctx, key, id, missing, counts, current && e >= lim.graceMs); err != nil {
			return nil, 0, 0, err
		}
	}
	cur, err := lim.peek(ctx, windowKey(key, lim.suffix, id))
	if err != nil {
		return nil, 0, 0, err
	}
	counts[w.n] = cur
	return counts, id, e, nil
}

// cachedClosed fills counts[0:w.n] with the closed sub-windows before id
// that ent has cached (none unless current) and returns the ids of the
// others, to fetch. s.mu held.
func (lim *Limiter) cachedClosed(ent *winEntry, id int64, current bool, counts []int64) []int64 {
	w := lim.win
	var missing []int64
	for i := 0; i < w.n; i++ {
		sid := id - int64(w.n) + int64(i)
		slot := floorMod(sid, w.n)
		if current && ent.ids[slot] == sid {
			counts[i] = ent.vals[slot]
		} else {
			missing = append(missing, sid)
		}
	}
	return missing
}

// countsBuf returns buf[:n] when it fits, else a fresh slice.
func countsBuf(buf *[8]int64, n int) []int64 {
	if n <= len(buf) {
		return buf[:n]
	}
	return make([]int64, n)
}

// windowBatch counts the decisions of ws (all in the sub-window of ws[0],
// each of at most the quantity) with one create-or-increment of their total
// cost, then decides each in order as if they had been counted one by one:
// waiter i sees the count before the batch plus the costs of waiters 0..i
// (minus, in Refund mode, the rejected ones before it). Refund-mode
// rejections are given back with one decrement of their total.
func (lim *Limiter) windowBatch(ctx context.Context, key string, ws []*waiter) {
	w := lim.win
	var total int64
	for _, wt := range ws {
		total += wt.n
	}
	nowNs := ws[0].now.UnixNano()
	ms := floorDiv(nowNs, 1e6)
	id, start := w.locate(ms)
	var buf [8]int64
	counts := countsBuf(&buf, w.n+1)
	cur, err := lim.countWindow(ctx, key, id, ms-start, total, counts)
	if err != nil {
		for _, wt := range ws {
			wt.finish(Result{}, err)
		}
		return
	}
	c := cur - total // the count before this batch
	var refund int64
	for _, wt := range ws {
		tNs := wt.now.UnixNano()
		e := floorDiv(tNs, 1e6) - start
		c += wt.n
		counts[w.n] = c
		// The decision is on the counts including this request.
		sl, allowed := w.slack(counts, e)
		if !allowed && (lim.l.OnReject == Refund || lim.l.OnReject == CountFirst && !w.charged(counts, e, wt.n)) {
			sl = -1
			c -= wt.n
			refund += wt.n
			counts[w.n] = max(0, c)
		}
		wt.finish(w.result(counts, id, e, tNs, wt.n, allowed, sl), nil)
	}
	if refund > 0 {
		if _, err := lim.store.Decr(ctx, windowKey(key, lim.suffix, id), uint64(refund)); err != nil && !errors.Is(err, ErrNotFound) {
			// The counts stay high (the strict side); the decisions stand.
			lim.refundErrors.Add(1)
		}
	}
}

// countWindow adds n to sub-window id of key (e ms into it), creating it if
// needed, fills counts[0:w.n] with the closed sub-windows (cache or store)
// and returns the current sub-window's count after the increment.
func (lim *Limiter) countWindow(ctx context.Context, key string, id, e, n int64, counts []int64) (int64, error) {
	var missing []int64 // sub-window ids to fetch
	s := lim.shard(key)
	s.mu.Lock()
	ent := lim.entry(s, key, id)
	current := id >= ent.id // false for a caller whose clock lags the entry
	if id > ent.id {
		// A key this worker counted in the previous sub-window is warm:
		// another worker has probably created the new one already, so
		// incr first; a cold key is added first.
		ent.warm = ent.seen && ent.others && id == ent.id+1
		ent.id, ent.seen, ent.others, ent.mine = id, false, false, 0
	}
	created := current && ent.seen // this worker counted in sub-window id
	seen := created || (current && ent.warm)
	missing = lim.cachedClosed(ent, id, current, counts)
	s.mu.Unlock()

	// Closed sub-windows are cached only once the newest of them ended
	// Config.Grace ago, so workers whose clocks lag can still add to it.
	cacheable := current && e >= lim.graceMs
	curKey := windowKey(key, lim.suffix, id)
	var cur int64
	var err error
	done := false
	if b, ok := lim.store.(Batcher); ok && (len(missing) > 0 || !created) {
		// One round trip: read the closed sub-windows and create-or-
		// increment the current one.
		cur, err = lim.batch(ctx, b, key, id, missing, counts, cacheable, curKey, n, lim.windowTTL(id, e))
		switch {
		case err == nil:
			done = true
		case errors.Is(err, ErrNotSupported), errors.Is(err, ErrContention):
			// Not batchable, or the item vanished between add and incr
			// (nothing counted): take the unbatched path.
		default:
			return 0, err
		}
	}
	if !done && len(missing) > 0 {
		// The store cannot batch (gomemcache has no pipelining): read the
		// closed sub-windows on another connection while counting in the
		// current one, so that a cold window waits for one round trip,
		// not two. If the read fails after the count succeeded, the
		// request stays counted (an error, and one count too many: the
		// strict side).
		f := lim.startFetchClosed(ctx, key, id, missing, len(counts), cacheable)
		cur, err = lim.bump(ctx, curKey, n, seen, lim.windowTTL(id, e))
		if ferr := f.wait(counts); err == nil {
			err = ferr
		}
		if err != nil {
			return 0, err
		}
		done = true
	}
	if !done {
		if cur, err = lim.bump(ctx, curKey, n, seen, lim.windowTTL(id, e)); err != nil {
			return 0, err
		}
	}
	if current {
		s.mu.Lock()
		if ent.id == id {
			ent.seen = true
			ent.mine += n
			ent.others = ent.others || cur > ent.mine
		}
		s.mu.Unlock()
	}
	return cur, nil
}

func floorMod(a int64, n int) int {
	m := a % int64(n)
	if m < 0 {
		m += int64(n)
	}
	return int(m)
}

// batch is fetchClosed and bump in one Batcher round trip.
func (lim *Limiter) batch(ctx context.Context, b Batcher, key string, id int64, missing, counts []int64, cache bool, curKey string, n int64, ttl time.Duration) (int64, error) {
	keys := make([]string, len(missing))
	for i, sid := range missing {
		keys[i] = windowKey(key, lim.suffix, sid)
	}
	vals, v, err := b.GetMultiIncr(ctx, keys, curKey, uint64(n), ttl)
	if err != nil {
		return 0, err
	}
	if v > 1<<62 {
		return 0, fmt.Errorf("%w: counter %d", ErrCorrupt, v)
	}
	if len(missing) > 0 {
		if err := lim.fillClosed(key, id, missing, keys, vals, counts, cache); err != nil {
			return 0, err
		}
	}
	return int64(v), nil
}

// fetchClosed reads the closed sub-windows missing from the cache in one
// multi-get, fills counts and caches them.
func (lim *Limiter) fetchClosed(ctx context.Context, key string, id int64, missing []int64, counts []int64, cache bool) error {
	keys := make([]string, len(missing))
	for i, sid := range missing {
		keys[i] = windowKey(key, lim.suffix, sid)
	}
	vals, err := lim.store.GetMulti(ctx, keys)
	if err != nil {
		return err
	}
	return lim.fillClosed(key, id, missing, keys, vals, counts, cache)
}

// closedFetch is fetchClosed running in its own goroutine, on its own
// copies of missing and counts (so that the caller's stay on its stack).
type closedFetch struct {
	errc    chan error
	missing []int64
	counts  []int64
	base    int64 // counts[i] is sub-window base+i
}

// startFetchClosed starts fetchClosed; wait returns its outcome.
func (lim *Limiter) startFetchClosed(ctx context.Context, key string, id int64, missing []int64, n int, cache bool) *closedFetch {
	f := &closedFetch{errc: make(chan error, 1), missing: slices.Clone(missing), counts: make([]int64, n), base: id - int64(lim.win.n)}
	go func() { f.errc <- lim.fetchClosed(ctx, key, id, f.missing, f.counts, cache) }()
	return f
}

// wait waits for the fetch and fills the fetched sub-windows into counts.
func (f *closedFetch) wait(counts []int64) error {
	err := <-f.errc
	if err == nil {
		for _, sid := range f.missing {
			counts[sid-f.base] = f.counts[sid-f.base]
		}
	}
	return err
}

// fillClosed puts the fetched closed sub-windows into counts and the cache.
func (lim *Limiter) fillClosed(key string, id int64, missing []int64, keys []string, vals map[string][]byte, counts []int64, cache bool) error {
	w := lim.win
	got := make([]int64, len(missing))
	for i, k := range keys {
		if b, ok := vals[k]; ok {
			var err error
			if got[i], err = parseCount(b); err != nil {
				return err
			}
		}
		counts[missing[i]-(id-int64(w.n))] = got[i]
	}
	if !cache {
		return nil
	}
	s := lim.shard(key)
	s.mu.Lock()
	if ent := s.m[key]; ent != nil && ent.id == id {
		for i, sid := range missing {
			slot := floorMod(sid, w.n)
			ent.ids[slot], ent.vals[slot] = sid, got[i]
		}
	}
	s.mu.Unlock()
	return nil
}

// windowTTL is the TTL of the store key of window id created e ms into
// it: the limit's, or for a calendar window the time left until it ends
// plus 1 s (memcached's clock ticks in seconds; a month's TTL exceeds 30
// days, which counter/memcached sends as an absolute time).
func (lim *Limiter) windowTTL(id, e int64) time.Duration {
	if lim.win.cal == nil {
		return lim.ttl
	}
	s := lim.win.calSpan(id)
	return time.Duration(s.end-s.start-e)*time.Millisecond + time.Second
}

// bump increments the current window by n, creating it if needed with
// ttl, and returns the new count. A window this worker has not seen is
// tried with add first (one round trip when nobody else created it).
func (lim *Limiter) bump(ctx context.Context, key string, n int64, seen bool, ttl time.Duration) (int64, error) {
	val := strconv.AppendInt(make([]byte, 0, 20), n, 10)
	for attempt := 0; attempt < 4; attempt++ {
		if seen || attempt > 0 {
			v, err := lim.store.Incr(ctx, key, uint64(n))
			if err == nil {
				if v > 1<<62 {
					return 0, fmt.Errorf("%w: counter %d", ErrCorrupt, v)
				}
				return int64(v), nil
			}
			if !errors.Is(err, ErrNotFound) {
				return 0, err
			}
		}
		err := lim.store.Add(ctx, key, val, ttl)
		if err == nil {
			return n, nil
		}
		if !errors.Is(err, ErrNotStored) {
			return 0, err
		}
	}
	return 0, fmt.Errorf("%w: %s keeps vanishing between add and incr", ErrContention, key)
}

// peek returns the count of a window without changing it.
func (lim *Limiter) peek(ctx context.Context, key string) (int64, error) {
	v, err := lim.store.Incr(ctx, key, 0)
	if errors.Is(err, ErrNotFound) {
		return 0, nil
	}
	return int64(v), err
}
