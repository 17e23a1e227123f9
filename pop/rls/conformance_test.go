package rls_test

import (
	"context"
	"log/slog"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/poplimit/poplimit/bench/fixture"
	"github.com/poplimit/poplimit/counter"
	"github.com/poplimit/poplimit/counter/memcached"
	"github.com/poplimit/poplimit/counter/redis"
	"github.com/poplimit/poplimit/pop"
	"github.com/poplimit/poplimit/pop/rls"
	"github.com/poplimit/poplimit/pop/rls/conformance"
)

func TestMain(m *testing.M) { os.Exit(fixture.Main(m)) }

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

// store builds the Limiter configs of one counter store: the counts of
// every Limiter made from it live in the same place.
type store struct {
	name string
	// start brings the store up for the test (nil: in process) and
	// returns the Limiter config counting in it.
	start func(t *testing.T) pop.Config
}

// stores are the counter stores rls runs over: the answers differ per
// store when a store's client differs, so every suite replays on each.
var stores = []store{
	{"memory", func(*testing.T) pop.Config { return pop.Config{} }},
	{"memcached", func(t *testing.T) pop.Config {
		shards := fixture.Memcached(t, 2)
		p := fixture.Mcproxy(t, fixture.Binary(t, "mcproxy"), "", fixture.Addrs(shards), "--admin", "")
		// rls's default client: pipelined, one multiplexed connection.
		st := memcached.NewPipeStore(memcached.PipeConfig{Addr: p.Addr, Timeout: 2 * time.Second, Multiplex: 1})
		t.Cleanup(func() { st.Close() })
		return pop.Config{Store: st, NewShared: func(l counter.Limit) (counter.Allower, error) { return counter.New(st, l) }}
	}},
	{"redis", func(t *testing.T) pop.Config {
		c := fixture.SharedRedisCluster(t)
		rs, err := redis.New(redis.Config{Addrs: c.Addrs(), Timeout: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { rs.Close() })
		return pop.Config{Store: rs, NewShared: func(l counter.Limit) (counter.Allower, error) { return rs.NewAllower(l) }}
	}},
}

// newService is a Service over a pop.Limiter counting as base says, with
// s's settings and config, deciding at the instant *now.
func newService(t *testing.T, base pop.Config, s conformance.Suite, run string, now *time.Time) *rls.Service {
	t.Helper()
	base.Logger = slog.New(slog.DiscardHandler)
	lim, err := pop.New(base)
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
// against rls over each store (in process, real memcached behind
// mcproxy, a real Redis Cluster) and requires every answer the suite
// expects.
func TestConformance(t *testing.T) {
	suites, err := conformance.LoadFile("testdata/conformance.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			base := st.start(t)
			for _, s := range suites {
				t.Run(s.Name, func(t *testing.T) {
					now := t0
					run := conformance.NewRun()
					client := startService(t, newService(t, base, s, run, &now))
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
		})
	}
}
