package rls_test

import (
	"context"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/poplimit/poplimit/pop"
	"github.com/poplimit/poplimit/pop/rls"
	"github.com/poplimit/poplimit/pop/rls/conformance"
)

// t0 is 10 s into a minute (and a day): every suite runs inside one
// window of every unit.
var t0 = time.Date(2026, 3, 2, 0, 0, 10, 0, time.UTC)

// startService serves svc over gRPC on a loopback port until the test
// ends and returns a client.
func startService(t *testing.T, svc *rls.Service) rlv3.RateLimitServiceClient {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	rlv3.RegisterRateLimitServiceServer(srv, svc)
	go srv.Serve(ln)
	t.Cleanup(srv.Stop)
	cc, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return rlv3.NewRateLimitServiceClient(cc)
}

// newService is a Service over an in-process pop.Limiter with s's
// settings and config, deciding at the instant *now.
func newService(t *testing.T, s conformance.Suite, run string, now *time.Time) *rls.Service {
	t.Helper()
	lim, err := pop.New(pop.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := rls.NewService(rls.ServiceConfig{Limiter: lim, ShadowMode: s.Settings.ShadowMode, Headers: s.Settings.Headers,
		Clock: func() time.Time { return *now }, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{}
	for name, body := range s.Config {
		files[name] = []byte(strings.ReplaceAll(body, "${RUN}", run))
	}
	cfg, err := rls.Parse(files, rls.Options{StopIncrementOverLimit: s.Settings.StopIncrement})
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Load(cfg); err != nil {
		t.Fatal(err)
	}
	return svc
}

// TestConformance replays every suite of testdata/conformance.yaml
// against rls and requires every answer the suite expects.
func TestConformance(t *testing.T) {
	suites, err := conformance.LoadFile("testdata/conformance.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range suites {
		t.Run(s.Name, func(t *testing.T) {
			now := t0
			run := conformance.NewRun()
			client := startService(t, newService(t, s, run, &now))
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			bad, err := conformance.Replay(ctx, client, s, run, func() time.Time { return now }, false)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range bad {
				t.Error(m)
			}
		})
	}
}
