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
