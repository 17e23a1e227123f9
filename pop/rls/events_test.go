package rls_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/poplimit/poplimit/pop"
	"github.com/poplimit/poplimit/pop/policy"
	"github.com/poplimit/poplimit/pop/rls"
)

// An OVER_LIMIT descriptor is a refused event; a shadow_mode rule's or
// SHADOW_MODE's would-be OVER_LIMIT an admitted dry-run one; an OK answer
// none. The descriptor's values are digested, never written.
func TestOverLimitAndShadowAnswersEmitEvents(t *testing.T) {
	const doc = `domain: d
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: dry
    rate_limit: {unit: minute, requests_per_unit: 1}
    shadow_mode: true
`
	for _, tc := range []struct {
		name         string
		globalShadow bool
		key          string
		want         string // the second request's event: decision, or "" for none
		wantShadow   bool
	}{
		{"enforced", false, "user", pop.EventRefused, false},
		{"rule in shadow mode", false, "dry", pop.EventAdmitted, true},
		{"global shadow mode", true, "user", pop.EventAdmitted, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lim, err := pop.New(pop.Config{Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			events := pop.NewEvents(&out, pop.EventsConfig{PoP: "fra1", Worker: "rls-1"})
			svc, err := rls.NewService(rls.ServiceConfig{Limiter: lim, ShadowMode: tc.globalShadow, Events: events, Clock: func() time.Time { return t0 }, Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			cfg, err := rls.Parse(map[string][]byte{"d.yaml": []byte(doc)}, rls.Options{})
			if err != nil {
				t.Fatal(err)
			}
			if err := svc.Load(cfg); err != nil {
				t.Fatal(err)
			}
			req := &rlv3.RateLimitRequest{Domain: "d", Descriptors: []*rlcommon.RateLimitDescriptor{{Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: tc.key, Value: "secret-value"}}}}}
			for range 2 {
				if _, err := svc.ShouldRateLimit(context.Background(), req); err != nil {
					t.Fatal(err)
				}
			}
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			if err := events.Run(ctx); err != nil {
				t.Fatal(err)
			}
			lines := strings.Split(strings.TrimSpace(out.String()), "\n")
			if len(lines) != 1 {
				t.Fatalf("%d events, want 1 (the second request's):\n%s", len(lines), out.String())
			}
			if strings.Contains(lines[0], "secret-value") {
				t.Fatalf("event carries a descriptor value in clear: %s", lines[0])
			}
			var ev pop.Event
			if err := json.Unmarshal([]byte(lines[0]), &ev); err != nil {
				t.Fatal(err)
			}
			wantID := policy.KeyID(strings.Join([]string{"d", tc.key, "secret-value"}, "\x00"))
			if ev.V != 1 || ev.Domain != "d" || ev.Descriptor != "d."+tc.key || ev.Decision != tc.want || ev.Shadow != tc.wantShadow ||
				ev.IdentityKind != pop.IdentityDescriptor || ev.Identity != wantID || ev.Status != 429 || ev.PoP != "fra1" || ev.Worker != "rls-1" || ev.RetryAfter <= 0 {
				t.Errorf("event %s\nwant v1, domain d, descriptor d.%s, decision %s, shadow %v, identity %s", lines[0], tc.key, tc.want, tc.wantShadow, wantID)
			}
		})
	}
}
