package counter_test

import (
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
