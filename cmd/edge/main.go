// Command edge is a poplimit edge worker: an HTTP reverse proxy with the
// pop rate limiter in front of an upstream, counting through memcached
// (usually the host's mcproxy) so every worker of a PoP shares one count.
//
// Usage:
//
//	edge --listen 127.0.0.1:7480 --upstream http://127.0.0.1:9000 \
//	     --memcached 127.0.0.1:7411 --policy testdata/policies/example.yml \
//	     --admin 127.0.0.1:7481 --workers-per-pop 4
//
// The admin listener serves /metrics (Prometheus), /healthz (JSON: ok,
// degraded with reasons, failing) and POST /reload (behind --reload-token
// when set), and /debug/pprof/ with --pprof. The policy file is also
// reloaded when it changes on disk and on SIGHUP. Upstream exchanges are
// bounded (--upstream-*-timeout: 504; --max-body-bytes: 413) and the
// forwarding headers of untrusted peers are replaced (pop.Forwarder);
// slow clients are cut off (--read-header-timeout, --read-timeout,
// --write-timeout, --idle-timeout, --max-header-bytes). The proxied
// listener is served by fasthttp (--core fasthttp, fast.go) or net/http
// (--core net/http), both deciding through pop.Limiter. Both listeners
// default to loopback. Limits with scope: global count across PoPs through
// --global-memcached (the home region's store; --pops, --global-overdraft,
// --global-horizon, --global-wait; package pop/global, flags in
// cmd/internal/globalflags). The store, store-deadline and breaker flags
// are cmd/internal/storeflags', shared with rls.
// This file only wires flags to packages pop and counter.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"time"
	_ "time/tzdata" // calendar windows' time zones on hosts without zoneinfo

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/urfave/cli/v2"

	"github.com/poplimit/poplimit/cmd/internal/daemon"
	"github.com/poplimit/poplimit/cmd/internal/eventsflag"
	"github.com/poplimit/poplimit/cmd/internal/globalflags"
	"github.com/poplimit/poplimit/cmd/internal/procsflag"
	"github.com/poplimit/poplimit/cmd/internal/storeflags"
	"github.com/poplimit/poplimit/counter"
	"github.com/poplimit/poplimit/pop"
)

func main() {
	if err := newApp().Run(os.Args); err != nil {
		fmt.Fprintln(os.Stderr, "edge:", err)
		os.Exit(1)
	}
}

// newApp is the command: its flags, wired by run.
func newApp() *cli.App {
	return &cli.App{
		Name:    "edge",
		Version: daemon.Version(),
		Usage:   "poplimit edge worker: rate-limiting reverse proxy sharing one count per PoP through memcached",
		Description: "Every request is decided by the policy file (tiers, routes, compound limits, fail modes)\n" +
			"before being proxied to --upstream. Counts live in memcached behind --memcached (normally the\n" +
			"host's mcproxy); without --memcached, an in-process store is used (one worker, no sharing).\n" +
			"Admin endpoints on --admin: GET /metrics, GET /healthz, POST /reload. SIGHUP and edits of the\n" +
			"policy file reload it too; an invalid file keeps the previous policy (and /healthz says degraded).\n\n" +
			"Paths are normalised before matching (dot segments, duplicate and trailing slashes, escaped\n" +
			"unreserved characters; case with case_insensitive_paths) and forwarded in that form; requests no\n" +
			"route matches get the policy file's default_policy. X-Forwarded-For, Forwarded, X-Forwarded-Proto\n" +
			"and -Host from a peer outside trusted_proxies are replaced by this hop's view before proxying; a\n" +
			"trusted proxy's chains are kept (their last max_forwarded_hops entries) and the peer appended.\n" +
			"Upstream: 504 when --upstream-dial-timeout, --upstream-header-timeout or --upstream-timeout\n" +
			"expires, 413 beyond --max-body-bytes. Clients: --read-header-timeout, --read-timeout,\n" +
			"--write-timeout, --idle-timeout, --max-header-bytes. Failed accepts (EMFILE) back off and count in\n" +
			"poplimit_edge_accept_errors_total. Both listeners default to loopback; a non-loopback --admin is\n" +
			"logged as a warning.",
		Flags: append([]cli.Flag{
			&cli.StringFlag{Name: "listen", Value: "127.0.0.1:7480", Usage: "address of the proxied HTTP listener (7480: clear of 8080, taken by envoyproxy/ratelimit and most dev servers)"},
			&cli.StringFlag{Name: "upstream", Required: true, Usage: "upstream base `URL`, e.g. http://127.0.0.1:9000"},
			&cli.StringFlag{Name: "policy", Usage: "policy YAML `FILE` (this or --policy-source is required: edge has no built-in policy, so it never enforces example limits by accident; reference pop/policy/POLICY.md, example testdata/policies/example.yml)"},
			&cli.StringFlag{Name: "policy-source", Usage: "policy from PostgreSQL, `postgres://...` (pop/pgpolicy: tiers and keys pushed by NOTIFY; instead of --policy; schema by popctl migrate)"},
			&cli.StringFlag{Name: "policy-cache", Usage: "with --policy-source: snapshot cache `FILE`, written after each load and served at start while PostgreSQL is down"},
			&cli.DurationFlag{Name: "policy-resync", Value: 30 * time.Second, Usage: "with --policy-source: period of the full re-read"},
			&cli.StringFlag{Name: "admin", Value: "127.0.0.1:7481", Usage: "admin listener address (/metrics, /healthz, POST /reload); empty disables (7481: not Prometheus's 9090 or an exporter's 9091-9100)"},
			&cli.IntFlag{Name: "workers-per-pop", Value: 1, Usage: "number of edge workers in the PoP: the local fail mode enforces limit ÷ this"},
			// The upstream exchange (pop.ForwardConfig): 504 when a timeout expires, 413 over the body limit.
			&cli.DurationFlag{Name: "upstream-dial-timeout", Value: 5 * time.Second, Usage: "connecting to the upstream (504 on expiry; 5s: a LAN upstream connects in milliseconds, 5s rides out two lost SYNs)"},
			&cli.DurationFlag{Name: "upstream-header-timeout", Value: 30 * time.Second, Usage: "waiting for the upstream's response headers once the request is sent (504 on expiry; 30s: the slowest API answer worth waiting for, as Envoy's and nginx's defaults are 15-60s)"},
			&cli.DurationFlag{Name: "upstream-timeout", Value: 60 * time.Second, Usage: "one whole upstream exchange, response body included (504 when no response started, else the response is cut; 60s bounds what one request can hold; raise it for long downloads)"},
			&cli.Int64Flag{Name: "max-body-bytes", Value: 10 << 20, Usage: "largest request body forwarded; longer ones get 413; negative = no limit"},
			&cli.StringFlag{Name: "core", Value: "fasthttp", Usage: "what serves and forwards the proxied listener: fasthttp (buffers each upstream response whole, no protocol upgrades) or net/http (httputil.ReverseProxy: streams responses, upgrades); same flags, decisions, headers and limits"},
			// The client side: slow clients are cut off.
			&cli.IntFlag{Name: "max-header-bytes", Value: 64 << 10, Usage: "largest request line + headers accepted (431 beyond)"},
			&cli.DurationFlag{Name: "read-header-timeout", Value: 10 * time.Second, Usage: "time a client has to send its request headers (10s: one round trip for a real client, a slowloris client is cut)"},
			&cli.DurationFlag{Name: "read-timeout", Value: 60 * time.Second, Usage: "time a client has to send a whole request, body included (60s: a 10 MiB body at ~170 KB/s)"},
			&cli.DurationFlag{Name: "write-timeout", Value: 90 * time.Second, Usage: "time to write a response, from the end of the request headers (keep it above --upstream-timeout)"},
			&cli.DurationFlag{Name: "idle-timeout", Value: 60 * time.Second, Usage: "how long an idle keep-alive connection is kept (60s: above the 30-55s idle timeouts of common load balancers, so they close first)"},
			// Admin listener.
			&cli.StringFlag{Name: "reload-token", EnvVars: []string{"EDGE_RELOAD_TOKEN"}, Usage: "POST /reload requires 'Authorization: Bearer TOKEN' (env EDGE_RELOAD_TOKEN); empty = no token"},
			&cli.BoolFlag{Name: "pprof", Usage: "serve net/http/pprof under /debug/pprof/ on the admin listener"},
			&cli.BoolFlag{Name: "shadow", Usage: "dry run: every limit counts and decides, but would-be rejections are admitted and reported (poplimit_shadow_rejections_total, events with \"shadow\": true, X-RateLimit-Shadow with the policy's shadow_header); enforce by restarting without it, or per limit/policy with shadow: in the policy file and a reload"},
			procsflag.Flag(),
		}, append(append(storeflags.Flags(), globalflags.Flags()...), eventsflag.Flags()...)...),
		Action: run,
	}
}

func run(c *cli.Context) error {
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctx, stop := daemon.StopContext(context.Background())
	defer stop()
	procsDone, err := procsflag.Start(ctx, c, logger)
	if err != nil {
		return err
	}
	defer func() { stop(); <-procsDone }()

	upstream, err := url.Parse(c.String("upstream"))
	if err != nil || upstream.Host == "" {
		return fmt.Errorf("--upstream %q: not an absolute URL", c.String("upstream"))
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
	events, eventsDone, err := eventsflag.Start(ctx, c, metrics, reg, logger)
	if err != nil {
		return err
	}
	// stop ends the events' context; it must run before waiting for them,
	// or any early return below would wait forever.
	defer func() { stop(); eventsDone() }()

	newGlobal, healthReasons, err := globalflags.Wire(c, cfg.Store, c.Int("workers-per-pop"), reg)
	if err != nil {
		return err
	}
	var src policySource
	cfg.HealthReasons = src.healthReasons(healthReasons)
	cfg.Shadow, cfg.NewGlobal = c.Bool("shadow"), newGlobal
	cfg.NewLocal = func(l counter.Limit) (counter.Allower, error) { return counter.NewLocal(l) }
	cfg.WorkersPerPoP, cfg.PoPs = c.Int("workers-per-pop"), c.Int("pops")
	cfg.Metrics, cfg.Events, cfg.Logger = metrics, events, logger
	limiter, err := pop.New(cfg)
	if err != nil {
		return err
	}
	policy := c.String("policy")
	if policy == "" && c.String("policy-source") == "" {
		return fmt.Errorf("--policy FILE or --policy-source postgres://... is required")
	}
	if c.String("policy-source") != "" {
		done, err := src.start(ctx, c, limiter, reg, logger)
		if err != nil {
			return err
		}
		defer func() { stop(); <-done }()
	} else {
		watched, err := daemon.Watch(ctx, daemon.WatchConfig{Path: policy, LoadFirst: true, Load: func(string) error { return limiter.LoadFile(policy) }, Logger: logger})
		if err != nil {
			return err
		}
		defer func() { stop(); <-watched }()
	}
	go limiter.Run(ctx, 0)

	acceptErrors := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "poplimit_edge_accept_errors_total", Help: "Failed accepts (EMFILE, ENFILE, ...) by listener; the server backs off and keeps serving.",
	}, []string{"listener"})
	reg.MustRegister(acceptErrors)
	watch := func(name string, ln net.Listener) net.Listener {
		count := acceptErrors.WithLabelValues(name)
		return pop.WatchAccept(ln, pop.AcceptWatch{Logger: logger, Count: func(error) { count.Inc() }})
	}
	switch c.String("core") {
	case "fasthttp":
		return runFast(ctx, c, logger, limiter, upstream, adminMux(c, logger, reg, limiter, policy), watch)
	case "net/http":
	default:
		return fmt.Errorf("--core %q: want fasthttp or net/http", c.String("core"))
	}
	proxy, err := limiter.Forwarder(upstream, pop.ForwardConfig{
		DialTimeout:           c.Duration("upstream-dial-timeout"),
		ResponseHeaderTimeout: c.Duration("upstream-header-timeout"),
		Timeout:               c.Duration("upstream-timeout"),
		MaxBodyBytes:          c.Int64("max-body-bytes"),
		Logger:                logger,
	})
	if err != nil {
		return err
	}
	servers, err := newServers(c, logger, lingerUnread(limiter.Middleware(proxy)), adminMux(c, logger, reg, limiter, policy))
	if err != nil {
		return err
	}
	servers["proxy"].ConnContext = withLingerConn
	wrap := func(name string, ln net.Listener) net.Listener {
		if ln = watch(name, ln); name == "proxy" {
			ln = lingerListener{ln}
		}
		return ln
	}
	return daemon.ServeHTTP(ctx, daemon.ServeConfig{Servers: servers, Logger: logger, Wrap: wrap})
}

// newServers builds the proxied listener's server and, with --admin, the
// admin one, with the client-side limits and timeouts of the flags.
func newServers(c *cli.Context, logger *slog.Logger, proxied, admin http.Handler) (map[string]*http.Server, error) {
	if c.Int("max-header-bytes") <= 0 {
		return nil, fmt.Errorf("--max-header-bytes %d: want more than 0", c.Int("max-header-bytes"))
	}
	if w, u := c.Duration("write-timeout"), c.Duration("upstream-timeout"); w > 0 && w <= u {
		logger.Warn("--write-timeout is not above --upstream-timeout: slow upstream responses are cut by the write deadline", "write-timeout", w, "upstream-timeout", u)
	}
	srv := func(addr string, h http.Handler) *http.Server {
		return &http.Server{
			Addr: addr, Handler: h,
			MaxHeaderBytes:    c.Int("max-header-bytes"),
			ReadHeaderTimeout: c.Duration("read-header-timeout"),
			ReadTimeout:       c.Duration("read-timeout"),
			WriteTimeout:      c.Duration("write-timeout"),
			IdleTimeout:       c.Duration("idle-timeout"),
			ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
		}
	}
	servers := map[string]*http.Server{"proxy": srv(c.String("listen"), proxied)}
	if !pop.IsLoopback(c.String("listen")) {
		logger.Info("the proxied listener is not on loopback", "addr", c.String("listen"))
	}
	if addr := c.String("admin"); addr != "" {
		servers["admin"] = srv(addr, admin)
		if !pop.IsLoopback(addr) {
			logger.Warn("the admin listener is not on loopback: /metrics, /healthz and POST /reload are reachable from the network", "addr", addr, "reload-token", c.String("reload-token") != "", "pprof", c.Bool("pprof"))
		}
	}
	return servers, nil
}

// adminMux serves /metrics, /healthz, POST /reload (behind --reload-token)
// and, with --pprof, /debug/pprof/.
func adminMux(c *cli.Context, logger *slog.Logger, reg *prometheus.Registry, limiter *pop.Limiter, policy string) http.Handler {
	mux := http.NewServeMux()
	// Uncompressed, as mcproxy's: a gzip scrape allocates about 0.9 MB
	// (the flate compressor) per request, which moved the daemons' RSS.
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg, DisableCompression: true}))
	mux.Handle("GET /healthz", limiter.HealthHandler())
	mux.Handle("/reload", pop.RequireToken(c.String("reload-token"), limiter.ReloadHandler(policy)))
	if c.Bool("pprof") {
		daemon.MountPprof(mux, logger)
	}
	return mux
}
