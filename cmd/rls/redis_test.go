package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/poplimit/poplimit/bench/fixture"
)

// TestRedisStoreExact: with --store redis://… (a Redis Cluster of 3
// masters + 3 replicas) and each process's own clock, 1,000 requests from 128
// concurrent gRPC clients over 2 rls processes at one descriptor limited
// to 100 get exactly 100 OK, for a fixed window and a token bucket (one
// Lua script per decision on the key's master), 2 runs each.
func TestRedisStoreExact(t *testing.T) {
	c := fixture.SharedRedisCluster(t)
	p := &rlsPoP{dir: t.TempDir()}
	// A fixed 5 s deadline: a script that answers after its request's
	// deadline has taken a token while the local budget decides. The two
	// processes' requests reach the shard out of their nows' order: the
	// bucket decides each at the latest now it has seen.
	p.startRLS(t, fixture.Binary(t, "rls"), 2, "--store", "redis://"+strings.Join(c.Addrs(), ","),
		"--store-deadline", "5s")
	for run := range 2 {
		awayFromMinuteEnd()
		for _, key := range []string{"fixed", "bucket"} {
			v := fmt.Sprintf("redis%d-%d", run, time.Now().UnixNano())
			if ok := p.burst(t, key, v, 1000, 128); ok != 100 {
				t.Errorf("run %d %s: %d OK of 1000, want exactly 100", run, key, ok)
			}
		}
	}
}
