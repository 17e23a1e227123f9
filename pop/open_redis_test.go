package pop_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/poplimit/poplimit/bench/fixture"
	"github.com/poplimit/poplimit/counter/store"
	"github.com/poplimit/poplimit/pop"
)

// TestOpenRedis runs ExampleOpen's service with Options.Store.Redis on a real
// Redis Cluster: the same answers as in process and on memcached, with the
// worker's clock and with the shard's.
func TestOpenRedis(t *testing.T) {
	c := fixture.SharedRedisCluster(t)
	want := "200 \"burst\";r=1;t=1\n200 \"burst\";r=0;t=1\n429 \"burst\";r=0;t=1\n"
	for _, serverTime := range []bool{false, true} {
		// Each run's keys must be fresh: flush the cluster's masters.
		for _, a := range c.Addrs() {
			_, _ = c.Cli(context.Background(), a, "flushall")
		}
		if serverTime {
			// The shard's clock is real time: start the three requests
			// at the start of a second, so that the 1 s window holds all.
			time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(time.Second + 10*time.Millisecond)))
		}
		var out strings.Builder
		serve(&out, pop.Options{Store: store.Config{Redis: "redis://" + strings.Join(c.Addrs(), ","), RedisServerTime: serverTime}})
		if out.String() != want {
			t.Fatalf("server time %v, through Redis:\n%s\nwant:\n%s", serverTime, out.String(), want)
		}
	}
}

func TestOpenRedisBadURL(t *testing.T) {
	l, err := pop.Open(context.Background(), pop.Options{PolicyDoc: []byte(exampleDoc), Store: store.Config{Redis: "redis://nohost"}})
	if err == nil || l != nil || !errors.Is(err, pop.ErrConfig) {
		t.Fatalf("Open = %v, %v; want ErrConfig", l, err)
	}
}
