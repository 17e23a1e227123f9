package counter_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/poplimit/poplimit/counter"
)

func TestAllowAll(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			tests := []struct {
				name          string
				mode          counter.OnReject
				wantWideCount int64 // units the 10/min limit holds after 5 requests
			}{
				{"refund leaves no phantom counts", counter.Refund, 2},
				{"count counts every request in every limit", counter.Count, 5},
			}
			for _, tc := range tests {
				t.Run(tc.name, func(t *testing.T) {
					wide := b.allower(t, counter.Limit{Name: "wide", Quantity: 10, Window: time.Minute, OnReject: tc.mode})
					narrow := b.allower(t, counter.Limit{Name: "narrow", Algorithm: counter.FixedWindow, Quantity: 2, Window: time.Minute, OnReject: tc.mode})
					kw, kn := uniqueKey(t, "wide"), uniqueKey(t, "narrow")
					checks := []counter.Check{{Allower: wide, Key: kw}, {Allower: narrow, Key: kn}}
					admitted := 0
					for i := 0; i < 5; i++ {
						r, rs, err := counter.AllowAll(ctx, t0.Add(time.Second), 1, checks...)
						if err != nil {
							t.Fatal(err)
						}
						if len(rs) != 2 || r.Allowed != (rs[0].Allowed && rs[1].Allowed) {
							t.Fatalf("request %d: %+v %+v", i, r, rs)
						}
						if r.Allowed {
							admitted++
							if r != rs[1] { // narrow has the least remaining fraction
								t.Fatalf("request %d: closest %+v, want narrow %+v", i, r, rs[1])
							}
						} else if r.Limit != 2 || r.RetryAfter != 59*time.Second {
							t.Fatalf("request %d: closest %+v, want narrow's rejection", i, r)
						}
					}
					if admitted != 2 {
						t.Fatalf("admitted %d, want 2", admitted)
					}
					// What the wide limit holds: it admits 10−held more.
					held := int64(0)
					for {
						r, err := wide.AllowN(ctx, kw, t0.Add(time.Second), 1)
						if err != nil {
							t.Fatal(err)
						}
						if !r.Allowed {
							break
						}
						held++
					}
					if got := 10 - held; got != tc.wantWideCount {
						t.Fatalf("wide limit holds %d units, want %d", got, tc.wantWideCount)
					}
				})
			}
		})
	}
}

// failing is an Allower whose store is down.
type failing struct{ l counter.Limit }

var errDown = errors.New("store down")

func (f failing) AllowN(context.Context, string, time.Time, int64) (counter.Result, error) {
	return counter.Result{}, errDown
}
func (f failing) Undo(context.Context, string, time.Time, int64) error { return errDown }
func (f failing) Limit() counter.Limit                                 { return f.l }

func TestAllowAllErrorUndoes(t *testing.T) {
	lo, err := counter.NewLocal(counter.Limit{Quantity: 1, Window: time.Minute, OnReject: counter.Refund})
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = counter.AllowAll(ctx, t0, 1, counter.Check{Allower: lo, Key: "k"}, counter.Check{Allower: failing{}, Key: "k"})
	if !errors.Is(err, errDown) {
		t.Fatalf("err = %v", err)
	}
	if r, _ := lo.AllowN(ctx, "k", t0, 1); !r.Allowed {
		t.Fatal("the admitted unit was not undone after the error")
	}
}

func TestAllowAllRejectedPicksLongestRetry(t *testing.T) {
	short, _ := counter.NewLocal(counter.Limit{Algorithm: counter.FixedWindow, Quantity: 1, Window: time.Second})
	long, _ := counter.NewLocal(counter.Limit{Algorithm: counter.FixedWindow, Quantity: 1, Window: time.Hour})
	checks := []counter.Check{{Allower: short, Key: "k"}, {Allower: long, Key: "k"}}
	if r, _, _ := counter.AllowAll(ctx, t0, 1, checks...); !r.Allowed {
		t.Fatal("first request rejected")
	}
	r, rs, err := counter.AllowAll(ctx, t0, 1, checks...)
	if err != nil || r.Allowed || r.RetryAfter != time.Hour || rs[0].RetryAfter != time.Second {
		t.Fatalf("got %+v %+v %v", r, rs, err)
	}
}

func TestAllowAllCost(t *testing.T) {
	wide, _ := counter.NewLocal(counter.Limit{Name: "wide", Algorithm: counter.FixedWindow, Quantity: 10, Window: time.Minute, OnReject: counter.Refund})
	narrow, _ := counter.NewLocal(counter.Limit{Name: "narrow", Algorithm: counter.FixedWindow, Quantity: 2, Window: time.Minute})
	checks := []counter.Check{{Allower: wide, Key: "k", Cost: 3}, {Allower: narrow, Key: "k"}}
	r, rs, err := counter.AllowAll(ctx, t0, 2, checks...)
	if err != nil || !r.Allowed || rs[0].Remaining != 4 || rs[1].Remaining != 0 {
		t.Fatalf("cost 3 × 2 units in wide, 2 in narrow: got %+v %+v %v", r, rs, err)
	}
	// Narrow (cost 0 = 1) refuses; the 3 units wide admitted are undone.
	if r, rs, err = counter.AllowAll(ctx, t0, 1, checks...); err != nil || r.Allowed || !rs[0].Allowed || rs[0].Remaining != 1 {
		t.Fatalf("narrow should refuse, wide admit 3 units: %+v %+v %v", r, rs, err)
	}
	if res, _ := wide.AllowN(ctx, "k", t0, 4); !res.Allowed || res.Remaining != 0 {
		t.Fatalf("wide after the refused request: %+v, want the 4 units left (the refused 3 undone)", res)
	}
}

func TestClosest(t *testing.T) {
	ok := func(rem, lim int64) counter.Result { return counter.Result{Allowed: true, Remaining: rem, Limit: lim} }
	no := func(retry time.Duration) counter.Result {
		return counter.Result{Limit: 1, RetryAfter: retry}
	}
	for _, tc := range []struct {
		name string
		rs   []counter.Result
		want int
	}{
		{"none", nil, -1},
		{"one admission", []counter.Result{ok(5, 10)}, 0},
		{"least remaining share", []counter.Result{ok(5, 10), ok(1, 100), ok(3, 4)}, 1},
		{"share tie goes to the first", []counter.Result{ok(1, 2), ok(5, 10)}, 0},
		{"share compared exactly", []counter.Result{ok(1<<62-1, 1<<62), ok(1<<62-2, 1<<62-1)}, 1},
		{"zero limit counts as nothing used", []counter.Result{ok(0, 0), ok(9, 10)}, 1},
		{"zero limit ties with a full one", []counter.Result{ok(10, 10), ok(0, 0)}, 0},
		{"a rejection beats any admission", []counter.Result{ok(0, 10), no(time.Second)}, 1},
		{"longest retry among rejections", []counter.Result{no(time.Second), ok(0, 1), no(time.Hour), no(time.Minute)}, 2},
		{"retry tie goes to the first", []counter.Result{no(time.Minute), no(time.Minute)}, 0},
		{"a rejection with a zero limit is a rejection", []counter.Result{ok(0, 10), {RetryAfter: time.Second}}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := counter.Closest(tc.rs); got != tc.want {
				t.Fatalf("Closest = %d, want %d", got, tc.want)
			}
		})
	}
}
