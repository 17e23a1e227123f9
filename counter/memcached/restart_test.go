package memcached_test

import (
	"context"
	"testing"
	"time"

	"github.com/poplimit/poplimit/bench/fixture"
	"github.com/poplimit/poplimit/counter"
	"github.com/poplimit/poplimit/counter/memcached"
)

// After memcached (or mcproxy) restarts, every pooled connection is dead.
// The first call on each must not fail: a worker would count those
// failures towards its breaker and fail open or closed across the fleet
// at every proxy restart. The stores retry once, on a fresh connection,
// a call that failed on a reused connection before any reply byte.
func TestStoresSurviveServerRestart(t *testing.T) {
	ms := fixture.Memcached(t, 1)
	m := ms[0]
	for _, sc := range []struct {
		name  string
		store counter.Store
	}{
		{"gomemcache", memcached.NewStore(memcached.NewClient(memcached.Config{Servers: []string{m.Addr}, Timeout: time.Second}))},
		{"pipe", memcached.NewPipeStore(memcached.PipeConfig{Addr: m.Addr, Timeout: time.Second})},
		{"pipe-mux", memcached.NewPipeStore(memcached.PipeConfig{Addr: m.Addr, Timeout: time.Second, Multiplex: 2})},
	} {
		t.Run(sc.name, func(t *testing.T) {
			ctx := context.Background()
			key := "restart:" + sc.name
			// Several connections in the pool, all idle afterwards.
			const conns = 4
			errs := make(chan error, conns)
			for i := 0; i < conns; i++ {
				go func() { errs <- sc.store.Add(ctx, key, []byte("0"), time.Minute) }()
			}
			for i := 0; i < conns; i++ {
				<-errs // one STORED, the others NOT_STORED
			}
			if err := m.Restart(ctx); err != nil {
				t.Fatal(err)
			}
			for i := 0; i < 2*conns; i++ {
				if err := sc.store.Add(ctx, key, []byte("7"), time.Minute); err != nil && err != counter.ErrNotStored {
					t.Fatalf("call %d after restart: %v", i, err)
				}
			}
			v, err := sc.store.Incr(ctx, key, 1)
			if err != nil || v != 8 {
				t.Fatalf("incr after restart: %d, %v; want 8", v, err)
			}
		})
	}
}
