package redis

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/poplimit/poplimit/counter"
)

// Store also implements counter.Store (memcached's verbs over Redis), for
// what counts through the verbs rather than through a limit: pop's
// concurrency limits and mitigation flags, or counter.New over Redis. The
// rate limits themselves should use NewAllower (one atomic script per
// decision; counter.New's token bucket over these verbs needs gets/cas and
// may lose races).
var _ counter.Store = (*Store)(nil)

// Scripts of the verbs memcached has and Redis lacks: incr/decr of an
// existing counter only (NOT_FOUND otherwise), decr stopping at 0, and
// compare-and-swap on the value read by Gets.
var (
	incrScript = goredis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 0 then return false end
return redis.call('INCRBY', KEYS[1], ARGV[1])`)
	decrScript = goredis.NewScript(`
local v = redis.call('GET', KEYS[1])
if not v then return false end
local n = tonumber(v) - tonumber(ARGV[1])
if n < 0 then n = 0 end
redis.call('SET', KEYS[1], tostring(n), 'KEEPTTL')
return n`)
	casScript = goredis.NewScript(`
local v = redis.call('GET', KEYS[1])
if not v then return 0 end
if v ~= ARGV[1] then return 1 end
if tonumber(ARGV[3]) > 0 then
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
else
  redis.call('SET', KEYS[1], ARGV[2])
end
return 2`)
)

// Add implements counter.Store: SET NX with the TTL in ms.
func (s *Store) Add(ctx context.Context, key string, value []byte, ttl time.Duration) error {
	ok, err := s.c.SetNX(ctx, key, value, max(ttl, 0)).Result()
	if err != nil {
		return fmt.Errorf("redis: add %s: %w", key, err)
	}
	if !ok {
		return counter.ErrNotStored
	}
	return nil
}

// Incr implements counter.Store.
func (s *Store) Incr(ctx context.Context, key string, delta uint64) (uint64, error) {
	return s.counterOp(ctx, incrScript, "incr", key, delta)
}

// Decr implements counter.Store (stops at 0).
func (s *Store) Decr(ctx context.Context, key string, delta uint64) (uint64, error) {
	return s.counterOp(ctx, decrScript, "decr", key, delta)
}

func (s *Store) counterOp(ctx context.Context, sc *goredis.Script, verb, key string, delta uint64) (uint64, error) {
	if delta > 1<<62 {
		return 0, fmt.Errorf("redis: %s %s: delta %d above 2^62", verb, key, delta)
	}
	v, err := sc.Run(ctx, s.c, []string{key}, delta).Int64()
	if errors.Is(err, goredis.Nil) {
		return 0, counter.ErrNotFound
	}
	if err != nil {
		return 0, fmt.Errorf("redis: %s %s: %w", verb, key, err)
	}
	return uint64(v), nil
}

// GetMulti implements counter.Store: one MGET per hash tag (one round trip
// when the keys share one, as counter's do).
func (s *Store) GetMulti(ctx context.Context, keys []string) (map[string][]byte, error) {
	out := make(map[string][]byte, len(keys))
	byTag := map[string][]string{}
	var order []string
	for _, k := range keys {
		tag := HashTag(k)
		if _, ok := byTag[tag]; !ok {
			order = append(order, tag)
		}
		byTag[tag] = append(byTag[tag], k)
	}
	for _, tag := range order {
		ks := byTag[tag]
		vals, err := s.c.MGet(ctx, ks...).Result()
		if err != nil {
			return nil, fmt.Errorf("redis: mget %s: %w", ks[0], err)
		}
		for i, v := range vals {
			if str, ok := v.(string); ok {
				out[ks[i]] = []byte(str)
			}
		}
	}
	return out, nil
}

// casToken is the value Gets read: CompareAndSwap succeeds while the value
// is still the same (unlike memcached's version number, a value changed
// and changed back counts as unchanged).
type casToken string

// Gets implements counter.Store.
func (s *Store) Gets(ctx context.Context, key string) ([]byte, counter.CASToken, error) {
	v, err := s.c.Get(ctx, key).Result()
	if errors.Is(err, goredis.Nil) {
		return nil, nil, counter.ErrNotFound
	}
	if err != nil {
		return nil, nil, fmt.Errorf("redis: get %s: %w", key, err)
	}
	return []byte(v), casToken(v), nil
}

// CompareAndSwap implements counter.Store.
func (s *Store) CompareAndSwap(ctx context.Context, key string, value []byte, cas counter.CASToken, ttl time.Duration) error {
	tok, ok := cas.(casToken)
	if !ok {
		return fmt.Errorf("%w: foreign CAS token %T", counter.ErrCASConflict, cas)
	}
	r, err := casScript.Run(ctx, s.c, []string{key}, string(tok), value, strconv.FormatInt((max(ttl, 0)+time.Millisecond-1).Milliseconds(), 10)).Int64()
	if err != nil {
		return fmt.Errorf("redis: cas %s: %w", key, err)
	}
	switch r {
	case 0:
		return counter.ErrNotFound
	case 1:
		return counter.ErrCASConflict
	}
	return nil
}
