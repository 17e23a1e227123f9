// Command rls is Envoy's rate limit service over the poplimit engine: a
// drop-in for envoyproxy/ratelimit (its configuration directory and
// files, its gRPC API envoy.service.ratelimit.v3.RateLimitService, its
// /json and /healthcheck endpoints and statistics), counting through
// memcached (normally the host's mcproxy) or a Redis Cluster (--store
// redis://…) so every rls of a PoP shares one count per key, exactly like
// edge workers.
//
// Usage:
//
//	rls --grpc 127.0.0.1:7491 --http 127.0.0.1:7490 \
//	    --config-dir /srv/runtime_data/current/ratelimit/config \
//	    --memcached 127.0.0.1:7411 --workers-per-pop 4
//
// The config directory is reloaded when a file in it changes and on
// SIGHUP; an invalid file keeps the previous config (logged with file,
// line and reason; /healthcheck stays OK, poplimit_rls_config_loads_total
// counts the error). The store, store-deadline and breaker flags are
// cmd/internal/storeflags', the --events flags cmd/internal/eventsflag',
// shared with edge. This file only wires flags
// to package pop/rls.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/urfave/cli/v2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/poplimit/poplimit/cmd/internal/daemon"
	"github.com/poplimit/poplimit/cmd/internal/eventsflag"
	"github.com/poplimit/poplimit/cmd/internal/globalflags"
	"github.com/poplimit/poplimit/cmd/internal/procsflag"
	"github.com/poplimit/poplimit/cmd/internal/storeflags"
	"github.com/poplimit/poplimit/pop"
	"github.com/poplimit/poplimit/pop/rls"
)

func main() {
	if err := newApp().Run(os.Args); err != nil {
		fmt.Fprintln(os.Stderr, "rls:", err)
		os.Exit(1)
	}
}

// newApp is the command: its flags, wired by run.
func newApp() *cli.App {
	return &cli.App{
		Name:    "rls",
		Version: daemon.Version(),
		Usage:   "Envoy rate limit service (envoyproxy/ratelimit's API and config) over poplimit's PoP-shared counts",
		Description: "Answers envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit on --grpc (with the gRPC\n" +
			"health service) and serves /json, /healthcheck and /metrics on --http. The config is every *.yaml\n" +
			"and *.yml of --config-dir, else of RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY (the\n" +
			"envoyproxy/ratelimit layout). Counts live in memcached behind --memcached (normally the host's\n" +
			"mcproxy); without it, an in-process store (one process, no sharing).",
		Flags: append([]cli.Flag{
			&cli.StringFlag{Name: "grpc", Value: "127.0.0.1:7491", Usage: "gRPC listener (ShouldRateLimit, grpc.health.v1; 7491: not envoyproxy/ratelimit's 8081, so both can run while migrating)"},
			&cli.BoolFlag{Name: "pprof", Usage: "serve net/http/pprof under /debug/pprof/ on the --http listener"},
			&cli.StringFlag{Name: "http", Value: "127.0.0.1:7490", Usage: "HTTP listener (/json, /healthcheck, /metrics); empty disables (7490: not envoyproxy/ratelimit's 8080)"},
			&cli.StringFlag{Name: "config-dir", Usage: "directory of the YAML config files (default: $RUNTIME_ROOT/$RUNTIME_SUBDIRECTORY/$RUNTIME_APPDIRECTORY)"},
			&cli.IntFlag{Name: "workers-per-pop", Value: 1, Usage: "rls processes in the PoP: the local fail mode enforces limit ÷ this"},
			&cli.BoolFlag{Name: "shadow-mode", EnvVars: []string{"SHADOW_MODE"}, Usage: "global shadow mode: decide and count, always answer OK"},
			&cli.BoolFlag{Name: "response-headers", EnvVars: []string{"LIMIT_RESPONSE_HEADERS_ENABLED"}, Usage: "add RateLimit-Limit/-Remaining/-Reset to response_headers_to_add"},
			&cli.StringFlag{Name: "header-limit", Value: "RateLimit-Limit", EnvVars: []string{"LIMIT_LIMIT_HEADER"}},
			&cli.StringFlag{Name: "header-remaining", Value: "RateLimit-Remaining", EnvVars: []string{"LIMIT_REMAINING_HEADER"}},
			&cli.StringFlag{Name: "header-reset", Value: "RateLimit-Reset", EnvVars: []string{"LIMIT_RESET_HEADER"}},
			&cli.BoolFlag{Name: "stop-increment-over-limit", EnvVars: []string{"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT"}, Usage: "requests refused are not counted (every limit defaults to on_reject: refund)"},
			&cli.BoolFlag{Name: "merge-domains", EnvVars: []string{"MERGE_DOMAIN_CONFIG"}, Usage: "several files may extend one domain"},
			&cli.BoolFlag{Name: "fail-closed-unavailable", Usage: "a descriptor failing closed answers gRPC UNAVAILABLE (Envoy's failure_mode_deny decides) instead of OVER_LIMIT"},
			&cli.Float64Flag{Name: "near-limit-ratio", Value: 0.8, EnvVars: []string{"NEAR_LIMIT_RATIO"}, Usage: "share of a limit above which admissions count as near_limit"},
			&cli.IntFlag{Name: "max-descriptors", Value: 256, Usage: "descriptors per request; more is INVALID_ARGUMENT"},
			procsflag.Flag(),
			&cli.IntFlag{Name: "gc-heap-floor-mib", Value: daemon.DefaultHeapFloorMiB, Usage: "the garbage collector's heap goal is at least this many MiB (memory ≤ max(floor, 2 × live heap)): with rls's few MB of live heap, Go's default goal (4 MB) makes the collector run ten times a second under load; 0 = Go's default; ignored when GOGC is set"},
		}, append(grpcFlags(), append(append(storeflags.Flags(), globalflags.Flags()...), eventsflag.Flags()...)...)...),
		Action: run,
	}
}

// configDir is --config-dir, else envoyproxy/ratelimit's runtime layout.
func configDir(c *cli.Context) (string, error) {
	if d := c.String("config-dir"); d != "" {
		return d, nil
	}
	root, sub := os.Getenv("RUNTIME_ROOT"), os.Getenv("RUNTIME_SUBDIRECTORY")
	if root == "" {
		root = "/srv/runtime_data/current"
	}
	app := os.Getenv("RUNTIME_APPDIRECTORY")
	if app == "" {
		app = "config"
	}
	if sub == "" {
		return "", fmt.Errorf("no --config-dir and no RUNTIME_SUBDIRECTORY")
	}
	return filepath.Join(root, sub, app), nil
}

func run(c *cli.Context) error {
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	floor := c.Int("gc-heap-floor-mib")
	if floor < 0 {
		return fmt.Errorf("--gc-heap-floor-mib %d: want ≥ 0", floor)
	}
	daemon.StartHeapFloor(uint64(floor)<<20, logger)
	ctx, stop := daemon.StopContext(context.Background())
	defer stop()
	procsDone, err := procsflag.Start(ctx, c, logger)
	if err != nil {
		return err
	}
	defer func() { stop(); <-procsDone }()
	dir, err := configDir(c)
	if err != nil {
		return err
	}
	cfg, shared, err := storeflags.Open(c)
	if err != nil {
		return err
	}
	defer shared.Close()
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	metrics, err := pop.NewMetrics(reg)
	if err != nil {
		return err
	}
	stats, err := rls.NewStats(reg, 0)
	if err != nil {
		return err
	}
	cfg.NewGlobal, cfg.HealthReasons, err = globalflags.Wire(c, cfg.Store, c.Int("workers-per-pop"), reg)
	if err != nil {
		return err
	}
	cfg.WorkersPerPoP, cfg.PoPs = c.Int("workers-per-pop"), c.Int("pops")
	cfg.Metrics, cfg.Logger = metrics, logger
	limiter, err := pop.New(cfg)
	if err != nil {
		return err
	}
	events, eventsDone, err := eventsflag.Start(ctx, c, metrics, reg, logger)
	if err != nil {
		return err
	}
	// stop ends the events' context; it must run before waiting for them.
	defer func() { stop(); eventsDone() }()
	svc, err := rls.NewService(rls.ServiceConfig{
		Limiter: limiter, ShadowMode: c.Bool("shadow-mode"), Headers: c.Bool("response-headers"),
		HeaderLimit: c.String("header-limit"), HeaderRemaining: c.String("header-remaining"), HeaderReset: c.String("header-reset"),
		FailClosedUnavailable: c.Bool("fail-closed-unavailable"), NearLimitRatio: c.Float64("near-limit-ratio"),
		MaxDescriptors: c.Int("max-descriptors"), Stats: stats, Events: events, Logger: logger,
	})
	if err != nil {
		return err
	}
	opt := rls.Options{StopIncrementOverLimit: c.Bool("stop-increment-over-limit"), MergeDomains: c.Bool("merge-domains")}
	healthSrv := health.NewServer()
	watched, err := daemon.Watch(ctx, daemon.WatchConfig{Path: dir, Dir: true, LoadFirst: true, Logger: logger, Load: func(string) error { return svc.LoadDir(dir, opt) }})
	if err != nil {
		return err
	}
	defer func() { stop(); <-watched }()
	go limiter.Run(ctx, 0)
	return serve(ctx, c, logger, svc, healthSrv, reg)
}

// serve runs the gRPC server (and the HTTP one with --http) until ctx
// ends, then stops both gracefully.
func serve(ctx context.Context, c *cli.Context, logger *slog.Logger, svc *rls.Service, healthSrv *health.Server, reg *prometheus.Registry) error {
	ln, err := net.Listen("tcp", c.String("grpc"))
	if err != nil {
		return err
	}
	gs := grpc.NewServer(grpcOptions(c)...)
	rlv3.RegisterRateLimitServiceServer(gs, svc)
	healthpb.RegisterHealthServer(gs, healthSrv)
	healthSrv.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	healthSrv.SetServingStatus(rlv3.RateLimitService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	logger.Info("listening", "listener", "grpc", "addr", ln.Addr().String())
	grpcErr := make(chan error, 1)
	go func() { grpcErr <- gs.Serve(ln) }()
	httpErr := make(chan error, 1)
	if addr := c.String("http"); addr != "" {
		mux := http.NewServeMux()
		mux.Handle("/json", svc.JSONHandler())
		mux.Handle("/healthcheck", svc.HealthHandler())
		mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
		if c.Bool("pprof") {
			daemon.MountPprof(mux, logger)
		}
		srv := &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelWarn)}
		go func() {
			httpErr <- daemon.ServeHTTP(ctx, daemon.ServeConfig{Servers: map[string]*http.Server{"http": srv}, Logger: logger})
		}()
	} else {
		close(httpErr)
	}
	select {
	case err = <-grpcErr:
	case err = <-httpErr:
	case <-ctx.Done():
	}
	healthSrv.Shutdown()
	done := make(chan struct{})
	go func() { gs.GracefulStop(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		gs.Stop()
	}
	return err
}
