package counter_test

import (
	"testing"
	"time"

	"github.com/poplimit/poplimit/counter"
)

const ms = time.Millisecond

// step is one decision at t0+at; fields marked skip are not checked.
type step struct {
	at        time.Duration
	n         int64
	allowed   bool
	remaining int64
	retry     time.Duration
	reset     time.Duration
}

const skip = time.Duration(-1)

func TestSteps(t *testing.T) {
	tables := []struct {
		name  string
		limit counter.Limit
		steps []step
	}{
		{"sliding 250ms count", counter.Limit{Quantity: 10, Window: 250 * ms}, []step{
			{0, 4, true, 6, 0, 500 * ms},
			{100 * ms, 6, true, 0, 0, 400 * ms},
			{200 * ms, 1, false, 0, 96 * ms, 300 * ms},
			{296 * ms, 1, true, 0, 0, 454 * ms},
			{500 * ms, 3, true, 6, 0, 500 * ms},
			{500 * ms, 8, false, 0, 455 * ms, 500 * ms},
			{500 * ms, 11, false, 0, counter.Never, 500 * ms},
			{955 * ms, 8, true, 0, 0, 295 * ms},
		}},
		{"sliding 250ms refund", counter.Limit{Quantity: 10, Window: 250 * ms, OnReject: counter.Refund}, []step{
			{0, 10, true, 0, 0, 500 * ms},
			{10 * ms, 1, false, 0, 265 * ms, 490 * ms},
			{274 * ms, 1, false, 0, 1 * ms, 226 * ms},
			{275 * ms, 1, true, 0, 0, 475 * ms},
		}},
		{"sliding 1h count costs", counter.Limit{Quantity: 100, Window: time.Hour}, []step{
			{0, 40, true, 60, 0, 2 * time.Hour},
			{30 * time.Minute, 60, true, 0, 0, 90 * time.Minute},
			{time.Hour - ms, 1, false, 0, 71289 * ms, 3600001 * ms},
			{time.Hour + 71288*ms, 1, true, 0, 0, skip},
			{2 * time.Hour, 100, false, 0, 2 * time.Hour, 2 * time.Hour},
		}},
		{"sliding precision 4", counter.Limit{Quantity: 10, Window: time.Second, Precision: 4}, []step{
			{0, 4, true, 6, 0, 1250 * ms},
			{300 * ms, 3, true, 3, 0, 1200 * ms},
			{999 * ms, 3, true, 0, 0, 1001 * ms},
			{1000 * ms, 1, false, 0, 125 * ms, 1250 * ms},
			{1125 * ms, 1, true, 0, 0, 1125 * ms},
			{1250 * ms, 1, true, 1, 0, 1250 * ms},
		}},
		{"sliding precision 12 window-end burst", counter.Limit{Quantity: 12, Window: 1200 * ms, Precision: 12}, []step{
			{1150 * ms, 12, true, 0, 0, 1250 * ms},
			{1200 * ms, 1, false, 0, 1117 * ms, 1300 * ms},
			{2317 * ms, 1, true, 0, 0, 1283 * ms},
		}},
		{"fixed 250ms", counter.Limit{Algorithm: counter.FixedWindow, Quantity: 10, Window: 250 * ms}, []step{
			{0, 10, true, 0, 0, 250 * ms},
			{249 * ms, 1, false, 0, 1 * ms, 1 * ms},
			{249 * ms, 11, false, 0, counter.Never, 1 * ms},
			{250 * ms, 3, true, 7, 0, 250 * ms},
		}},
		{"fixed 1h refund", counter.Limit{Algorithm: counter.FixedWindow, Quantity: 100, Window: time.Hour, OnReject: counter.Refund}, []step{
			{time.Minute, 60, true, 40, 0, 59 * time.Minute},
			{2 * time.Minute, 50, false, 40, 58 * time.Minute, 58 * time.Minute},
			{3 * time.Minute, 40, true, 0, 0, 57 * time.Minute},
			{time.Hour, 1, true, 99, 0, time.Hour},
		}},
		{"bucket count", counter.Limit{Algorithm: counter.TokenBucket, Quantity: 10, Window: time.Second, Burst: 5}, []step{
			{0, 5, true, 0, 0, 500 * ms},
			{0, 1, false, 0, 200 * ms, 600 * ms},
			{200 * ms, 1, true, 0, 0, 500 * ms},
			{700 * ms, 3, true, 2, 0, 300 * ms},
			{700 * ms, 6, false, 2, counter.Never, 300 * ms},
		}},
		{"bucket refund", counter.Limit{Algorithm: counter.TokenBucket, Quantity: 10, Window: time.Second, Burst: 5, OnReject: counter.Refund}, []step{
			{0, 5, true, 0, 0, 500 * ms},
			{0, 1, false, 0, 100 * ms, 500 * ms},
			{100 * ms, 1, true, 0, 0, 500 * ms},
		}},
		{"bucket 1h", counter.Limit{Algorithm: counter.TokenBucket, Quantity: 3600, Window: time.Hour, Burst: 100}, []step{
			{0, 100, true, 0, 0, 100 * time.Second},
			{0, 1, false, 0, 2 * time.Second, 101 * time.Second},
			{2 * time.Second, 1, true, 0, 0, 100 * time.Second},
			{52 * time.Second, 10, true, 40, 0, 60 * time.Second},
		}},
	}
	for _, b := range backends(t) {
		for _, tb := range tables {
			t.Run(b.name+"/"+tb.name, func(t *testing.T) {
				a := b.allower(t, tb.limit)
				key := uniqueKey(t)
				for i, s := range tb.steps {
					r, err := a.AllowN(ctx, key, t0.Add(s.at), s.n)
					if err != nil {
						t.Fatalf("step %d: %v", i, err)
					}
					if r.Allowed != s.allowed || r.Remaining != s.remaining ||
						(s.retry != skip && r.RetryAfter != s.retry) || (s.reset != skip && r.Reset != s.reset) {
						t.Errorf("step %d at %v n=%d: got %+v, want allowed=%v remaining=%d retry=%v reset=%v",
							i, s.at, s.n, r, s.allowed, s.remaining, s.retry, s.reset)
					}
				}
			})
		}
	}
}

// TestBoundaryAttack: 100 requests at 00:00:59 and 100 at 00:01:01 under
// 100/minute. The fixed window admits all 200; the sliding window admits
// exactly one more at 00:01:01 (estimate 100×59/60 + 1) and rejects the
// 101st request of the last minute.
func TestBoundaryAttack(t *testing.T) {
	for _, b := range backends(t) {
		for _, tc := range []struct {
			alg       counter.Algorithm
			wantAfter int
		}{{counter.SlidingWindow, 1}, {counter.FixedWindow, 100}} {
			t.Run(b.name+"/"+[]string{"sliding", "fixed"}[tc.alg], func(t *testing.T) {
				a := b.allower(t, counter.Limit{Algorithm: tc.alg, Quantity: 100, Window: time.Minute})
				key := uniqueKey(t)
				admitted := func(at time.Duration) int {
					n := 0
					for i := 0; i < 100; i++ {
						r, err := a.AllowN(ctx, key, t0.Add(at), 1)
						if err != nil {
							t.Fatal(err)
						}
						if r.Allowed {
							n++
						}
					}
					return n
				}
				if got := admitted(59 * time.Second); got != 100 {
					t.Fatalf("00:00:59: admitted %d, want 100", got)
				}
				if got := admitted(61 * time.Second); got != tc.wantAfter {
					t.Fatalf("00:01:01: admitted %d, want %d", got, tc.wantAfter)
				}
			})
		}
	}
}
