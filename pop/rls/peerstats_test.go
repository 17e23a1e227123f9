package rls_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/poplimit/poplimit/pop"
	"github.com/poplimit/poplimit/pop/rls"
)

// statsConfig is the config of statsScript; %s is the domain.
const statsConfig = `domain: %s
descriptors:
  - key: s
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: h
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: t
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: u
    rate_limit: {unit: minute, requests_per_unit: 10}
`

// statsScript is a sequence of one-descriptor requests (key, per-descriptor
// hits_addend) and the statistics envoyproxy/ratelimit keeps for each key
// after it, worked out from its base_limiter.go (near-limit threshold
// ⌊limit × 0.8⌋; a request crossing the limit counts its hits above it
// over_limit and the ones between the threshold and the limit near_limit).
var statsScript = struct {
	steps []struct {
		key  string
		hits uint64
	}
	want map[string]keyStats
}{
	steps: []struct {
		key  string
		hits uint64
	}{
		// shadow_mode, 2/minute: 1 → 1, 1 → 2 (near), check, 1 → 3 (over,
		// shadow), check (over, 0 hits), 2 → 5 (over, shadow).
		{"s", 1}, {"s", 1}, {"s", 0}, {"s", 1}, {"s", 0}, {"s", 2},
		// 5/minute: 4 → 4, 2 → 6 crosses (1 over, 1 near), 1 → 7, check.
		{"h", 4}, {"h", 2}, {"h", 1}, {"h", 0},
		// 10/minute: 7 → 7, 3 → 10 (admitted, 2 of them near).
		{"t", 7}, {"t", 3},
		// 10/minute: 5 → 5, 7 → 12 crosses from below the threshold (2
		// over, 2 near: the hits up to the threshold count nowhere else).
		{"u", 5}, {"u", 7},
	},
	want: map[string]keyStats{
		"s": {total: 5, within: 2, near: 1, over: 3, shadow: 3},
		"h": {total: 7, within: 4, near: 1, over: 2},
		"t": {total: 10, within: 10, near: 2},
		"u": {total: 12, within: 5, near: 2, over: 2},
	},
}

// keyStats are one key's ratelimit_service_rate_limit_* counters.
type keyStats struct{ total, within, near, over, shadow float64 }

// runStatsScript sends statsScript to client in domain.
func runStatsScript(t *testing.T, client rlv3.RateLimitServiceClient, domain string) {
	t.Helper()
	for i, st := range statsScript.steps {
		req := &rlv3.RateLimitRequest{Domain: domain, Descriptors: []*rlcommon.RateLimitDescriptor{{
			Entries:    []*rlcommon.RateLimitDescriptor_Entry{{Key: st.key, Value: "1"}},
			HitsAddend: wrapperspb.UInt64(st.hits),
		}}}
		if _, err := client.ShouldRateLimit(context.Background(), req); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
	}
}

// statsOf reads each key's counters of domain from fams, under label
// keyLabel (rls: "key"; envoyproxy/ratelimit's Prometheus mapping: "key1").
func statsOf(fams []*dto.MetricFamily, domain, keyLabel string) map[string]keyStats {
	out := map[string]keyStats{}
	for _, f := range fams {
		name, ok := strings.CutPrefix(f.GetName(), "ratelimit_service_rate_limit_")
		if !ok {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["domain"] != domain {
				continue
			}
			ks := out[labels[keyLabel]]
			v := m.GetCounter().GetValue()
			switch name {
			case "total_hits":
				ks.total = v
			case "within_limit":
				ks.within = v
			case "near_limit":
				ks.near = v
			case "over_limit":
				ks.over = v
			case "shadow_mode":
				ks.shadow = v
			case "over_limit_with_local_cache":
				if v != 0 {
					panic(fmt.Sprintf("over_limit_with_local_cache %v without a local cache", v))
				}
			}
			out[labels[keyLabel]] = ks
		}
	}
	return out
}

func checkStats(t *testing.T, got map[string]keyStats) {
	t.Helper()
	for k, w := range statsScript.want {
		if got[k] != w {
			t.Errorf("key %s: %+v, want %+v", k, got[k], w)
		}
	}
}

// TestStatsSplitHitsAsEnvoyRatelimit: rls's statistics over statsScript
// are envoyproxy/ratelimit's, shadow_mode and crossing requests included.
func TestStatsSplitHitsAsEnvoyRatelimit(t *testing.T) {
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			cfg := st.start(t)
			cfg.Logger = slog.New(slog.DiscardHandler)
			lim, err := pop.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			reg := prometheus.NewRegistry()
			stats, err := rls.NewStats(reg, 0)
			if err != nil {
				t.Fatal(err)
			}
			now := t0
			svc, err := rls.NewService(rls.ServiceConfig{Limiter: lim, Stats: stats, Clock: func() time.Time { return now }, Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			domain := "stats_" + strings.ReplaceAll(t.Name(), "/", "_") + fmt.Sprint(time.Now().UnixNano())
			c, err := rls.Parse(map[string][]byte{"s.yaml": []byte(fmt.Sprintf(statsConfig, domain))}, rls.Options{})
			if err != nil {
				t.Fatal(err)
			}
			if err := svc.Load(c); err != nil {
				t.Fatal(err)
			}
			runStatsScript(t, startService(t, svc), domain)
			fams, err := reg.Gather()
			if err != nil {
				t.Fatal(err)
			}
			checkStats(t, statsOf(fams, domain, "key"))
		})
	}
}
