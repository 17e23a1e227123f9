package main

import (
	"os"
	"runtime/pprof"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/poplimit/poplimit/bench"
	"github.com/poplimit/poplimit/bench/rlsbench"
)

// rlsCommand is "popbench rls": gRPC load on anything that speaks
// envoy.service.ratelimit.v3, a launched PoP of rls processes, the peer
// (envoyproxy/ratelimit) beside it, and the conformance replay.
func rlsCommand() *cli.Command {
	return &cli.Command{
		Name:  "rls",
		Usage: "drive Envoy rate limit services (rls, envoyproxy/ratelimit) over gRPC, or replay the conformance suites",
		Description: `Load: --clients closed-loop callers for --duration, each request carrying --descriptors
descriptors {user: V}, V Zipf-distributed over --keys values; reports requests/s, decisions/s
(descriptors answered per second), p50/p99/p999, overall codes and errors.

  popbench rls --target 127.0.0.1:7491 --duration 10s
  popbench rls --rls 4 --duration 10s                      # launch 3 memcached + mcproxy + 4 rls
  popbench rls --rls 4 --peer /tmp/peer/ratelimit-bin --rounds 3

--peer BIN also starts envoyproxy/ratelimit (memcache backend: MEMCACHE_HOST_PORT = the same 3
memcached) with the same config, and runs rls, peer, rls, ... for --rounds rounds (same run).
--store redis puts both on one Redis Cluster (3 masters + 3 replicas) instead: rls --store
redis://…, the peer with REDIS_TYPE=cluster (bench.PeerRedisEnv):

  popbench rls --store redis --rls 4 --peer /tmp/peer/ratelimit-bin --rounds 3

Conformance: replay the suites of FILE against --target (the server must have loaded their
config with the same --run token and the suites' settings):

  popbench rls --conformance pop/rls/testdata/conformance.yaml --write-config DIR --run abc
  popbench rls --conformance pop/rls/testdata/conformance.yaml --target ADDR --run abc

Differential: --seeds randomized replays (configs in envoyproxy/ratelimit's YAML and request
scripts of --requests requests, from seeds --first-seed, --first-seed+1, ...) in lockstep against
one rls per --store (memcached: over mcproxy; redis: a Redis Cluster; both, the default here) and
--peer over a Redis Cluster. Each answer pair is compared (codes, limit_remaining, current_limit,
duration_until_reset within 1 s); a difference is deliberate (bench/differential's deliberates,
with reasons), skipped (a window boundary between the two answers) or unexpected: every unexpected
one is printed with its seed, step, request and both answers, and the command fails.

  popbench rls --differential --seeds 20 --requests 2000 --peer /tmp/peer/ratelimit-bin`,
		Flags: []cli.Flag{
			&cli.StringSliceFlag{Name: "target", Usage: "gRPC `ADDR` to drive (repeatable: clients spread over them)"},
			&cli.IntFlag{Name: "rls", Value: 4, Usage: "rls processes of the launched PoP (without --target)"},
			&cli.StringFlag{Name: "rls-bin", Usage: "rls binary (default: go build ./cmd/rls)"},
			&cli.StringSliceFlag{Name: "rls-arg", Usage: "extra rls flag (repeatable)"},
			&cli.StringFlag{Name: "store", Value: "memcached", Usage: "the launched PoP's store (--differential: also both, its default): memcached (3 shards + mcproxy) or redis (a Redis Cluster of 3 masters + 3 replicas: rls --store redis://…, and --peer with its Redis backend, REDIS_TYPE=cluster, on the same cluster)"},
			&cli.StringFlag{Name: "peer", Usage: "envoyproxy/ratelimit `BIN` to measure beside rls (memcache backend over the same memcached)"},
			&cli.IntFlag{Name: "rounds", Value: 2, Usage: "interleaved rounds with --peer"},
			&cli.IntFlag{Name: "limit", Value: 1000000, Usage: "requests_per_unit (per minute) of the launched config's descriptor"},
			&cli.IntFlag{Name: "clients", Value: 64, Usage: "concurrent callers"},
			&cli.IntFlag{Name: "conns", Value: 4, Usage: "gRPC connections per target"},
			&cli.DurationFlag{Name: "duration", Value: 10 * time.Second, Usage: "timed phase per run (keep ≤ 30s)"},
			&cli.IntFlag{Name: "descriptors", Value: 3, Usage: "descriptors per request"},
			&cli.Uint64Flag{Name: "keys", Value: 10000, Usage: "distinct descriptor values"},
			&cli.Float64Flag{Name: "zipf", Value: 1.1, Usage: "Zipf exponent of the values"},
			&cli.StringFlag{Name: "conformance", Usage: "replay the suites of `FILE` (with --target, or write their config with --write-config)"},
			&cli.StringFlag{Name: "write-config", Usage: "write the selected suites' config files into `DIR` and print their settings"},
			&cli.StringFlag{Name: "run", Usage: "the ${RUN} token (default: fresh; give the one --write-config used)"},
			&cli.StringSliceFlag{Name: "suite", Usage: "only these suites (repeatable)"},
			&cli.BoolFlag{Name: "peer-suites", Usage: "skip the rls_only suites (rls's deliberate differences and extensions)"},
			&cli.BoolFlag{Name: "differential", Usage: "replay randomized scripts against rls and --peer in lockstep and compare every answer"},
			&cli.IntFlag{Name: "seeds", Value: 20, Usage: "--differential: replays (seeds --first-seed and on)"},
			&cli.Uint64Flag{Name: "first-seed", Value: 1, Usage: "--differential: the first seed"},
			&cli.IntFlag{Name: "requests", Value: 2000, Usage: "--differential: requests per replay"},
			&cli.StringFlag{Name: "dir", Usage: "keep configs and logs in `DIR` (default: a removed temp dir)"},
			&cli.BoolFlag{Name: "json", Usage: "print JSON instead of a table"},
			&cli.StringFlag{Name: "cpuprofile", Usage: "write the load generator's own CPU profile to `FILE`"},
		},
		Action: func(c *cli.Context) error {
			if f := c.String("cpuprofile"); f != "" {
				stop, err := startCPUProfile(f)
				if err != nil {
					return err
				}
				defer stop()
			}
			if c.String("conformance") != "" {
				return rlsConformance(c)
			}
			if c.Bool("differential") {
				return rlsDifferential(c)
			}
			return rlsLoad(c)
		},
	}
}

func rlsConformance(c *cli.Context) error {
	var target string // Conformance fails without exactly one, unless writing the config
	if t := c.StringSlice("target"); len(t) == 1 {
		target = t[0]
	}
	return rlsbench.Conformance(c.Context, rlsbench.ConformanceConfig{
		File: c.String("conformance"), Suites: c.StringSlice("suite"), PeerSuites: c.Bool("peer-suites"),
		Run: c.String("run"), WriteConfig: c.String("write-config"), Target: target,
	}, c.App.Writer)
}

// rlsLoad runs the load on --target, or on a launched PoP (and the peer).
func rlsLoad(c *cli.Context) error {
	rs, err := rlsbench.Run(c.Context, rlsbench.Config{
		Targets: c.StringSlice("target"), Clients: c.Int("clients"), Conns: c.Int("conns"),
		Duration: c.Duration("duration"), Descriptors: c.Int("descriptors"), Keys: c.Uint64("keys"), ZipfS: c.Float64("zipf"),
		Dir: c.String("dir"), RLS: c.Int("rls"), RLSBin: c.String("rls-bin"), RLSArgs: c.StringSlice("rls-arg"),
		Store: bench.StoreKind(c.String("store")), Peer: c.String("peer"), Rounds: c.Int("rounds"), Limit: c.Int("limit"),
	})
	if err != nil {
		return err
	}
	return output(c, rs, rs.Tables())
}

// startCPUProfile profiles this process into file until stop.
func startCPUProfile(file string) (stop func(), err error) {
	f, err := os.Create(file)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}
