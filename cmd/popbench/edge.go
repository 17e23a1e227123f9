package main

import (
	"fmt"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/poplimit/poplimit/bench/edgecmp"
)

// edgeCommand is "popbench edge": edge against nginx with limit_req,
// interleaved (package bench/edgecmp).
func edgeCommand() *cli.Command {
	return &cli.Command{
		Name:  "edge",
		Usage: "compare edge (with mcproxy and memcached) with nginx + limit_req: requests/s, latency, CPU per request",
		Description: `Starts a hello upstream, edge -> mcproxy -> memcached shards with a per-key
sliding window admitting everything, and Debian's nginx (a temporary prefix,
limit_req_zone on $http_x_api_key, the same upstream), then runs wrk
(random X-API-Key out of --keys) against edge, nginx, edge, nginx, ...
Reports requests/s, p50/p99/p999 (wrk's HDR histogram) and the CPU per
request of each proxy's processes from /proc (edge + mcproxy + memcached;
nginx master + workers), then edge/nginx ratios of the medians.

  popbench edge --peer nginx --rounds 3 --duration 6s`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "peer", Value: "nginx", Usage: "proxy compared with edge: nginx or none"},
			&cli.IntFlag{Name: "rounds", Value: 2, Usage: "interleaved rounds"},
			&cli.DurationFlag{Name: "duration", Value: 6 * time.Second, Usage: "one wrk run"},
			&cli.IntFlag{Name: "conns", Value: 64, Usage: "wrk -c"},
			&cli.IntFlag{Name: "threads", Value: 2, Usage: "wrk -t"},
			&cli.IntFlag{Name: "keys", Value: 10000, Usage: "distinct API keys"},
			&cli.IntFlag{Name: "shards", Value: 3, Usage: "memcached shards behind mcproxy"},
			&cli.IntFlag{Name: "nginx-workers", Value: 2, Usage: "nginx worker_processes"},
			&cli.StringFlag{Name: "edge", Usage: "edge binary (default: go build ./cmd/edge)"},
			&cli.StringFlag{Name: "mcproxy", Usage: "mcproxy binary (default: go build ./cmd/mcproxy)"},
			&cli.StringSliceFlag{Name: "edge-arg", Usage: "extra edge flag (repeatable), e.g. --edge-arg=--core=net/http"},
			&cli.BoolFlag{Name: "no-limit", Usage: "edge forwards without deciding (its policy limits no route): the proxying's own cost, for scale; nginx keeps limit_req"},
			&cli.StringFlag{Name: "dir", Usage: "keep configurations and logs in `DIR` (default: a removed temp dir)"},
			&cli.BoolFlag{Name: "pprof", Usage: "serve /debug/pprof/ on edge's admin listener (its URL is logged) to profile it during the run"},
			&cli.BoolFlag{Name: "json", Usage: "print JSON instead of a table"},
		},
		Action: func(c *cli.Context) error {
			cfg := edgecmp.Config{
				Peer: c.String("peer"), Rounds: c.Int("rounds"), Duration: c.Duration("duration"),
				Conns: c.Int("conns"), Threads: c.Int("threads"), Keys: c.Int("keys"), Shards: c.Int("shards"),
				NginxWorkers: c.Int("nginx-workers"), Edge: c.String("edge"), Mcproxy: c.String("mcproxy"),
				EdgeArgs: c.StringSlice("edge-arg"), NoLimit: c.Bool("no-limit"), Dir: c.String("dir"),
				Pprof:    c.Bool("pprof"),
				Progress: func(s string) { fmt.Fprintln(c.App.ErrWriter, s) },
			}
			rep, err := cfg.Run(c.Context)
			if err != nil {
				return err
			}
			return output(c, rep, rep.Tables())
		},
	}
}
