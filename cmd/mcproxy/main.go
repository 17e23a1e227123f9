// Command mcproxy is the counter proxy daemon: a Twemproxy-style
// consistent-hashing memcached proxy. It only wires flags or a nutcracker
// YAML file to package proxy.
//
//	mcproxy --listen 127.0.0.1:22121 --shard 127.0.0.1:11211 --shard 127.0.0.1:11212
//	mcproxy --config testdata/mcproxy.yml
//	mcproxy --embedded 3
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/poplimit/poplimit/proxy"
	"github.com/poplimit/poplimit/shard"
)

// version is the mcproxy release.
const version = "0.2.0"

func main() {
	app := &cli.App{
		Name:    "mcproxy",
		Usage:   "consistent-hashing memcached proxy (Twemproxy compatible)",
		Version: version,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "listen", Value: proxy.DefaultListen, Usage: "listen address (loopback by default)"},
			&cli.StringSliceFlag{Name: "shard", Usage: "memcached shard host:port[:weight [name]] (repeat)"},
			&cli.StringFlag{Name: "hash-tag", Value: "{}", Usage: "two-character hash tag; \"\" hashes whole keys"},
			&cli.StringFlag{Name: "distribution", Value: shard.DistConsistent, Usage: "consistent (xxhash) or ketama (Twemproxy's)"},
			&cli.StringFlag{Name: "hash", Usage: "ketama hash (fnv1a_64 default)"},
			&cli.DurationFlag{Name: "timeout", Value: 400 * time.Millisecond, Usage: "per request and connect timeout"},
			&cli.IntFlag{Name: "server-connections", Value: 1, Usage: "pipelined connections per shard"},
			&cli.BoolFlag{Name: "auto-eject", Usage: "eject failing shards (auto_eject_hosts)"},
			&cli.IntFlag{Name: "failure-limit", Value: 2, Usage: "consecutive failures that eject a shard"},
			&cli.DurationFlag{Name: "retry-timeout", Value: 30 * time.Second, Usage: "time an ejected shard stays out before a probe"},
			&cli.StringFlag{Name: "config", Usage: "Twemproxy nutcracker.yml file (instead of --shard)"},
			&cli.IntFlag{Name: "embedded", Usage: "serve N in-process memory shards instead of memcached"},
			&cli.IntFlag{Name: "max-item-size", Value: 1 << 20, Usage: "largest value in bytes"},
		},
		Action: run,
	}
	if err := app.Run(os.Args); err != nil {
		fmt.Fprintln(os.Stderr, "mcproxy:", err)
		os.Exit(1)
	}
}

func run(c *cli.Context) error {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	pools, err := poolsFromFlags(c, log)
	if err != nil {
		return err
	}
	embedded := c.Int("embedded")
	limits := proxy.Limits{MaxItemSize: c.Int("max-item-size")}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	type running struct {
		srv *proxy.Server
		rt  *proxy.Router
	}
	var all []running
	errc := make(chan error, len(pools))
	for _, p := range pools {
		rc := p.RouterConfig()
		rc.Logger = log
		if embedded > 0 {
			rc.NewBackend = func(i int, s shard.Server, _ proxy.BackendHooks) (proxy.Backend, error) {
				return proxy.NewMemoryBackend(proxy.MemoryConfig{})
			}
		}
		rt, err := proxy.NewRouter(rc)
		if err != nil {
			return err
		}
		srv, err := proxy.NewServer(proxy.ServerConfig{Router: rt, Limits: limits, Logger: log})
		if err != nil {
			_ = rt.Close()
			return err
		}
		ln, err := net.Listen("tcp", p.ListenAddr())
		if err != nil {
			_ = rt.Close()
			return err
		}
		log.Info("mcproxy: listening", "pool", p.Name, "addr", ln.Addr().String(), "shards", len(p.Servers), "distribution", rc.Distribution, "hash_tag", p.HashTag)
		all = append(all, running{srv, rt})
		go func() { errc <- srv.Serve(ln) }()
	}

	var serveErr error
	select {
	case <-ctx.Done():
		log.Info("mcproxy: shutting down")
	case serveErr = <-errc:
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, r := range all {
		_ = r.srv.Shutdown(sctx)
		_ = r.rt.Close()
	}
	if serveErr != nil && !errors.Is(serveErr, proxy.ErrServerClosed) {
		return serveErr
	}
	return nil
}

// poolsFromFlags builds the pools from --config, or from --shard and the
// other flags, or --embedded N.
func poolsFromFlags(c *cli.Context, log *slog.Logger) ([]proxy.PoolSpec, error) {
	if path := c.String("config"); path != "" {
		if len(c.StringSlice("shard")) > 0 {
			return nil, errors.New("--config and --shard are exclusive")
		}
		for _, f := range []string{"listen", "hash-tag", "distribution", "hash", "timeout", "server-connections", "auto-eject", "failure-limit", "retry-timeout"} {
			if c.IsSet(f) {
				log.Warn("mcproxy: flag ignored with --config (the file sets it per pool)", "flag", "--"+f)
			}
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		return proxy.ParseConfig(data, log)
	}
	p := proxy.PoolSpec{
		Name:               "flags",
		Listen:             c.String("listen"),
		Hash:               c.String("hash"),
		Distribution:       c.String("distribution"),
		HashTag:            c.String("hash-tag"),
		Timeout:            c.Duration("timeout"),
		ServerConnections:  c.Int("server-connections"),
		AutoEjectHosts:     c.Bool("auto-eject"),
		ServerFailureLimit: c.Int("failure-limit"),
		ServerRetryTimeout: c.Duration("retry-timeout"),
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
		ks, err := shard.ParseKetamaServer(s)
		if err != nil {
			return nil, fmt.Errorf("--shard %q: %w", s, err)
		}
		p.Servers = append(p.Servers, shard.Server{Addr: ks.Addr, Weight: ks.Weight, Name: ks.Name})
	}
	if len(p.Servers) == 0 {
		return nil, errors.New("no shards: give --shard host:port (repeat), --config file.yml or --embedded N")
	}
	return []proxy.PoolSpec{p}, p.Validate()
}
