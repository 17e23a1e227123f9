package pop

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/poplimit/poplimit/counter"
	"github.com/poplimit/poplimit/pop/policy"
)

// fieldStep is one decision at t0+at and the fields it must carry.
type fieldStep struct {
	at                   time.Duration
	allowed              bool
	limit, remain, reset string // RateLimit-Limit, -Remaining, -Reset
	policy, ratelimit    string // RateLimit-Policy, RateLimit
}

// TestHeadersTrue: per algorithm, the fields are what the client
// experiences. A token bucket of 2/s with burst 3 is q=3 per 2 s (its
// burst refills in 1.5 s, rounded up), not q=3;w=1; a 10 s fixed window
// counts down to its end, never t=11; a 1 s sliding window's reset is the
// time to the next unit, at most 1, never 2; a calendar month is w = its
// true length and t the time to the next boundary.
func TestHeadersTrue(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	const ms = time.Millisecond
	tables := []struct {
		name  string
		limit counter.Limit
		steps []fieldStep
	}{
		{"token bucket 2/s burst 3", counter.Limit{Name: "b", Algorithm: counter.TokenBucket, Quantity: 2, Window: time.Second, Burst: 3}, []fieldStep{
			{0, true, "3", "2", "1", `"b";q=3;w=2`, `"b";r=2;t=1`},
			{0, true, "3", "1", "1", `"b";q=3;w=2`, `"b";r=1;t=1`},
			{0, true, "3", "0", "1", `"b";q=3;w=2`, `"b";r=0;t=1`},
			{0, false, "3", "0", "1", `"b";q=3;w=2`, `"b";r=0;t=1`},
			{2 * time.Second, true, "3", "2", "1", `"b";q=3;w=2`, `"b";r=2;t=1`},
		}},
		{"fixed 10s", counter.Limit{Name: "f", Algorithm: counter.FixedWindow, Quantity: 2, Window: 10 * time.Second}, []fieldStep{
			{0, true, "2", "1", "10", `"f";q=2;w=10`, `"f";r=1;t=10`},
			{9500 * ms, true, "2", "0", "1", `"f";q=2;w=10`, `"f";r=0;t=1`},
			{9500 * ms, false, "2", "0", "1", `"f";q=2;w=10`, `"f";r=0;t=1`},
			{10 * time.Second, true, "2", "1", "10", `"f";q=2;w=10`, `"f";r=1;t=10`},
		}},
		{"sliding 1s", counter.Limit{Name: "s", Quantity: 2, Window: time.Second}, []fieldStep{
			{900 * ms, true, "2", "1", "1", `"s";q=2;w=1`, `"s";r=1;t=1`},
			{900 * ms, true, "2", "0", "1", `"s";q=2;w=1`, `"s";r=0;t=1`},
			// 1.1 s: estimate 2 × 0.9 = 1.8: one more unit at 1.5 s.
			{1100 * ms, false, "2", "0", "1", `"s";q=2;w=1`, `"s";r=0;t=1`},
		}},
		{"sliding 10s", counter.Limit{Name: "s10", Quantity: 2, Window: 10 * time.Second}, []fieldStep{
			// The count slides out at 20 s: t stops at the window.
			{time.Second, true, "2", "1", "10", `"s10";q=2;w=10`, `"s10";r=1;t=10`},
			// 11 s: estimate 1 × 0.9 + 1 = 1.9; a third unit at 20 s, capped at 10.
			{11 * time.Second, true, "2", "0", "9", `"s10";q=2;w=10`, `"s10";r=0;t=9`},
		}},
		{"calendar month", counter.Limit{Name: "m", Algorithm: counter.FixedWindow, Quantity: 2,
			Calendar: counter.Calendar{Unit: counter.Month}}, []fieldStep{
			{0, true, "2", "1", "2678400", `"m";q=2;w=2678400`, `"m";r=1;t=2678400`},
			{31*24*time.Hour - 90*time.Second, true, "2", "0", "90", `"m";q=2;w=2678400`, `"m";r=0;t=90`},
			{31 * 24 * time.Hour, true, "2", "1", "2419200", `"m";q=2;w=2419200`, `"m";r=1;t=2419200`},
		}},
	}
	for _, tb := range tables {
		t.Run(tb.name, func(t *testing.T) {
			lo, err := counter.NewLocal(tb.limit)
			if err != nil {
				t.Fatal(err)
			}
			for i, s := range tb.steps {
				res, err := lo.AllowN(context.Background(), "k", t0.Add(s.at), 1)
				if err != nil {
					t.Fatal(err)
				}
				lr := LimitResult{Limit: tb.limit, Result: res}
				d := Decision{Allowed: res.Allowed, Binding: lr, All: []LimitResult{lr}}
				h := http.Header{}
				WriteHeaders(h, d, policy.HeadersBoth)
				got := fieldStep{s.at, res.Allowed, h.Get("Ratelimit-Limit"), h.Get("Ratelimit-Remaining"), h.Get("Ratelimit-Reset"),
					h.Get("Ratelimit-Policy"), h.Get("Ratelimit")}
				if got != s {
					t.Errorf("step %d (%+v):\n got %+v\nwant %+v", i, res, got, s)
				}
			}
		})
	}
}

// TestProblemBody: rejection_body: problem answers a quota rejection with
// the draft's quota-exceeded problem and a fail-closed 503 with
// temporary-reduced-capacity; the JSON body stays the default.
func TestProblemBody(t *testing.T) {
	lim := counter.Limit{Name: "daily", Algorithm: counter.FixedWindow, Quantity: 1, Window: time.Hour}
	quota := Decision{Status: http.StatusTooManyRequests, Binding: LimitResult{Limit: lim,
		Result: counter.Result{Limit: 1, RetryAfter: 1500 * time.Millisecond}}}
	quota.All = []LimitResult{quota.Binding, {Limit: counter.Limit{Name: "burst", Quantity: 5}, Result: counter.Result{Allowed: true, Limit: 5}}}
	closed := Decision{Status: http.StatusServiceUnavailable, Reason: ReasonFailClosed, Binding: LimitResult{Limit: lim,
		Result: counter.Result{RetryAfter: time.Second}}}
	tests := []struct {
		name   string
		d      Decision
		f      policy.BodyFormat
		status int
		ctype  string
		body   map[string]any
	}{
		{"problem quota", quota, policy.BodyProblem, 429, "application/problem+json", map[string]any{
			"type": ProblemQuotaExceeded, "title": titleQuotaExceeded, "status": 429.0,
			"violated-policies": []any{"daily"}, "retry_after": 2.0}},
		{"problem fail closed", closed, policy.BodyProblem, 503, "application/problem+json", map[string]any{
			"type": ProblemReducedCapacity, "title": titleReducedCapacity, "status": 503.0, "retry_after": 1.0}},
		{"json quota", quota, policy.BodyJSON, 429, "application/json", map[string]any{"error": "rate_limit_exceeded", "retry_after": 2.0}},
		{"json fail closed", closed, policy.BodyJSON, 503, "application/json", map[string]any{"error": "rate_limiter_unavailable", "retry_after": 1.0}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			writeRejection(rec, tc.d, tc.f)
			if rec.Code != tc.status || rec.Header().Get("Content-Type") != tc.ctype || rec.Header().Get("Retry-After") == "" {
				t.Fatalf("status %d, headers %v", rec.Code, rec.Header())
			}
			var got map[string]any
			if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
				t.Fatalf("body %q: %v", rec.Body.String(), err)
			}
			if len(got) != len(tc.body) {
				t.Errorf("body %v, want %v", got, tc.body)
			}
			for k, v := range tc.body {
				if g, ok := got[k]; !ok || !jsonEqual(g, v) {
					t.Errorf("%s = %v, want %v (body %s)", k, g, v, rec.Body.String())
				}
			}
		})
	}
}

func jsonEqual(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}

// TestRejectionBodyPolicy: the policy file selects the body.
func TestRejectionBodyPolicy(t *testing.T) {
	f, err := policy.Parse("f.yml", []byte(minimalPolicy+"rejection_body: problem\n"))
	if err != nil {
		t.Fatal(err)
	}
	if f.RejectionBody != policy.BodyProblem {
		t.Errorf("rejection_body: %v", f.RejectionBody)
	}
	if _, err := policy.Parse("f.yml", []byte(minimalPolicy+"rejection_body: xml\n")); err == nil {
		t.Error("rejection_body: xml accepted")
	}
}
