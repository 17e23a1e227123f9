package pop

// Step 3, the mitigation cache: an identity known to be over a limit is
// rejected locally until its estimate falls back, with zero store
// operations; flags shared through the store carry mitigation timeouts
// to every worker of the PoP.

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/poplimit/poplimit/counter"
	"github.com/poplimit/poplimit/pop/policy"
)

const mitShards = 32

// mitigationCache remembers identities that are over a limit and until when,
// so they are rejected without a store call (Cloudflare's key saving). It is
// bounded: when a shard is full, an insert looks at a few random entries
// and drops the one expiring first (an expired one if the sample holds
// any), so an insert costs O(1) however full the cache; a dropped entry
// only costs a store call. Each policy of a
// snapshot owns one; a policy whose definition changes gets a new, empty
// one, so a raised limit is never blocked by a stale entry.
type mitigationCache struct {
	perShard int
	shards   [mitShards]mitShard
}

type mitShard struct {
	mu       sync.RWMutex
	m        map[string]mitEntry
	examined int // entries looked at by evict, for tests
}

type mitEntry struct {
	until   int64 // unix nanoseconds
	at      int64 // unix nanoseconds of the rejection that made the entry
	binding LimitResult
	all     []LimitResult // read-only once stored
	tier    string
}

func newMitigationCache(max int) *mitigationCache {
	per := max / mitShards
	if per < 1 {
		per = 1
	}
	c := &mitigationCache{perShard: per}
	for i := range c.shards {
		c.shards[i].m = make(map[string]mitEntry)
	}
	return c
}

func (c *mitigationCache) shard(key string) *mitShard {
	return &c.shards[xxhash.Sum64String(key)%mitShards]
}

// get returns the entry for key if it still blocks at now.
func (c *mitigationCache) get(key string, now time.Time) (mitEntry, bool) {
	s := c.shard(key)
	s.mu.RLock()
	e, ok := s.m[key]
	s.mu.RUnlock()
	if !ok || now.UnixNano() >= e.until {
		return mitEntry{}, false
	}
	return e, true
}

// put blocks key until until, unless an entry of the same tier already
// blocks it longer: rejections of one burst finish in any order, and the
// later instant is the one computed on more of the counts. When the shard
// is full one sampled entry is dropped, the one with the earliest
// deadline, so an entry already expired at now goes first whenever the
// sample holds one.
func (c *mitigationCache) put(key string, now, until time.Time, e mitEntry) {
	e.until = until.UnixNano()
	s := c.shard(key)
	s.mu.Lock()
	old, ok := s.m[key]
	if ok && old.tier == e.tier && old.until > e.until && old.until > now.UnixNano() {
		s.mu.Unlock()
		return
	}
	if !ok && len(s.m) >= c.perShard {
		s.evict(len(s.m) - c.perShard + 1)
	}
	s.m[key] = e
	s.mu.Unlock()
}

// evictSample is how many entries one insert into a full shard looks at.
const mitEvictSample = 8

// evict drops at least n entries, looking at no more than
// max(n, mitEvictSample) of them (map iteration order is random, so they
// are a sample): each time, the sampled entry that expires first (an
// expired one if any) goes. put calls it with n = 1. Caller holds mu.
func (s *mitShard) evict(n int) {
	for n > 0 && len(s.m) > 0 {
		var (
			victim string
			until  int64
			seen   int
		)
		for k, e := range s.m {
			if seen == 0 || e.until < until {
				victim, until = k, e.until
			}
			if seen++; seen == mitEvictSample {
				break
			}
		}
		s.examined += seen
		delete(s.m, victim)
		n--
	}
}

// len is the number of entries (expired included), for tests and metrics.
func (c *mitigationCache) len() int {
	n := 0
	for i := range c.shards {
		c.shards[i].mu.RLock()
		n += len(c.shards[i].m)
		c.shards[i].mu.RUnlock()
	}
	return n
}

// replay is the rejection e remembers, aged to now.
func (e mitEntry) replay(now time.Time) Decision {
	age := time.Duration(now.UnixNano() - e.at)
	b := e.binding
	b.Result.Allowed = false
	b.Result.Remaining = 0
	b.Result.RetryAfter = time.Duration(e.until - now.UnixNano())
	b.Result.Reset = max(b.Result.Reset-age, b.Result.RetryAfter)
	return Decision{Reason: ReasonMitigated, Binding: b, All: e.all}
}

// Shared mitigation flags. A limit with a mitigation_timeout that rejects
// an identity, and a limit counted by response that the identity
// exhausted, raise a flag: the store key mitKey+flagEnforce (mitKey+
// flagShadow for a dry-run limit) holding "<until unix ns> <limit>",
// added with a TTL reaching until. Every worker reads the identity's two
// flags (one multi-get, on the identity's shard) before counting it, so a
// worker that never saw the identity blocks it as well; a flag found is
// kept in the local mitigation cache until it ends, so an identity being
// blocked costs the store nothing more. A flag that cannot be read (store
// trouble) blocks nothing: the count decides.
const (
	flagEnforce = "m"
	flagShadow  = "n"
)

// flags is what readFlags found: a rejection to answer (block), and until
// when a dry-run flag would have blocked (zero when none).
type flags struct {
	block       *Decision
	shadowUntil time.Time
	shadowLimit string
}

// readFlags reads the identity's shared flags.
func (l *Limiter) readFlags(ctx context.Context, p *compiledPolicy, rs *rules, mitKey string, now time.Time) flags {
	var fl flags
	if e, ok := p.mit.get(mitKey+flagShadow, now); ok && e.tier == rs.tier {
		fl.shadowUntil, fl.shadowLimit = time.Unix(0, e.until), e.binding.Limit.Name
	}
	if l.breaker.State() == BreakerOpen {
		return fl // the store is down: the fail mode decides
	}
	sctx := newStoreCtx(ctx, time.Now().Add(l.dl.Current()))
	vals, err := l.store.GetMulti(sctx, []string{mitKey + flagEnforce, mitKey + flagShadow})
	sctx.release()
	if err != nil {
		l.cfg.Metrics.flag(p.spec.Name, "read_error")
		return fl
	}
	for _, suffix := range []string{flagEnforce, flagShadow} {
		until, name, ok := parseFlag(vals[mitKey+suffix])
		if !ok || !until.After(now) {
			continue
		}
		r := rs.rule(name)
		if r == nil {
			continue // a limit this tier no longer has
		}
		l.cfg.Metrics.flag(p.spec.Name, "hit")
		d := flagDecision(r.spec.Limit, now, until)
		if suffix == flagEnforce {
			p.mit.put(mitKey, now, until, mitEntry{at: now.UnixNano(), binding: d.Binding, tier: rs.tier})
			fl.block = &d
			return fl
		}
		p.mit.put(mitKey+flagShadow, now, until, mitEntry{at: now.UnixNano(), binding: d.Binding, tier: rs.tier})
		fl.shadowUntil, fl.shadowLimit = until, name
	}
	return fl
}

// flagDecision is the rejection of an identity flagged by lim until until.
func flagDecision(lim counter.Limit, now, until time.Time) Decision {
	ra := until.Sub(now)
	return Decision{Reason: ReasonMitigated, Binding: LimitResult{Limit: lim,
		Result: counter.Result{Limit: policy.Allowance(lim), Reset: ra, RetryAfter: ra}}}
}

// remember keeps rejection d of the identity at mitKey (suffix "" for the
// enforcing count, flagShadow for the dry run) in the local mitigation
// cache until it ends, and for the binding limit's mitigation_timeout
// when that is longer; a timeout is also raised as the shared flag. It
// returns d with the Retry-After of that timeout.
func (l *Limiter) remember(ctx context.Context, p *compiledPolicy, rs *rules, mitKey, suffix string, d Decision, now time.Time) Decision {
	until := now.Add(d.Binding.Result.RetryAfter)
	r := rs.rule(d.Binding.Limit.Name)
	shared := r != nil && r.spec.MitigationTimeout > 0
	if shared {
		until = maxTime(until, now.Add(r.spec.MitigationTimeout))
		d.Binding.Result.RetryAfter = until.Sub(now)
	}
	local := mitKey
	if suffix == flagShadow {
		local = mitKey + flagShadow
	}
	p.mit.put(local, now, until, mitEntry{at: now.UnixNano(), binding: d.Binding, all: d.All, tier: rs.tier})
	l.cfg.Metrics.mitigationInsert(p.spec.Name)
	if shared {
		if suffix == "" {
			suffix = flagEnforce
		}
		l.raiseFlag(ctx, p, mitKey+suffix, r.spec.Limit.Name, now, until)
	}
	return d
}

// raiseFlag stores the flag key (limit name, until) with a TTL reaching
// until, or lengthens a shorter one already there.
func (l *Limiter) raiseFlag(ctx context.Context, p *compiledPolicy, key, limit string, now, until time.Time) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.dl.Current())
	defer cancel()
	val := []byte(strconv.FormatInt(until.UnixNano(), 10) + " " + limit)
	// memcached TTLs are whole seconds: round up, so the flag never ends
	// before until (its value says exactly when it does).
	ttl := until.Sub(now).Truncate(time.Second) + time.Second
	for range 3 {
		err := l.store.Add(rctx, key, val, ttl)
		if err == nil {
			l.cfg.Metrics.flag(p.spec.Name, "raised")
			return
		}
		if !errors.Is(err, counter.ErrNotStored) {
			break
		}
		old, cas, err := l.store.Gets(rctx, key)
		if errors.Is(err, counter.ErrNotFound) {
			continue // expired meanwhile: add again
		}
		if err != nil {
			break
		}
		if prev, _, ok := parseFlag(old); ok && !prev.Before(until) {
			return // a flag at least as long is up
		}
		err = l.store.CompareAndSwap(rctx, key, val, cas, ttl)
		if err == nil {
			l.cfg.Metrics.flag(p.spec.Name, "raised")
			return
		}
		if !errors.Is(err, counter.ErrCASConflict) && !errors.Is(err, counter.ErrNotFound) {
			break
		}
	}
	l.cfg.Metrics.flag(p.spec.Name, "write_error")
}

// parseFlag reads "<until unix ns> <limit>".
func parseFlag(b []byte) (until time.Time, limit string, ok bool) {
	ns, name, found := strings.Cut(strings.TrimSpace(string(b)), " ")
	v, err := strconv.ParseInt(ns, 10, 64)
	if !found || err != nil || v <= 0 {
		return time.Time{}, "", false
	}
	return time.Unix(0, v), name, true
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// rule is the limit of rs named name, nil if none.
func (rs *rules) rule(name string) *rule {
	for _, r := range rs.limits {
		if r.spec.Limit.Name == name {
			return r
		}
	}
	return nil
}

// countsAtAdmission reports whether some limit of rs is counted before
// the request goes upstream (not all count by response).
func (rs *rules) countsAtAdmission() bool {
	for _, r := range rs.limits {
		if !r.after {
			return true
		}
	}
	return false
}
