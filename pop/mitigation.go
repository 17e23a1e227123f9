package pop

import (
	"sync"
	"time"

	"github.com/cespare/xxhash/v2"
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

// put blocks key until until. When the shard is full one sampled entry is
// dropped, the one with the earliest deadline, so an entry already expired
// at now goes first whenever the sample holds one.
func (c *mitigationCache) put(key string, now, until time.Time, e mitEntry) {
	e.until = until.UnixNano()
	s := c.shard(key)
	s.mu.Lock()
	if _, ok := s.m[key]; !ok && len(s.m) >= c.perShard {
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
