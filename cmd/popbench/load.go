package main

import (
	"time"

	"github.com/urfave/cli/v2"

	"github.com/poplimit/poplimit/bench"
)

func loadCommand() *cli.Command {
	return &cli.Command{
		Name:        "load",
		Usage:       "decisions/s and latency by algorithm (closed loop, Zipf identities) through a launched or existing PoP; --rate: open loop by path",
		Description: openLoadDescription,
		Flags: commonFlags(
			&cli.DurationFlag{Name: "duration", Usage: "length of each run", Value: 5 * time.Second},
			&cli.IntFlag{Name: "conns", Usage: "closed-loop clients", Value: 32},
			&cli.Uint64Flag{Name: "keys", Usage: "Zipf identity space", Value: 10000},
			&cli.Float64Flag{Name: "zipf", Usage: "Zipf exponent (> 1)", Value: 1.1},
			&cli.Int64Flag{Name: "quantity", Usage: "limit per window per identity", Value: 100},
			&cli.DurationFlag{Name: "window", Usage: "limit window", Value: time.Second},
			&cli.StringFlag{Name: "algorithm", Usage: "sliding, fixed, token (comma-separated, run interleaved)", Value: "sliding,fixed,token"},
			&cli.IntFlag{Name: "rounds", Usage: "interleaved rounds (A B C A B C …)", Value: 1},
			&cli.BoolFlag{Name: "http", Usage: "drive edge worker processes over HTTP instead of in-process workers"},
			&cli.IntFlag{Name: "workers", Usage: "workers (in-process or edges)", Value: 4},
			&cli.StringSliceFlag{Name: "proxy", Usage: "existing mcproxy/memcached address (repeatable): no PoP is launched"},
			&cli.StringSliceFlag{Name: "edge", Usage: "existing edge base URL (repeatable): no PoP is launched"},
			&cli.StringFlag{Name: "rate", Usage: "open loop instead: offered `RATES` per second, comma-separated; N% is N percent of the capacity measured first (e.g. 25%,50%,75%, the default of --open)"},
			&cli.BoolFlag{Name: "open", Usage: "open loop at --rate (default 25%,50%,75% of the measured capacity)"},
			&cli.StringFlag{Name: "paths", Usage: "open loop: comma-separated paths (generator, floor, hop, nutcracker, mcproxy, pop-gomemcache, pop-pipe, rls)", Value: "all"},
			&cli.IntFlag{Name: "max-senders", Usage: "open loop: the sending goroutines start at --conns and grow, one each time a request comes due with no other sender free, up to this many (as an edge serves each request on its own goroutine; on the gomemcache paths each holds a connection); default --conns: a fixed pool"},
			&cli.DurationFlag{Name: "slice", Usage: "open loop: each path runs this long before the next takes over (the paths rotate through each round's --duration)", Value: 100 * time.Millisecond},
			&cli.StringFlag{Name: "mcproxy", Usage: "open loop: mcproxy binary (default: go build ./cmd/mcproxy)"},
			&cli.StringFlag{Name: "capacity-path", Usage: "open loop: the path whose closed-loop capacity the N% rates are shares of (default pop-gomemcache: one round trip per store operation, like the floor and proxy paths; pop-pipe, rls, …)"},
			&cli.StringFlag{Name: "rls-bin", Usage: "open loop: rls binary of the rls path (default: go build ./cmd/rls)"},
			&cli.StringFlag{Name: "peer", Usage: "with --store redis: in the same run, interleaved, poplimit over the Redis Cluster, poplimit over memcached and envoyproxy/ratelimit's Redis backend (this `BINARY`, built from source) on the same cluster, all over HTTP, fixed window per second"},
		),
		Action: func(c *cli.Context) error {
			if c.IsSet("rate") || c.Bool("open") {
				return runOpenLoad(c)
			}
			if bin := c.String("peer"); bin != "" {
				res, err := runScenario(c, true, "load", func(env *bench.Env, prog func(int, int)) (bench.Result, error) {
					return bench.RunRedisCompare(c.Context, env, bench.LoadConfig{
						Duration: c.Duration("duration"), Conns: c.Int("conns"), Keys: c.Uint64("keys"), ZipfS: c.Float64("zipf"),
						Quantity: c.Int64("quantity"), Window: c.Duration("window"), Rounds: c.Int("rounds"),
						Workers: c.Int("workers"), Progress: prog,
					}, bin)
				})
				if err != nil {
					return err
				}
				return saveReport(c, "load-redis-peer", res, nil)
			}
			algs, err := algorithms(c.String("algorithm"))
			if err != nil {
				return err
			}
			res, err := runScenario(c, c.Bool("http"), "load", func(env *bench.Env, prog func(int, int)) (bench.Result, error) {
				return bench.RunLoad(c.Context, env, bench.LoadConfig{
					Duration: c.Duration("duration"), Conns: c.Int("conns"), Keys: c.Uint64("keys"), ZipfS: c.Float64("zipf"),
					Quantity: c.Int64("quantity"), Window: c.Duration("window"), Algorithms: algs, Rounds: c.Int("rounds"),
					HTTP: c.Bool("http"), Workers: c.Int("workers"), ProxyAddrs: c.StringSlice("proxy"),
					EdgeURLs: c.StringSlice("edge"), Progress: prog,
				})
			})
			if err != nil {
				return err
			}
			return saveReport(c, "load", res, nil)
		},
	}
}
