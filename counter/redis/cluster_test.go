package redis_test

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/poplimit/poplimit/bench/fixture"
	"github.com/poplimit/poplimit/counter"
	"github.com/poplimit/poplimit/counter/redis"
)

// TestReshardAndFailoverUnderLoad: 8 goroutines decide on 300 identities
// of a cluster of its own while (1) redis-cli --cluster reshard moves 300
// slots between two masters: MOVED and ASK are followed, no decision
// fails; then (2) a master is killed: decisions on its slots fail (store
// errors, for pop's breaker and fail modes) until its replica is promoted,
// after which every identity is decided again (REDIS_TEST_NOPIPELINE=1:
// the same without autopipelining).
func TestReshardAndFailoverUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	c := fixture.RedisCluster(t)
	st, err := redis.New(redis.Config{Addrs: c.Addrs(), Timeout: 500 * time.Millisecond, NoPipeline: os.Getenv("REDIS_TEST_NOPIPELINE") != ""})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	a := allower(t, st, counter.Limit{Algorithm: counter.FixedWindow, Quantity: 1 << 30, Window: time.Hour})
	keys := make([]string, 300)
	for i := range keys {
		keys[i] = counter.Key("id", fmt.Sprint(i))
	}
	var ok, failed atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := g; ; i += 8 {
				select {
				case <-stop:
					return
				default:
				}
				dctx, cancel := context.WithTimeout(ctx, time.Second)
				_, err := a.AllowN(dctx, keys[i%len(keys)], time.Now(), 1)
				cancel()
				if err != nil {
					failed.Add(1)
				} else {
					ok.Add(1)
				}
			}
		}()
	}
	defer func() { close(stop); wg.Wait() }()
	rctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	nodes, err := c.ClusterNodes(rctx)
	if err != nil {
		t.Fatal(err)
	}
	var masters []int
	for i, n := range nodes {
		if n.Master && !n.Failed {
			masters = append(masters, i)
		}
	}
	from, to, victim := nodes[masters[0]], nodes[masters[1]], nodes[masters[2]]
	before := ok.Load()
	if err := c.Reshard(rctx, from, to, 300); err != nil {
		t.Fatal(err)
	}
	if f := failed.Load(); f != 0 {
		t.Fatalf("resharding 300 slots: %d decisions failed (%d succeeded)", f, ok.Load()-before)
	}
	t.Logf("reshard of 300 slots: %d decisions, none failed", ok.Load()-before)

	c.Node(victim.Addr).Kill()
	killed := time.Now()
	if err := waitFor(rctx, func() error { return c.Healthy(5) }); err != nil {
		t.Fatalf("replica not promoted: %v", err)
	}
	promoted := time.Since(killed)
	// Recovery: every identity is decided again.
	if err := waitFor(rctx, func() error {
		for _, k := range keys {
			if _, err := a.AllowN(ctx, k, time.Now(), 1); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatalf("after the failover: %v", err)
	}
	t.Logf("master killed: replica promoted after %v, every identity decided again after %v; %d decisions failed meanwhile, %d succeeded in all",
		promoted.Round(time.Millisecond), time.Since(killed).Round(time.Millisecond), failed.Load(), ok.Load())
}

// waitFor polls f every 100 ms until it returns nil or ctx ends.
func waitFor(ctx context.Context, f func() error) error {
	for {
		err := f()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(100 * time.Millisecond):
		}
	}
}
