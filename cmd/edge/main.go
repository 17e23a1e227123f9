// Command edge is a poplimit edge worker: an HTTP reverse proxy with the
// pop rate limiter in front of an upstream, counting through memcached
// (usually the host's mcproxy) so every worker of a PoP shares one count.
//
// Usage:
//
//	edge --listen 127.0.0.1:8080 --upstream http://127.0.0.1:9000 \
//	     --memcached 127.0.0.1:22121 --policy testdata/policies/example.yml \
//	     --admin 127.0.0.1:9090 --workers-per-pop 4 --store-deadline 20ms \
//	     --store-client gomemcache
//
// The admin listener serves /metrics (Prometheus), /healthz and POST
// /reload. The policy file is also reloaded when it changes on disk and on
// SIGHUP. This file only wires flags to package pop and counter.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/urfave/cli/v2"

	"github.com/poplimit/poplimit/counter"
	"github.com/poplimit/poplimit/pop"
)

func main() {
	app := &cli.App{
		Name:  "edge",
		Usage: "poplimit edge worker: rate-limiting reverse proxy sharing one count per PoP through memcached",
		Description: "Every request is decided by the policy file (tiers, routes, compound limits, fail modes)\n" +
			"before being proxied to --upstream. Counts live in memcached behind --memcached (normally the\n" +
			"host's mcproxy); without --memcached, an in-process store is used (one worker, no sharing).\n" +
			"Admin endpoints on --admin: GET /metrics, GET /healthz, POST /reload. SIGHUP and edits of the\n" +
			"policy file reload it too; an invalid file keeps the previous policy.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "listen", Value: "127.0.0.1:8080", Usage: "address of the proxied HTTP listener"},
			&cli.StringFlag{Name: "upstream", Required: true, Usage: "upstream base `URL`, e.g. http://127.0.0.1:9000"},
			&cli.StringSliceFlag{Name: "memcached", Usage: "memcached or mcproxy `ADDR` (host:port); repeatable; empty = in-process store"},
			&cli.StringFlag{Name: "policy", Required: true, Usage: "policy YAML `FILE` (see testdata/policies/example.yml)"},
			&cli.StringFlag{Name: "admin", Value: "127.0.0.1:9090", Usage: "admin listener address (/metrics, /healthz, POST /reload); empty disables"},
			&cli.IntFlag{Name: "workers-per-pop", Value: 1, Usage: "number of edge workers in the PoP: the local fail mode enforces limit ÷ this"},
			&cli.DurationFlag{Name: "store-deadline", Value: 20 * time.Millisecond, Usage: "deadline of one decision's store calls (also the memcached socket timeout)"},
			&cli.IntFlag{Name: "breaker-failures", Value: 5, Usage: "consecutive store failures that open the circuit breaker"},
			&cli.DurationFlag{Name: "breaker-open", Value: 500 * time.Millisecond, Usage: "how long the breaker stays open before a half-open probe"},
			&cli.StringFlag{Name: "store-client", Value: "gomemcache", Usage: "memcached client: 'gomemcache' (counter.MemcacheStore over bradfitz/gomemcache, the project's designated workers' client; several addresses are hashed by gomemcache) or 'pipe' (counter.PipeStore: pipelined, one round trip per sliding-window decision and ~20% less CPU per decision; one --memcached address, normally mcproxy)"},
			&cli.IntFlag{Name: "store-multiplex", Value: 0, Usage: "with --store-client pipe: number of connections shared by all requests (concurrent store calls are written together, replies read in order: fewer syscalls); 0 = one pooled connection per call"},
			&cli.StringFlag{Name: "events", Usage: "write rejection events as JSON lines to `FILE` ('-' for stderr); empty disables"},
		},
		Action: run,
	}
	if err := app.Run(os.Args); err != nil {
		fmt.Fprintln(os.Stderr, "edge:", err)
		os.Exit(1)
	}
}

func run(c *cli.Context) error {
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	upstream, err := url.Parse(c.String("upstream"))
	if err != nil || upstream.Host == "" {
		return fmt.Errorf("--upstream %q: not an absolute URL", c.String("upstream"))
	}
	deadline := c.Duration("store-deadline")

	store, err := newStore(c.String("store-client"), c.StringSlice("memcached"), deadline, c.Int("store-multiplex"))
	if err != nil {
		return err
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	metrics, err := pop.NewMetrics(reg)
	if err != nil {
		return err
	}
	var events *pop.Events
	if path := c.String("events"); path != "" {
		sink := os.Stderr
		if path != "-" {
			f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
			if err != nil {
				return err
			}
			defer f.Close()
			sink = f
		}
		events = pop.NewEvents(sink, pop.EventsConfig{Logger: logger})
		done := make(chan struct{})
		go func() {
			if err := events.Run(ctx); err != nil {
				logger.Warn("events: sink failed", "err", err)
			}
			close(done)
		}()
		// stop ends Run's context; it must run before waiting for Run, or
		// any early return below would wait forever.
		defer func() { stop(); <-done }()
	}

	limiter, err := pop.New(pop.Config{
		NewShared:     func(l counter.Limit) (counter.Allower, error) { return counter.New(store, l) },
		NewLocal:      func(l counter.Limit) (counter.Allower, error) { return counter.NewLocal(l) },
		StoreDeadline: deadline,
		WorkersPerPoP: c.Int("workers-per-pop"),
		Breaker:       pop.BreakerConfig{Failures: c.Int("breaker-failures"), OpenFor: c.Duration("breaker-open")},
		Metrics:       metrics,
		Events:        events,
		Logger:        logger,
	})
	if err != nil {
		return err
	}
	policy := c.String("policy")
	if err := limiter.LoadFile(policy); err != nil {
		return err
	}
	watched, err := limiter.WatchFile(ctx, policy)
	if err != nil {
		return err
	}
	hup := limiter.ReloadOnSignal(ctx, policy, syscall.SIGHUP)
	go limiter.Run(ctx, 0)

	proxy := httputil.NewSingleHostReverseProxy(upstream)
	proxy.Transport = &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        1024,
		MaxIdleConnsPerHost: 1024,
		IdleConnTimeout:     90 * time.Second,
	}
	proxy.ErrorLog = slog.NewLogLogger(logger.Handler(), slog.LevelWarn)

	servers := []*http.Server{{Addr: c.String("listen"), Handler: limiter.Middleware(proxy), ReadHeaderTimeout: 10 * time.Second}}
	if addr := c.String("admin"); addr != "" {
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
		mux.Handle("GET /healthz", limiter.HealthHandler())
		mux.Handle("/reload", limiter.ReloadHandler(policy))
		servers = append(servers, &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 10 * time.Second})
	}
	errc := make(chan error, len(servers))
	for _, s := range servers {
		ln, err := net.Listen("tcp", s.Addr)
		if err != nil {
			return err
		}
		logger.Info("listening", "addr", ln.Addr().String())
		go func() { errc <- s.Serve(ln) }()
	}
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, s := range servers {
		s.Shutdown(sctx)
	}
	stop()
	<-watched
	<-hup
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

// newStore builds the shared count's store: an in-process one without
// addresses, else the named memcached client with timeout as its socket
// timeout (multiplex: counter.PipeConfig.Multiplex).
func newStore(client string, addrs []string, timeout time.Duration, multiplex int) (counter.Store, error) {
	switch {
	case client != "pipe" && client != "gomemcache":
		return nil, fmt.Errorf("--store-client %q: want pipe or gomemcache", client)
	case multiplex < 0:
		return nil, fmt.Errorf("--store-multiplex %d: want 0 or more", multiplex)
	case len(addrs) == 0:
		return counter.NewMemoryStore(), nil
	case client == "gomemcache":
		return counter.NewMemcacheStore(counter.NewMemcacheClient(counter.MemcacheConfig{Servers: addrs, Timeout: timeout})), nil
	case len(addrs) > 1:
		return nil, fmt.Errorf("--store-client pipe speaks to one address (the host's mcproxy), got %d --memcached; use --store-client gomemcache to hash over several", len(addrs))
	}
	return counter.NewPipeStore(counter.PipeConfig{Addr: addrs[0], Timeout: timeout, Multiplex: multiplex}), nil
}
