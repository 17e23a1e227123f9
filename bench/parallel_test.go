package bench

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
)

func TestParallel(t *testing.T) {
	for _, c := range []struct{ n, par int }{{0, 4}, {1, 0}, {100, 1}, {1000, 8}} {
		seen := make([]atomic.Int32, c.n)
		if err := Parallel(context.Background(), c.n, c.par, func(i int) { seen[i].Add(1) }); err != nil {
			t.Fatal(err)
		}
		for i := range seen {
			if v := seen[i].Load(); v != 1 {
				t.Fatalf("n=%d par=%d: index %d run %d times", c.n, c.par, i, v)
			}
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	var ran atomic.Int32
	err := Parallel(ctx, 1000, 2, func(i int) {
		if ran.Add(1) == 10 {
			cancel()
		}
	})
	if !errors.Is(err, context.Canceled) || ran.Load() >= 1000 {
		t.Fatalf("cancelled run: err %v, %d calls", err, ran.Load())
	}
	var f firstError
	f.set(nil)
	f.set(errors.New("a"))
	f.set(errors.New("b"))
	if f.err == nil || f.err.Error() != "a" {
		t.Fatalf("first error %v", f.err)
	}
}
