package pop

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/poplimit/poplimit/counter"
	"github.com/poplimit/poplimit/counter/memstore"
)

// raceLosingStore makes every compare-and-swap and add lose (another
// worker always wrote first): the token bucket gives up with
// counter.ErrContention.
type raceLosingStore struct{ counter.Store }

func (s raceLosingStore) CompareAndSwap(context.Context, string, []byte, counter.CASToken, time.Duration) error {
	return counter.ErrCASConflict
}

func (s raceLosingStore) Add(context.Context, string, []byte, time.Duration) error {
	return counter.ErrNotStored
}

// A token bucket that loses its races is a hot key, not a sick store: the
// request is rejected with 429 (nothing counted), the breaker stays closed
// and the fail mode is not used. Before, ErrContention counted as a store
// failure: an attacker hammering one key opened the breaker and, with
// fail_mode open, got every key of the worker admitted.
func TestBucketContentionRejectsWithoutTrippingBreaker(t *testing.T) {
	clk := newTestClock(t0)
	cfg := storeConfig(raceLosingStore{memstore.NewClock(clk.Now)})
	cfg.Clock = clk.Now
	cfg.StoreDeadline = time.Second
	doc := strings.Replace(policyDoc("open"),
		"{name: second, algorithm: fixed_window, quantity: 10, window: 1s, on_reject: refund}",
		"{name: second, algorithm: token_bucket, quantity: 10, window: 1s, burst: 10}", 1)
	l := newTestLimiter(t, cfg, doc)
	for i := 0; i < 50; i++ { // far beyond the breaker's failure run
		d := l.Decide(context.Background(), req("GET", "/api/x", "X-API-Key", "secret-free-key"), clk.Now())
		if d.Allowed || d.Reason != ReasonContention || d.Status != http.StatusTooManyRequests {
			t.Fatalf("decision %d: allowed %v reason %q status %d; want a 429 for contention", i, d.Allowed, d.Reason, d.Status)
		}
		if d.Binding.Limit.Name != "second" || d.Binding.Result.RetryAfter <= 0 {
			t.Fatalf("decision %d: binding %+v; want the bucket with a Retry-After", i, d.Binding)
		}
	}
	if s := l.breaker.State(); s != BreakerClosed {
		t.Fatalf("breaker %v after contention; want closed", s)
	}
}
