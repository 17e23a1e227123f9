package pop

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/poplimit/poplimit/counter/memstore"
	"github.com/poplimit/poplimit/pop/policy"
)

// TestDecideAllManyChecksOnWorkers: batches larger than the parked
// workers (some checks then run on goroutines of their own), from several
// callers at once, each check counted once in its own identity and its
// answer in its own slot.
func TestDecideAllManyChecksOnWorkers(t *testing.T) {
	// Room for every check in flight, and time (the race detector is
	// slow): no check is decided locally.
	cfg := storeConfig(memstore.New())
	cfg.MaxInFlight, cfg.InFlightWait, cfg.Deadline = 4*maxCheckWorkers, time.Minute, DeadlineConfig{Fixed: time.Minute}
	l, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	rs, err := l.CompileRules([]RuleSpec{fixedSpec("a", 2, policy.FailOpen)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	r := rs.Rule("a")
	now := t0.Add(time.Second)
	const callers, perCall = 3, maxCheckWorkers/2 + 7
	var wg sync.WaitGroup
	errs := make(chan string, callers)
	for c := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			checks := make([]Check, perCall+1)
			for i := range perCall {
				checks[i] = Check{Rule: r, Parts: []string{strconv.Itoa(c), strconv.Itoa(i)}, Hits: int64(1 + i%2)}
			}
			checks[perCall] = Check{} // no rule
			for round := range 2 {
				out := make([]Decision, len(checks))
				l.DecideAll(context.Background(), checks, now, out)
				for i, d := range out[:perCall] {
					// hits 1: 2 left, then 1; hits 2: 0 left, then refused.
					wantAllowed, wantLeft := true, int64(1-round)
					if i%2 == 1 {
						wantAllowed, wantLeft = round == 0, 0
					}
					if d.Allowed != wantAllowed || d.Binding.Result.Remaining != wantLeft {
						errs <- fmt.Sprintf("caller %d round %d check %d: allowed %v remaining %d (%s)", c, round, i, d.Allowed, d.Binding.Result.Remaining, d.Reason)
						return
					}
				}
				if d := out[perCall]; !d.Allowed || d.Reason != ReasonNoPolicy {
					errs <- "no-rule check: " + string(d.Reason)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}
