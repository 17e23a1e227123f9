package bench

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/poplimit/poplimit/bench/fixture"
	"github.com/poplimit/poplimit/counter"
)

// TestInprocStoreClients: with either memcached client, four workers on
// one memcached share one count (a client at 2× its limit is admitted
// exactly the limit at one instant), and the pipelining client takes one
// round trip per sliding-window decision.
func TestInprocStoreClients(t *testing.T) {
	ms := fixture.Memcached(t, 1)
	now := time.Now()
	for _, tc := range []struct {
		client storeClient
		alg    counter.Algorithm
	}{
		{storeGomemcache, counter.FixedWindow},
		{storeGomemcache, counter.SlidingWindow},
		{storePipe, counter.FixedWindow},
		{storePipe, counter.SlidingWindow},
		{storePipeMux, counter.SlidingWindow},
		{"", counter.SlidingWindow},
	} {
		t.Run(string(tc.client)+"/"+fmt.Sprint(tc.alg), func(t *testing.T) {
			in, err := NewInproc([]Route{{Path: "/api", Quantity: 20, Window: time.Hour}},
				InprocConfig{Servers: []string{ms[0].Addr}, Workers: 4, Algorithm: tc.alg, client: tc.client})
			if err != nil {
				t.Fatal(err)
			}
			defer in.Close()
			client := "c-" + string(tc.client) + "-" + fmt.Sprint(tc.alg)
			admitted := 0
			for i := 0; i < 40; i++ {
				res, err := in.Decide(context.Background(), i, client, "/api", now)
				if err != nil {
					t.Fatal(err)
				}
				if res.Allowed {
					admitted++
				}
			}
			if admitted != 20 {
				t.Errorf("admitted %d of 40, want 20 (one shared count)", admitted)
			}
			rt := in.StoreStats().RoundTrips()
			if tc.client != storeGomemcache && tc.client != "" && tc.alg == counter.SlidingWindow && rt != 40 {
				t.Errorf("pipe client: %d round trips for 40 sliding-window decisions, want 40", rt)
			}
			if rt < 40 {
				t.Errorf("%d round trips for 40 decisions: not counted through the store", rt)
			}
		})
	}
}

func TestInprocStoreClientErrors(t *testing.T) {
	for _, cfg := range []InprocConfig{
		{Servers: []string{"127.0.0.1:1"}, client: "redis"},
		{Servers: []string{"127.0.0.1:1", "127.0.0.1:2"}, Direct: true, client: storePipe},
		{Servers: []string{"127.0.0.1:1", "127.0.0.1:2"}, Direct: true, client: storePipeMux},
	} {
		if _, err := NewInproc([]Route{{Path: "/", Quantity: 1, Window: time.Second}}, cfg); err == nil {
			t.Errorf("%+v: no error", cfg)
		}
	}
	// An unreachable address is a store error, not a panic.
	in, err := NewInproc([]Route{{Path: "/", Quantity: 1, Window: time.Second}},
		InprocConfig{Servers: []string{"127.0.0.1:1"}, client: storePipe, Timeout: 200 * time.Millisecond, Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := in.Decide(context.Background(), 0, "c", "/", time.Now()); err == nil || errors.Is(err, counter.ErrContention) {
		t.Errorf("unreachable store: err %v", err)
	}
}
