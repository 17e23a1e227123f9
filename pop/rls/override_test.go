package rls_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/poplimit/poplimit/pop"
	"github.com/poplimit/poplimit/pop/rls"
)

// A descriptor's request-level limit (RateLimitDescriptor.limit) replaces
// the config's, as envoyproxy/ratelimit's GetLimit: also for a descriptor
// the config does not match, never for an unknown domain; the count is per
// unit, kept when the limit changes.
func TestRequestLevelLimit(t *testing.T) {
	lim, err := pop.New(pop.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	now := t0
	svc, err := rls.NewService(rls.ServiceConfig{Limiter: lim, Clock: func() time.Time { return now }, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := rls.Parse(map[string][]byte{"d.yaml": []byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 100}\n")}, rls.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Load(cfg); err != nil {
		t.Fatal(err)
	}
	ask := func(domain, key string, rpu uint32, unit typev3.RateLimitUnit) (*rlv3.RateLimitResponse, error) {
		d := &rlcommon.RateLimitDescriptor{Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: key, Value: "v"}}}
		if unit != 0 || rpu != 0 {
			d.Limit = &rlcommon.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: rpu, Unit: unit}
		}
		return svc.ShouldRateLimit(context.Background(), &rlv3.RateLimitRequest{Domain: domain, Descriptors: []*rlcommon.RateLimitDescriptor{d}})
	}
	steps := []struct {
		name, domain, key string
		rpu               uint32
		unit              typev3.RateLimitUnit
		want              rlv3.RateLimitResponse_Code
		wantLimit         uint32 // current_limit.requests_per_unit; 0: none
		wantRemaining     uint32
	}{
		{"override 2/min", "d", "k", 2, typev3.RateLimitUnit_MINUTE, rlv3.RateLimitResponse_OK, 2, 1},
		{"override 2/min again", "d", "k", 2, typev3.RateLimitUnit_MINUTE, rlv3.RateLimitResponse_OK, 2, 0},
		{"override 2/min over", "d", "k", 2, typev3.RateLimitUnit_MINUTE, rlv3.RateLimitResponse_OVER_LIMIT, 2, 0},
		{"override raised: the count stays (3 counted)", "d", "k", 5, typev3.RateLimitUnit_MINUTE, rlv3.RateLimitResponse_OK, 5, 1},
		{"config limit: its own count", "d", "k", 0, 0, rlv3.RateLimitResponse_OK, 100, 99},
		{"another unit: another count", "d", "k", 1, typev3.RateLimitUnit_HOUR, rlv3.RateLimitResponse_OK, 1, 0},
		{"key not in the config", "d", "other", 1, typev3.RateLimitUnit_SECOND, rlv3.RateLimitResponse_OK, 1, 0},
		{"key not in the config, over", "d", "other", 1, typev3.RateLimitUnit_SECOND, rlv3.RateLimitResponse_OVER_LIMIT, 1, 0},
		{"unknown domain", "nope", "k", 1, typev3.RateLimitUnit_SECOND, rlv3.RateLimitResponse_OK, 0, 0},
	}
	for _, st := range steps {
		resp, err := ask(st.domain, st.key, st.rpu, st.unit)
		if err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		s := resp.Statuses[0]
		var gotLimit uint32
		if s.CurrentLimit != nil {
			gotLimit = s.CurrentLimit.RequestsPerUnit
			if st.unit != 0 && int32(s.CurrentLimit.Unit) != int32(st.unit) {
				t.Errorf("%s: unit %v, want %v", st.name, s.CurrentLimit.Unit, st.unit)
			}
		}
		if resp.OverallCode != st.want || gotLimit != st.wantLimit || s.LimitRemaining != st.wantRemaining {
			t.Errorf("%s: %v limit %d remaining %d, want %v %d %d", st.name, resp.OverallCode, gotLimit, s.LimitRemaining, st.want, st.wantLimit, st.wantRemaining)
		}
	}
	for _, bad := range []struct {
		rpu  uint32
		unit typev3.RateLimitUnit
	}{{0, typev3.RateLimitUnit_MINUTE}, {5, typev3.RateLimitUnit(42)}} {
		if _, err := ask("d", "k", bad.rpu, bad.unit); status.Code(err) != codes.InvalidArgument {
			t.Errorf("override %d/%v: err %v, want INVALID_ARGUMENT", bad.rpu, bad.unit, err)
		}
	}
}
