package counter_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/poplimit/poplimit/bench/fixture"
	"github.com/poplimit/poplimit/bench/fixture/procs"
	"github.com/poplimit/poplimit/counter"
	"github.com/poplimit/poplimit/counter/redis"
)

// redisBackends is the Redis Cluster store (counter/redis: the algorithm
// in one Lua script per decision) on the test binary's shared cluster,
// with the worker's clock, when redis-server is installed or required.
// Its counter.Store (memcached's verbs over Redis) is the store of the
// tests that need one.
func redisBackends(t *testing.T) []backend {
	t.Helper()
	if !procs.RedisInstalled() && !fixture.Required() {
		return nil
	}
	c := fixture.SharedRedisCluster(t)
	st, err := redis.New(redis.Config{Addrs: c.Addrs(), Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return []backend{{name: "redis", store: func() counter.Store { return st }, allow: func(t testing.TB, l counter.Limit) counter.Allower {
		t.Helper()
		a, err := st.NewAllower(l)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}}}
}

// TestRedisAgreesWithLocal is the accuracy replay on Redis: the Lua
// sliding window (precision 1 and 4), fixed window and token bucket decide
// exactly like the in-process reference (NewLocal) on the first 8k
// requests of the accuracy trace, Result for Result.
func TestRedisAgreesWithLocal(t *testing.T) {
	bs := redisBackends(t)
	if len(bs) == 0 {
		fixture.RequireRedis(t)
	}
	s, tr := loadTrace(t, "../testdata/traces/sliding-accuracy.json")
	tr = tr[:min(len(tr), 8000)]
	w := time.Duration(s.WindowMs) * ms
	for _, l := range []counter.Limit{
		{Quantity: s.Quantity, Window: w},
		{Quantity: s.Quantity, Window: w, Precision: 4},
		{Algorithm: counter.FixedWindow, Quantity: s.Quantity, Window: w, OnReject: counter.Refund},
		{Algorithm: counter.TokenBucket, Quantity: s.Quantity, Window: w},
	} {
		t.Run(l.String(), func(t *testing.T) {
			lo, _ := counter.NewLocal(l)
			rd := bs[0].allower(t, l)
			run := uniqueKey(t)
			for i, ev := range tr {
				key := counter.Key("src", strconv.Itoa(int(ev.src)), run)
				now := t0.Add(time.Duration(ev.ms) * ms)
				a, _ := lo.AllowN(ctx, key, now, 1)
				b, err := rd.AllowN(ctx, key, now, 1)
				if err != nil {
					t.Fatal(err)
				}
				if a != b {
					t.Fatalf("request %d: local %+v, redis %+v", i, a, b)
				}
			}
		})
	}
}
