package counter_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/poplimit/poplimit/counter"
)

// TestBucketLastTokenWhenNowsArriveOutOfOrder: workers read now before
// their call reaches the store, so a request can reach it after one with a
// later now. The bucket then decides at the later clock: the burst's last
// token is not refused for being a few µs early, and nothing beyond the
// burst is admitted.
func TestBucketLastTokenWhenNowsArriveOutOfOrder(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			for _, mode := range []counter.OnReject{counter.Refund, counter.Count, counter.CountFirst} {
				l := counter.Limit{Algorithm: counter.TokenBucket, Quantity: 3, Window: 3 * time.Second, OnReject: mode}
				a := b.allower(t, l)
				key := uniqueKey(t, strconv.Itoa(int(mode)))
				// The store's TTLs run on the wall clock (Redis): decide near it.
				base := t0
				if b.store == nil || b.name == "redis" {
					base = time.Now()
				}
				at := func(d time.Duration) time.Time { return base.Add(d) }
				order := []time.Duration{50 * time.Microsecond, 0, 20 * time.Microsecond, 10 * time.Microsecond, 30 * time.Microsecond}
				var got []bool
				for _, d := range order {
					r, err := a.AllowN(ctx, key, at(d), 1)
					if err != nil {
						t.Fatal(err)
					}
					got = append(got, r.Allowed)
				}
				want := []bool{true, true, true, false, false}
				for i := range want {
					if got[i] != want[i] {
						t.Fatalf("%v: allowed %v, want %v (nows arrived as %v)", mode, got, want, order)
					}
				}
				// A full second after the latest now, one token is back.
				r, err := a.AllowN(ctx, key, at(time.Second+50*time.Microsecond), 1)
				if err != nil {
					t.Fatal(err)
				}
				if mode == counter.Refund && !r.Allowed {
					t.Fatalf("%v: one interval after the burst: refused", mode)
				}
			}
		})
	}
}
