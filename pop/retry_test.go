package pop

import (
	"context"
	"fmt"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/poplimit/poplimit/pop/policy"
)

// TestRetryAfterOfABurstAdmitsOnEveryWorker: four workers share one store;
// 300 requests at one key, spread over them in turn, then one more.
// Its Retry-After (RateLimit-Reset and the draft's t the same seconds) is
// true for every algorithm and on_reject mode: a client that waits exactly
// that long, whichever worker it reaches, is admitted. In Count mode every
// worker's first refusal reaches the store; only the first may be charged
// (counter.CountFirst), or the others would move the instant the first
// worker keeps answering from its mitigation cache.
func TestRetryAfterOfABurstAdmitsOnEveryWorker(t *testing.T) {
	for _, alg := range []string{"fixed_window", "sliding_window", "token_bucket"} {
		for _, mode := range []string{"count", "refund"} {
			t.Run(alg+"/"+mode, func(t *testing.T) {
				now := t0.Add(7*time.Second + 300*time.Millisecond)
				doc := fmt.Sprintf(`version: 1
api_key: {header: X-API-Key}
tiers:
  t: {limits: [{name: l, algorithm: %s, quantity: 100, window: 1m, burst: 100, on_reject: %s}]}
policies:
  - {name: p, routes: ["GET /"], identity: [api_key], tier: t}
`, alg, mode)
				if alg != "token_bucket" {
					doc = fmt.Sprintf(`version: 1
api_key: {header: X-API-Key}
tiers:
  t: {limits: [{name: l, algorithm: %s, quantity: 100, window: 1m, on_reject: %s}]}
policies:
  - {name: p, routes: ["GET /"], identity: [api_key], tier: t}
`, alg, mode)
				}
				// burst runs the 300 and request 301 on four fresh workers.
				burst := func() ([]*Limiter, Decision) {
					st := newFlakyStore(newTestClock(t0).Now)
					var ws []*Limiter
					for range 4 {
						ws = append(ws, newTestLimiter(t, storeConfig(st), doc))
					}
					for i := range 300 {
						ws[i%4].Decide(context.Background(), req("GET", "/", "X-API-Key", "k"), now)
					}
					return ws, ws[0].Decide(context.Background(), req("GET", "/", "X-API-Key", "k"), now)
				}
				_, d := burst()
				if d.Allowed {
					t.Fatalf("request 301 admitted: %+v", d)
				}
				rec := httptest.NewRecorder()
				WriteHeaders(rec.Header(), d, policy.HeadersBoth)
				WriteRejection(rec, d)
				ra := rec.Header().Get("Retry-After")
				if reset := rec.Header().Get("Ratelimit-Reset"); reset != ra {
					t.Errorf("RateLimit-Reset %s, Retry-After %s: not the same instant", reset, ra)
				}
				if want := `"l";r=0;t=` + ra; rec.Header().Get("Ratelimit") != want {
					t.Errorf("RateLimit %q, want %q", rec.Header().Get("Ratelimit"), want)
				}
				if s, _ := strconv.ParseInt(ra, 10, 64); time.Duration(s)*time.Second < d.RetryAfter() {
					t.Errorf("Retry-After %s s is earlier than %v", ra, d.RetryAfter())
				}
				for w := range 4 {
					ws, d := burst()
					at := now.Add(d.RetryAfter())
					if got := ws[w].Decide(context.Background(), req("GET", "/", "X-API-Key", "k"), at); !got.Allowed {
						t.Errorf("worker %d, exactly the Retry-After %v after request 301: refused again, Retry-After %v (%s)",
							w, d.RetryAfter(), got.RetryAfter(), got.Reason)
					}
				}
			})
		}
	}
}
