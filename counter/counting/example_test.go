package counting_test

import (
	"context"
	"fmt"
	"time"

	"github.com/poplimit/poplimit/counter"
	"github.com/poplimit/poplimit/counter/counting"
	"github.com/poplimit/poplimit/counter/memstore"
)

// Round trips per decision, for benchmarks and dashboards.
func ExampleStore() {
	cs := counting.New(memstore.New())
	lim, _ := counter.New(cs, counter.Limit{Algorithm: counter.FixedWindow, Quantity: 100, Window: time.Minute})
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := 0; i < 10; i++ {
		lim.AllowN(context.Background(), counter.Key("ip", "198.51.100.9"), now, 1)
	}
	s := cs.Stats()
	fmt.Printf("%d round trips for 10 decisions (batch %d, incr %d)\n", s.RoundTrips(), s.Batch, s.Incr)
	// Output:
	// 10 round trips for 10 decisions (batch 1, incr 9)
}
