// Command mcproxy is the counter proxy daemon: a Twemproxy-style
// consistent-hashing memcached proxy. It only wires flags or a nutcracker
// YAML file to package proxy.
//
//	mcproxy --listen 127.0.0.1:7411 --shard 127.0.0.1:11211 --shard 127.0.0.1:11212
//	mcproxy --config testdata/mcproxy.yml            (several pools; SIGHUP or a file change reloads)
//	mcproxy --listen unix:/run/mcproxy.sock --embedded 3
//
// Operations: Prometheus metrics, /healthz and Twemproxy's stats JSON on
// --admin (loopback by default); nutcracker's raw stats port with
// --stats-port; graceful shutdown on SIGTERM/SIGINT within
// --shutdown-timeout; logs through log/slog (--log-format, --log-level).
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/urfave/cli/v2"

	"github.com/poplimit/poplimit/cmd/internal/daemon"
	"github.com/poplimit/poplimit/cmd/internal/procsflag"
	"github.com/poplimit/poplimit/proxy"
	"github.com/poplimit/poplimit/proxy/embedded"
	"github.com/poplimit/poplimit/proxy/fastconn"
	"github.com/poplimit/poplimit/proxy/protocol"
	"github.com/poplimit/poplimit/shard"
)

// version is the build's module version (daemon.Build): what the
// memcached "version" command, the stats JSON and /healthz report.
var version = daemon.Build().Version

// DefaultAdmin is the default admin (metrics, health, stats) address: HTTP,
// so not nutcracker's raw stats port 22222 (--stats-port serves that
// protocol); next to the listener's default 7411.
const DefaultAdmin = "127.0.0.1:7412"

// poolFlags are the flags that describe the one pool built from flags;
// with --config the file sets them per pool.
var poolFlags = []string{"listen", "hash-tag", "distribution", "hash", "timeout", "server-connections", "auto-eject", "failure-limit", "retry-timeout"}

func main() {
	if err := newApp().Run(os.Args); err != nil {
		fmt.Fprintln(os.Stderr, "mcproxy:", err)
		os.Exit(1)
	}
}

func newApp() *cli.App {
	return &cli.App{
		Name:    "mcproxy",
		Usage:   "consistent-hashing memcached proxy (Twemproxy compatible)",
		Version: daemon.Version(),
		Description: "Serves the memcached text and meta protocols and forwards each key to its shard.\n" +
			"Pools come from --shard flags (one pool) or a nutcracker YAML file (--config, any number of pools).\n" +
			"With --config, SIGHUP and changes of the file reload it without dropping client connections:\n" +
			"shards added or removed and settings changed; requests in flight finish on the old shards;\n" +
			"an invalid file is rejected with a logged reason and the running configuration stays.\n" +
			"SIGTERM/SIGINT: stop accepting, answer what was read, close within --shutdown-timeout.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "listen", Value: proxy.DefaultListen, Usage: "listen address: host:port (loopback by default), or a Unix socket unix:/path/mc.sock[ mode] (e.g. \"unix:/run/mc.sock 0666\")"},
			&cli.StringSliceFlag{Name: "shard", Usage: "memcached shard host:port[:weight [name]] (repeat)"},
			&cli.StringFlag{Name: "hash-tag", Value: "{}", Usage: "two-character hash tag; \"\" hashes whole keys"},
			&cli.StringFlag{Name: "distribution", Value: shard.DistConsistent, Usage: "consistent (xxhash), or Twemproxy's ketama, modula or random"},
			&cli.StringFlag{Name: "hash", Usage: "ketama hash (fnv1a_64 default)"},
			&cli.DurationFlag{Name: "timeout", Value: 400 * time.Millisecond, Usage: "per request and connect timeout to a shard (400ms: Twemproxy's documented example; under edge's 1s store-deadline ceiling, so a stuck shard answers SERVER_ERROR, a hard failure edge's breaker counts, before the worker gives up)"},
			&cli.IntFlag{Name: "server-connections", Value: 1, Usage: "pipelined connections per shard"},
			&cli.BoolFlag{Name: "auto-eject", Usage: "eject failing shards (auto_eject_hosts)"},
			&cli.IntFlag{Name: "failure-limit", Value: 2, Usage: "consecutive failures that eject a shard"},
			&cli.DurationFlag{Name: "retry-timeout", Value: 30 * time.Second, Usage: "time an ejected shard stays out before a probe (30s: Twemproxy's example; each return moves keys, so not sooner)"},
			&cli.StringFlag{Name: "config", Usage: "Twemproxy nutcracker.yml file (instead of --shard); reloaded on SIGHUP and on change"},
			&cli.BoolFlag{Name: "watch", Value: true, Usage: "with --config, reload when the file changes (SIGHUP always reloads)"},
			&cli.IntFlag{Name: "embedded", Usage: "serve N in-process memory shards instead of memcached"},
			&cli.IntFlag{Name: "max-item-size", Value: 1 << 20, Usage: "largest value in bytes"},
			&cli.IntFlag{Name: "client-connections", Usage: "most concurrent clients per pool, beyond: SERVER_ERROR and close (0: no limit; with --config, for pools without client_connections)"},
			&cli.DurationFlag{Name: "park-after", Value: proxy.DefaultParkAfter, Usage: "Linux: a client silent this long parks (kept as a bare descriptor, no goroutine or buffer, until it sends again; its next request pays a resume of about a dozen system calls); while 256 or more clients are idle or parked, every idle one parks after 50-100 ms. 0: never"},
			&cli.DurationFlag{Name: "client-idle-timeout", Usage: "close clients idle this long (0: never; with --config, for pools without client_timeout)"},
			&cli.DurationFlag{Name: "client-request-timeout", Value: proxy.DefaultRequestTimeout, Usage: "close a client whose command line or data block is not complete this long after its first byte (slow clients; 10s: a real client completes a request in one round trip, an attacker trickling bytes is cut); replies already due are written first (negative: never)"},
			&cli.StringFlag{Name: "admin", Value: DefaultAdmin, Usage: "HTTP address of /metrics (Prometheus), /healthz and /stats.json (Twemproxy stats); \"\" disables"},
			&cli.BoolFlag{Name: "pprof", Usage: "also serve net/http/pprof under /debug/pprof/ on --admin (off: profiles expose memory and cost CPU)"},
			&cli.IntFlag{Name: "stats-port", Usage: "also serve the Twemproxy stats JSON on this raw TCP port, like nutcracker -s (0: off)"},
			&cli.StringFlag{Name: "stats-addr", Value: "127.0.0.1", Usage: "address of --stats-port, like nutcracker -a"},
			&cli.DurationFlag{Name: "shutdown-timeout", Value: 5 * time.Second, Usage: "on SIGTERM, how long in-flight requests may take before connections are closed"},
			&cli.DurationFlag{Name: "drain-timeout", Value: 30 * time.Second, Usage: "on reload, how long replaced shards may take to answer their in-flight requests"},
			&cli.DurationFlag{Name: "gc-every", Value: daemon.DefaultGCEvery, Usage: "collect garbage at least this often (when the runtime has not on its own): mcproxy's heap is a few MB and its collections minutes apart at a moderate load, which lets its resident set climb for minutes; a collection every 10s keeps it flat for a few milliseconds of CPU per collection (0: only the runtime's own pacing)"},
			procsflag.Flag(),
			&cli.StringFlag{Name: "log-format", Value: "text", Usage: "log format: text or json (log/slog, to stderr)"},
			&cli.StringFlag{Name: "log-level", Value: "info", Usage: "log level: debug, info, warn or error"},
		},
		Action: run,
	}
}

// newLogger builds the slog logger of --log-format and --log-level.
func newLogger(format, level string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch strings.ToLower(format) {
	case "text", "":
		return slog.New(slog.NewTextHandler(os.Stderr, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(os.Stderr, opts)), nil
	}
	return nil, fmt.Errorf("--log-format %q: want text or json", format)
}

func run(c *cli.Context) error {
	log, err := newLogger(c.String("log-format"), c.String("log-level"))
	if err != nil {
		return err
	}
	slog.SetDefault(log)
	// Signals are caught, and the admin endpoint serves, before the
	// memcached listeners open: once the proxy answers, a SIGTERM is a
	// graceful stop (not the default death) and /metrics is up.
	ctx, stop := daemon.StopContext(context.Background())
	defer stop()
	procsDone, err := procsflag.Start(ctx, c, log) // from before the proxy serves
	if err != nil {
		return err
	}
	defer func() { stop(); <-procsDone }()
	pools, err := poolsFromFlags(c, log)
	if err != nil {
		return err
	}
	p := proxy.NewProxy(proxyConfig(c, log))
	stopOps, err := serveOps(c, p, log)
	defer stopOps()
	if err != nil {
		return err
	}
	if err := p.Reload(pools); err != nil {
		return err
	}
	shutdown := func() error { return shutdownProxy(p, c.Duration("shutdown-timeout"), log) }
	watched := watchConfig(ctx, c.String("config"), c.Bool("watch"), p, log)
	defer func() { stop(); <-watched }()
	gcDone := make(chan struct{})
	go func() { defer close(gcDone); daemon.RunGCFloor(ctx, c.Duration("gc-every")) }()
	defer func() { stop(); <-gcDone }()

	log.Info("mcproxy: serving", "io_uring", fastconn.Uring())
	failed := make(chan error, 1)
	go func() { failed <- p.Wait(ctx) }()
	select {
	case <-ctx.Done():
	case err := <-failed:
		if err != nil {
			log.Error("mcproxy: a listener failed", "err", err)
			_ = shutdown()
			return err
		}
	}
	log.Info("mcproxy: shutting down", "cause", context.Cause(ctx))
	return shutdown()
}

// proxyConfig is the proxy's configuration from the flags; --embedded
// serves in-process memory shards instead of memcached.
func proxyConfig(c *cli.Context, log *slog.Logger) proxy.ProxyConfig {
	pcfg := proxy.ProxyConfig{
		Logger:            log,
		ClientConnections: c.Int("client-connections"),
		ClientTimeout:     c.Duration("client-idle-timeout"),
		RequestTimeout:    c.Duration("client-request-timeout"),
		Limits:            protocol.Limits{MaxItemSize: c.Int("max-item-size")},
		DrainTimeout:      c.Duration("drain-timeout"),
		ParkAfter:         c.Duration("park-after"),
	}
	if pcfg.ParkAfter == 0 {
		pcfg.ParkAfter = -1 // --park-after 0: never
	}
	if c.Int("embedded") > 0 {
		pcfg.NewBackend = func(string, int, shard.Server, proxy.BackendHooks) (proxy.Backend, error) {
			sh, err := embedded.New(embedded.Config{ItemSizeMax: c.Int("max-item-size")})
			if err != nil {
				return nil, err
			}
			return proxy.NewLocalBackend(sh, nil), nil
		}
	}
	return pcfg
}

// shutdownProxy stops p gracefully: requests in flight get timeout, then
// the remaining client connections are closed (not an error).
func shutdownProxy(p *proxy.Proxy, timeout time.Duration, log *slog.Logger) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	err := p.Shutdown(ctx)
	if errors.Is(err, context.DeadlineExceeded) {
		log.Warn("mcproxy: shutdown timeout, closed the remaining client connections", "timeout", timeout)
		return nil
	}
	return err
}

// serveOps starts the admin endpoint (--admin) and the raw stats port
// (--stats-port); stop ends what was started, also after an error. A port
// that cannot be bound is an error: mcproxy never runs without the health
// and metrics it was asked for.
func serveOps(c *cli.Context, p *proxy.Proxy, log *slog.Logger) (stop func(), err error) {
	var stops []func()
	stop = func() {
		for _, f := range stops {
			f()
		}
	}
	if addr := c.String("admin"); addr != "" {
		s, err := serveAdmin(p, addr, c.Bool("pprof"), log)
		if err != nil {
			return stop, fmt.Errorf("%w (another mcproxy on this host? give each its own --admin, or \"\" to disable)", err)
		}
		stops = append(stops, s)
	}
	if port := c.Int("stats-port"); port > 0 {
		ln, err := net.Listen("tcp", net.JoinHostPort(c.String("stats-addr"), strconv.Itoa(port)))
		if err != nil {
			return stop, fmt.Errorf("--stats-port: %w", err)
		}
		done := make(chan struct{})
		go func() { defer close(done); _ = p.ServeStats(ln, version) }()
		log.Info("mcproxy: stats port", "addr", ln.Addr().String())
		stops = append(stops, func() { _ = ln.Close(); <-done })
	}
	return stop, nil
}

// watchConfig reloads the --config file (path) on SIGHUP and, with
// --watch, when it changes on disk, until ctx ends; the channel is closed
// when the watcher has stopped. Without --config, SIGHUP only logs that
// there is nothing to reload. A file watch that cannot be set up is
// logged and SIGHUP still reloads.
func watchConfig(ctx context.Context, path string, watch bool, p *proxy.Proxy, log *slog.Logger) <-chan struct{} {
	cfg := daemon.WatchConfig{Path: path, NoFileWatch: !watch, Debounce: 200 * time.Millisecond, Logger: log,
		Load: func(trigger string) error {
			if path == "" {
				log.Warn("mcproxy: nothing to reload without --config", "trigger", trigger)
				return nil
			}
			log.Info("mcproxy: reloading", "path", path, "trigger", trigger)
			err := p.ReloadFile(path)
			if err == nil {
				log.Info("mcproxy: config reloaded", "path", path, "pools", len(p.Pools()))
			}
			return err
		}}
	done, err := daemon.Watch(ctx, cfg)
	if err != nil {
		log.Error("mcproxy: cannot watch the config file; SIGHUP still reloads", "path", path, "err", err)
		cfg.NoFileWatch = true
		done, _ = daemon.Watch(ctx, cfg) // fails only without Load
	}
	return done
}

// serveAdmin serves the admin endpoints on addr; the returned func stops
// the server.
func serveAdmin(p *proxy.Proxy, addr string, withPprof bool, log *slog.Logger) (func(), error) {
	reg := prometheus.NewRegistry()
	for _, col := range []prometheus.Collector{p, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})} {
		if err := reg.Register(col); err != nil {
			return nil, err
		}
	}
	h, err := proxy.AdminHandler(proxy.AdminConfig{Proxy: p, Registry: reg, Version: version, Pprof: withPprof})
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--admin: %w", err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ln) }()
	paths := "/metrics /healthz /stats.json"
	if withPprof {
		paths += " /debug/pprof/"
	}
	log.Info("mcproxy: admin", "addr", ln.Addr().String(), "paths", paths)
	if !loopback(ln.Addr()) {
		log.Warn("mcproxy: the admin endpoint is not on loopback: anyone who reaches it reads the metrics and shard addresses", "addr", ln.Addr().String(), "pprof", withPprof)
	}
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		<-done
	}, nil
}

// poolsFromFlags builds the pools from --config, or from --shard and the
// other flags, or --embedded N.
func poolsFromFlags(c *cli.Context, log *slog.Logger) ([]proxy.PoolSpec, error) {
	if path := c.String("config"); path != "" {
		if len(c.StringSlice("shard")) > 0 {
			return nil, errors.New("--config and --shard are exclusive")
		}
		for _, f := range poolFlags {
			if c.IsSet(f) {
				log.Warn("mcproxy: flag ignored with --config (the file sets it per pool)", "flag", "--"+f)
			}
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		specs, err := proxy.ParseConfig(data, log)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		return specs, nil
	}
	p := proxy.PoolSpec{
		Name:               "flags",
		Listen:             strings.TrimPrefix(c.String("listen"), "tcp:"),
		Hash:               c.String("hash"),
		Distribution:       c.String("distribution"),
		HashTag:            c.String("hash-tag"),
		Timeout:            c.Duration("timeout"),
		ServerConnections:  c.Int("server-connections"),
		AutoEjectHosts:     c.Bool("auto-eject"),
		ServerFailureLimit: c.Int("failure-limit"),
		ServerRetryTimeout: c.Duration("retry-timeout"),
		ClientConnections:  c.Int("client-connections"),
		ClientTimeout:      c.Duration("client-idle-timeout"),
	}
	if n := c.Int("embedded"); n > 0 {
		if len(c.StringSlice("shard")) > 0 {
			return nil, errors.New("--embedded and --shard are exclusive")
		}
		for i := 0; i < n; i++ {
			p.Servers = append(p.Servers, shard.Server{Addr: "embedded-" + strconv.Itoa(i)})
		}
		return []proxy.PoolSpec{p}, p.Validate()
	}
	for _, s := range c.StringSlice("shard") {
		if _, _, err := net.SplitHostPort(s); err == nil {
			p.Servers = append(p.Servers, shard.Server{Addr: s})
			continue
		}
		sv, err := shard.ParseServer(s)
		if err != nil {
			return nil, fmt.Errorf("--shard %q: %w", s, err)
		}
		p.Servers = append(p.Servers, sv)
	}
	if len(p.Servers) == 0 {
		return nil, errors.New("no shards: give --shard host:port (repeat), --config file.yml or --embedded N")
	}
	return []proxy.PoolSpec{p}, p.Validate()
}

// loopback reports whether a listener's address is a loopback one
// (127.0.0.0/8, ::1); an unspecified address (all interfaces) is not.
func loopback(a net.Addr) bool {
	ta, ok := a.(*net.TCPAddr)
	return ok && ta.IP.IsLoopback()
}
