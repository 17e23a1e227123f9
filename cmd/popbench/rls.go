package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/urfave/cli/v2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/poplimit/poplimit/bench"
	"github.com/poplimit/poplimit/bench/fixture/procs"
	"github.com/poplimit/poplimit/pop/rls/conformance"
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
duration_until_reset within 1 s); a difference is deliberate (bench/differential's Deliberates,
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

// selectedSuites are the suites of --conformance that --suite and
// --peer-suites select.
func selectedSuites(c *cli.Context) ([]conformance.Suite, error) {
	all, err := conformance.LoadFile(c.String("conformance"))
	if err != nil {
		return nil, err
	}
	only := c.StringSlice("suite")
	var out []conformance.Suite
	for _, s := range all {
		if (len(only) > 0 && !slices.Contains(only, s.Name)) || (c.Bool("peer-suites") && s.RLSOnly) {
			continue
		}
		out = append(out, s)
	}
	if len(out) == 0 {
		return nil, errors.New("no suite selected")
	}
	return out, nil
}

func rlsConformance(c *cli.Context) error {
	suites, err := selectedSuites(c)
	if err != nil {
		return err
	}
	run := c.String("run")
	if run == "" {
		run = conformance.NewRun()
	}
	w := c.App.Writer
	if dir := c.String("write-config"); dir != "" {
		for _, s := range suites {
			if err := s.WriteConfig(dir, run); err != nil {
				return err
			}
			fmt.Fprintf(w, "suite %s: %s\n", s.Name, strings.Join(s.Settings.Env(), " "))
		}
		fmt.Fprintf(w, "run token %s; config in %s\n", run, dir)
		return nil
	}
	targets := c.StringSlice("target")
	if len(targets) != 1 {
		return errors.New("--conformance needs one --target (or --write-config)")
	}
	cc, err := grpc.NewClient(targets[0], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer cc.Close()
	client := rlv3.NewRateLimitServiceClient(cc)
	failed := 0
	for _, s := range suites {
		ctx, cancel := context.WithTimeout(c.Context, 2*time.Minute)
		bad, err := conformance.Replay(ctx, client, s, run, time.Now, true)
		cancel()
		if err != nil {
			return fmt.Errorf("suite %s: %w", s.Name, err)
		}
		steps := 0
		for _, st := range s.Steps {
			steps += max(st.Repeat, 1)
		}
		fmt.Fprintf(w, "%-32s %3d answers, %d mismatches\n", s.Name, steps, len(bad))
		for _, m := range bad {
			fmt.Fprintln(w, "  ", m)
		}
		failed += len(bad)
	}
	if failed > 0 {
		return fmt.Errorf("%d answers differ from the suites", failed)
	}
	return nil
}

// rlsLoad runs the load on --target, or on a launched PoP (and the peer).
func rlsLoad(c *cli.Context) error {
	cfg := bench.RLSLoadConfig{Clients: c.Int("clients"), Conns: c.Int("conns"), Duration: c.Duration("duration"),
		Descriptors: c.Int("descriptors"), Keys: c.Uint64("keys"), ZipfS: c.Float64("zipf")}
	var results []*bench.RLSResult
	if t := c.StringSlice("target"); len(t) > 0 {
		cfg.Targets = t
		r, err := bench.RunRLSLoad(c.Context, cfg)
		if err != nil {
			return err
		}
		results = append(results, r)
		return printRLS(c, results)
	}
	dir := c.String("dir")
	if dir == "" {
		d, err := os.MkdirTemp("", "popbench-rls-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(d)
		dir = d
	}
	launched, peer, err := launchRLS(c, dir)
	if launched != nil {
		defer launched.Close()
	}
	if peer != nil {
		defer peer.Kill()
	}
	if err != nil {
		return err
	}
	rounds := 1
	if peer != nil {
		rounds = max(c.Int("rounds"), 1)
	}
	for range rounds {
		cfg.Targets, cfg.Pids = launched.GRPCAddrs(), launched.PidGroups()
		r, err := bench.RunRLSLoad(c.Context, cfg)
		if err != nil {
			return err
		}
		over, peerStore := "mcproxy", "memcache"
		if launched.Redis != nil {
			over, peerStore = "Redis Cluster", "Redis Cluster"
		}
		r.Target = fmt.Sprintf("rls ×%d over %s", len(launched.RLS), over)
		results = append(results, r)
		if peer == nil {
			continue
		}
		stores := launched.PidGroups() // the peer is charged with the same store processes
		cfg.Targets, cfg.Pids = []string{peer.Addr}, map[string][]int{"memcached": stores["memcached"], "redis": stores["redis"], "ratelimit": {peer.Pid()}}
		if r, err = bench.RunRLSLoad(c.Context, cfg); err != nil {
			return err
		}
		r.Target = "envoyproxy/ratelimit (" + peerStore + ")"
		results = append(results, r)
	}
	return printRLS(c, results)
}

// launchRLS starts 3 memcached + mcproxy (--store redis: a Redis Cluster
// of 3 masters + 3 replicas) + --rls rls processes with the bench config,
// and with --peer envoyproxy/ratelimit over the same memcached (or
// cluster).
func launchRLS(c *cli.Context, dir string) (*bench.RLSPoP, *procs.Proc, error) {
	kind := bench.StoreKind(c.String("store"))
	if kind != bench.StoreMemcached && kind != bench.StoreRedis {
		return nil, nil, fmt.Errorf("--store %q: want memcached or redis", kind)
	}
	bin := c.String("rls-bin")
	if bin == "" {
		bins, err := procs.Build(c.Context, dir, "rls", "mcproxy")
		if err != nil {
			return nil, nil, err
		}
		bin = bins["rls"]
	}
	mcproxy := filepath.Join(filepath.Dir(bin), "mcproxy")
	if _, err := os.Stat(mcproxy); err != nil {
		bins, err := procs.Build(c.Context, dir, "mcproxy")
		if err != nil {
			return nil, nil, err
		}
		mcproxy = bins["mcproxy"]
	}
	// envoyproxy/ratelimit's layout: RUNTIME_ROOT/ratelimit/config.
	confDir := filepath.Join(dir, "runtime", "ratelimit", "config")
	if err := bench.WriteRLSConfig(confDir, "bench.yaml", bench.RLSBenchConfig(c.Int("limit"))); err != nil {
		return nil, nil, err
	}
	p, err := bench.LaunchRLSPoP(c.Context, bench.RLSPoPConfig{
		PoP: bench.PoPConfig{Name: "rls", Dir: dir, Store: kind, Bins: bench.Binaries{MCProxy: mcproxy}},
		RLS: c.Int("rls"), Bin: bin, ConfigDir: confDir, Args: c.StringSlice("rls-arg"),
	})
	if err != nil || c.String("peer") == "" {
		return p, nil, err
	}
	if p.Redis != nil {
		peer, err := bench.StartPeerRLS(c.Context, c.String("peer"), filepath.Join(dir, "runtime"), filepath.Join(dir, "peer.log"),
			bench.PeerRedisEnv(p.Redis.Addrs())...)
		return p, peer, err
	}
	var shards []string
	for _, s := range p.Shards {
		shards = append(shards, s.Addr)
	}
	peer, err := bench.StartPeerRLS(c.Context, c.String("peer"), filepath.Join(dir, "runtime"), filepath.Join(dir, "peer.log"),
		"BACKEND_TYPE=memcache", "MEMCACHE_HOST_PORT="+strings.Join(shards, ","))
	return p, peer, err
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

func printRLS(c *cli.Context, rs []*bench.RLSResult) error {
	w := c.App.Writer
	if c.Bool("json") {
		e := json.NewEncoder(w)
		e.SetIndent("", "  ")
		return e.Encode(rs)
	}
	printRLSTable(w, rs)
	return nil
}

func printRLSTable(w io.Writer, rs []*bench.RLSResult) {
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "target\tserver processes\trequests/s\tdecisions/s\tp50 ms\tp99 ms\tp999 ms\tserver µs/dec\tclient µs/dec\terrors\tcodes")
	for _, r := range rs {
		fmt.Fprintf(tw, "%s\t%s\t%.0f\t%.0f\t%.2f\t%.2f\t%.2f\t%.1f\t%.1f\t%d\t%v\n", r.Target, r.ProcessList(), r.PerSec, r.DecisionsPerSec,
			r.Latency.P50, r.Latency.P99, r.Latency.P999, r.ServerCPU.CPUUS(), r.Generator.CPUUS(), r.Errors, r.Codes)
	}
	tw.Flush()
	// With --peer the rounds alternate rls, peer: their ratios, round by
	// round (the same machine's load at nearly the same time).
	for i := 0; i+1 < len(rs); i += 2 {
		a, b := rs[i], rs[i+1]
		if !strings.HasPrefix(b.Target, "envoyproxy/ratelimit") || b.DecisionsPerSec == 0 || a.Latency.P99 == 0 {
			return
		}
		fmt.Fprintf(w, "round %d: %s / %s: %.2f× the decisions/s, p99 %.2f× (%.1f against %.1f ms)\n", i/2+1, a.Target, b.Target,
			a.DecisionsPerSec/b.DecisionsPerSec, a.Latency.P99/b.Latency.P99, a.Latency.P99, b.Latency.P99)
	}
}
