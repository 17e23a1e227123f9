package counter_test

import (
	"context"
	"fmt"
	"time"

	"github.com/poplimit/poplimit/counter"
	"github.com/poplimit/poplimit/counter/memstore"
)

// A sliding window over a store shared by every worker of a PoP. In
// production the store is memcached through mcproxy:
//
//	c := memcached.NewClient(memcached.Config{Servers: []string{"127.0.0.1:22122"}})
//	store := memcached.NewStore(c)
func ExampleNew() {
	store := memstore.New()
	lim, err := counter.New(store, counter.Limit{Name: "api", Quantity: 3, Window: time.Minute})
	if err != nil {
		panic(err)
	}
	key := counter.Key("ip", "203.0.113.7")
	now := time.Date(2026, 1, 1, 12, 0, 30, 0, time.UTC)
	for i := 0; i < 4; i++ {
		r, err := lim.AllowN(context.Background(), key, now, 1)
		if err != nil {
			panic(err) // the store could not answer; a denial is not an error
		}
		fmt.Printf("allowed=%v remaining=%d retry-after=%v\n", r.Allowed, r.Remaining, r.RetryAfter)
	}
	// Output:
	// allowed=true remaining=2 retry-after=0s
	// allowed=true remaining=1 retry-after=0s
	// allowed=true remaining=0 retry-after=0s
	// allowed=false remaining=0 retry-after=1m0s
}

// The in-process token bucket: 10 per second, bursts of 5.
func ExampleNewLocal() {
	lo, _ := counter.NewLocal(counter.Limit{Algorithm: counter.TokenBucket, Quantity: 10, Window: time.Second, Burst: 5})
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	r, _ := lo.AllowN(context.Background(), "client-1", now, 5)
	fmt.Println(r.Allowed, r.Remaining, r.Reset)
	r, _ = lo.AllowN(context.Background(), "client-1", now, 1)
	fmt.Println(r.Allowed, r.RetryAfter)
	// A lone client that waits RetryAfter is admitted.
	r, _ = lo.AllowN(context.Background(), "client-1", now.Add(r.RetryAfter), 1)
	fmt.Println(r.Allowed)
	// Output:
	// true 0 500ms
	// false 200ms
	// true
}

func ExampleKey() {
	fmt.Println(counter.Key("tenant", "acme", "route", "/v1/pay"))
	fmt.Println(counter.Key("user", "zoë")) // unsafe parts are hashed
	// Output:
	// r{tenant|acme|route|/v1/pay}
	// r{user|~l53jk0UNHlo}
}

// A compound rule: 10 per second and 100 per hour, both Refund, so the
// hourly quota is not spent by requests the per-second limit rejects.
func ExampleAllowAll() {
	ctx := context.Background()
	perSecond, _ := counter.NewLocal(counter.Limit{Name: "burst", Quantity: 10, Window: time.Second, OnReject: counter.Refund})
	perHour, _ := counter.NewLocal(counter.Limit{Name: "hourly", Algorithm: counter.FixedWindow, Quantity: 100, Window: time.Hour, OnReject: counter.Refund})
	key := counter.Key("api-key", "k-123")
	now := time.Date(2026, 1, 1, 9, 0, 0, 0, time.UTC)
	for i := 0; i < 12; i++ {
		r, _, _ := counter.AllowAll(ctx, now, 1, counter.Check{Allower: perSecond, Key: key}, counter.Check{Allower: perHour, Key: key})
		if !r.Allowed {
			fmt.Println("request", i+1, "rejected, retry after", r.RetryAfter)
		}
	}
	r, _ := perHour.AllowN(ctx, key, now, 1)
	fmt.Println("hourly remaining", r.Remaining)
	// Output:
	// request 11 rejected, retry after 1.1s
	// request 12 rejected, retry after 1.1s
	// hourly remaining 89
}
