package pop

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/poplimit/poplimit/counter/memstore"
	"github.com/poplimit/poplimit/pop/policy"
)

const keyDoc = `
api_key: {header: X-API-Key}
tiers:
  free: {limits: [{quantity: 1, window: 1m}]}
  pro: {limits: [{quantity: 100, window: 1m}]}
policies:
  - name: api
    routes: ["GET /api/"]
    identity: [api_key]
    tier: api_key
    default_tier: free
`

// TestDigestKeys: a File keyed by digest finds active keys' tiers, answers
// an inactive key 403 and an unknown one anonymous or 401 per the file,
// and the middleware writes neither with Retry-After.
func TestDigestKeys(t *testing.T) {
	l := newTestLimiter(t, storeConfig(memstore.New()), keyDoc)
	f, err := policy.Parse("keys.yml", []byte(keyDoc))
	if err != nil {
		t.Fatal(err)
	}
	f.KeyDigests = true
	f.Keys = map[string]policy.KeyRecord{policy.KeyDigest("good"): {Tenant: "t1", Tier: "pro"}, policy.KeyDigest("revoked"): {Tenant: "t1", Tier: "pro", Inactive: true}}
	if err := l.LoadPolicy(f); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	d := l.Decide(ctx, req("GET", "/api/x", "X-API-Key", "good"), t0)
	if !d.Allowed || d.Tier != "pro" {
		t.Fatalf("good key: %+v, want allowed in pro", d)
	}
	d = l.Decide(ctx, req("GET", "/api/x", "X-API-Key", "revoked"), t0)
	if d.Allowed || d.Status != http.StatusForbidden || d.Reason != ReasonKeyInactive {
		t.Fatalf("revoked key: %+v, want 403 key_inactive", d)
	}
	d = l.Decide(ctx, req("GET", "/api/x", "X-API-Key", "made-up"), t0)
	if !d.Allowed || d.Tier != "free" {
		t.Fatalf("unknown key: %+v, want anonymous free", d)
	}
	g := *f
	g.RejectUnknownKeys = true
	if err := l.LoadPolicy(&g); err != nil {
		t.Fatal(err)
	}
	d = l.Decide(ctx, req("GET", "/api/x", "X-API-Key", "made-up"), t0)
	if d.Allowed || d.Status != http.StatusUnauthorized || d.Reason != ReasonKeyUnknown {
		t.Fatalf("unknown key, reject: %+v, want 401", d)
	}
	h := l.Middleware(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { t.Error("upstream reached") }))
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req("GET", "/api/x", "X-API-Key", "revoked"))
	if w.Code != http.StatusForbidden || w.Header().Get("Retry-After") != "" || !strings.Contains(w.Body.String(), "api_key_inactive") {
		t.Fatalf("middleware: %d %v %q", w.Code, w.Header(), w.Body.String())
	}
	if err := l.LoadPolicy(nil); err == nil {
		t.Fatal("LoadPolicy(nil) succeeded")
	}
}
