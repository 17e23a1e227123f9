package rls_test

import (
	"context"
	"log/slog"
	"strconv"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/poplimit/poplimit/pop"
	"github.com/poplimit/poplimit/pop/rls"
)

// BenchmarkShouldRateLimit is one request of popbench rls's shape (three
// descriptors {user: V}, a per-minute limit) decided over the in-process
// store: the CPU and allocations of the service and engine, without the
// network.
func BenchmarkShouldRateLimit(b *testing.B) {
	lim, err := pop.New(pop.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	svc, err := rls.NewService(rls.ServiceConfig{Limiter: lim, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	cfg, err := rls.Parse(map[string][]byte{"bench.yaml": []byte("domain: bench\ndescriptors:\n  - key: user\n    rate_limit:\n      unit: minute\n      requests_per_unit: 1000000000\n")}, rls.Options{})
	if err != nil {
		b.Fatal(err)
	}
	if err := svc.Load(cfg); err != nil {
		b.Fatal(err)
	}
	reqs := make([]*rlv3.RateLimitRequest, 1024)
	for i := range reqs {
		req := &rlv3.RateLimitRequest{Domain: "bench"}
		for j := range 3 {
			req.Descriptors = append(req.Descriptors, &rlcommon.RateLimitDescriptor{Entries: []*rlcommon.RateLimitDescriptor_Entry{
				{Key: "user", Value: strconv.Itoa(3*i + j)}}})
		}
		reqs[i] = req
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		resp, err := svc.ShouldRateLimit(ctx, reqs[i%len(reqs)])
		if err != nil || resp.OverallCode != rlv3.RateLimitResponse_OK {
			b.Fatal(resp, err)
		}
	}
	b.ReportMetric(3, "decisions/op")
}
