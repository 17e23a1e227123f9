package pop

import (
	"context"
	"net/http"
	"testing"
	"time"
)

// TestSlowLiveStoreUsesLocalBudget: on a store that answered recently, a
// decision that runs out of its deadline is decided by the local budget
// (store_slow: 429 beyond it, never 503 on a fail-closed route, the
// breaker stays closed), and an identity in the mitigation cache is never
// admitted.
func TestSlowLiveStoreUsesLocalBudget(t *testing.T) {
	clk := newTestClock(t0)
	store := newFlakyStore(clk.Now)
	cfg := storeConfig(store)
	cfg.StoreDeadline = 30 * time.Millisecond
	cfg.WorkersPerPoP = 4
	l := newTestLimiter(t, cfg, policyDoc("closed"))
	ctx := context.Background()
	over := func() *http.Request { return req("GET", "/api/a", "X-API-Key", "secret-free-key") }
	admitted := 0
	for i := 0; i < 11; i++ {
		if l.Decide(ctx, over(), t0).Allowed {
			admitted++
		}
	}
	if admitted != 10 {
		t.Fatalf("%d admitted of 11 on a healthy store, want 10", admitted)
	}
	store.hang.Store(true)
	at := t0.Add(100 * time.Millisecond)
	for i := 0; i < 5; i++ {
		if d := l.Decide(ctx, over(), at); d.Allowed || d.Reason != ReasonMitigated {
			t.Fatalf("over-limit identity on a slow store: %+v", d)
		}
	}
	other := req("GET", "/api/a")
	other.RemoteAddr = "192.0.2.9:1234"
	admitted = 0
	for i := 0; i < 4; i++ {
		d := l.Decide(ctx, other, at)
		if d.Reason != ReasonStoreSlow {
			t.Fatalf("request %d: reason %s, want %s", i, d.Reason, ReasonStoreSlow)
		}
		if d.Allowed {
			admitted++
		} else if d.Status != http.StatusTooManyRequests {
			t.Fatalf("status %d on a slow live store, want 429", d.Status)
		}
	}
	if admitted != 2 { // 10/s ÷ 4 workers
		t.Fatalf("local budget admitted %d, want 2", admitted)
	}
	if s := l.Breaker().State(); s != BreakerClosed {
		t.Fatalf("breaker %v after timeouts on a live store", s)
	}
}

// TestInFlightBound: with MaxInFlight decisions hung on the store, the next
// waits InFlightWait, then is decided by the local budget (store_busy).
func TestInFlightBound(t *testing.T) {
	clk := newTestClock(t0)
	store := newFlakyStore(clk.Now)
	cfg := storeConfig(store)
	cfg.StoreDeadline = 5 * time.Second
	cfg.MaxInFlight = 2
	cfg.InFlightWait = 20 * time.Millisecond
	cfg.WorkersPerPoP = 4
	l := newTestLimiter(t, cfg, policyDoc("closed"))
	if d := l.Decide(context.Background(), req("GET", "/api/a", "X-API-Key", "secret-free-key"), t0); !d.Allowed {
		t.Fatalf("healthy store: %+v", d)
	}
	store.hang.Store(true)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{}, 2)
	for i := 0; i < 2; i++ {
		r := req("GET", "/api/a")
		r.RemoteAddr = "192.0.2." + string(rune('3'+i)) + ":1"
		go func() { l.Decide(ctx, r, t0); done <- struct{}{} }()
	}
	for len(l.slots) < 2 {
		time.Sleep(time.Millisecond)
	}
	start := time.Now()
	r := req("GET", "/api/a")
	r.RemoteAddr = "192.0.2.9:1"
	d := l.Decide(context.Background(), r, t0)
	if d.Reason != ReasonStoreBusy || !d.Allowed {
		t.Fatalf("third decision with 2 slots busy: %+v", d)
	}
	if el := time.Since(start); el > 2*time.Second {
		t.Fatalf("waited %v for a slot (InFlightWait 20ms)", el)
	}
	cancel()
	<-done
	<-done
	if len(l.slots) != 0 {
		t.Fatalf("%d slots still held", len(l.slots))
	}
}
