package main

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/poplimit/poplimit/bench/proxycmp"

	"github.com/urfave/cli/v2"
)

// proxyCommand is "popbench proxy": load on one memcached-protocol address,
// or --compare: memcached direct vs nutcracker vs mcproxy, interleaved.
func proxyCommand() *cli.Command {
	return &cli.Command{
		Name:  "proxy",
		Usage: "drive a memcached-protocol address, or compare memcached, nutcracker and mcproxy",
		Description: `Closed-loop load (one request in flight per connection) for a set duration;
reports ops/s, p50/p99/p999 latency (HDR histogram) and errors.
Mixes: incr (incr, add on NOT_FOUND), get, set (16-byte values), getset (90% get /
10% set), mget (4-key gets).

  popbench proxy --addr 127.0.0.1:7411 --mix incr --conns 64 --duration 10s
  popbench proxy --compare --mix incr,getset,mget --conns 64 --duration 5s --rounds 2

--compare starts 3 memcached shards, Debian's nutcracker (ketama, the --hash)
and mcproxy (built from ./cmd/mcproxy unless --mcproxy) with the same YAML,
and runs memcached (one shard, direct), nutcracker, mcproxy, ... for --rounds
rounds per mix. --conns-list runs every mix at each connection count;
--syscalls also counts each system's system calls and context switches per
request (perf stat attached to its pid over each timed phase). The table then
ends with nutcracker's and mcproxy's CPU and system calls per request:

  popbench proxy --compare --mix incr,get,set,getset --conns-list 1,64,512 --syscalls --rounds 3

  popbench proxy --idle-conns 10000

--idle-conns N starts the same 3 shards, nutcracker and mcproxy, and holds N
client connections (one get each, then idle for 12 s) to mcproxy, then to
nutcracker: the VmRSS delta over the proxy's baseline before they opened / N,
mcproxy's go_goroutines delta / N, the proxy's open descriptors at the
measurement minus before (the connections really held), then a get on a
sample of them. It raises its RLIMIT_NOFILE soft limit to the hard limit.`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "addr", Usage: "memcached-protocol `HOST:PORT` to drive (without --compare)"},
			&cli.StringFlag{Name: "mix", Value: "incr", Usage: "comma-separated mixes: incr, get, set, getset, mget"},
			&cli.IntFlag{Name: "conns", Value: 64, Usage: "closed-loop connections"},
			&cli.IntSliceFlag{Name: "conns-list", Usage: "--compare: run every mix at each of these connection counts (e.g. 1,64,512) instead of --conns"},
			&cli.BoolFlag{Name: "syscalls", Usage: "--compare: count each system's system calls and context switches per request (perf stat)"},
			&cli.DurationFlag{Name: "duration", Usage: "timed phase per run", DefaultText: "10s, 5s with --compare"},
			&cli.IntFlag{Name: "keys", Value: 10000, Usage: "key space size"},
			&cli.Uint64Flag{Name: "seed", Value: 1, Usage: "seed of key and operation choices"},
			&cli.BoolFlag{Name: "no-preload", Usage: "do not set every key before getset/mget runs"},
			&cli.BoolFlag{Name: "compare", Usage: "compare memcached direct, nutcracker and mcproxy"},
			&cli.IntFlag{Name: "rounds", Value: 2, Usage: "interleaved rounds per mix (--compare)"},
			&cli.StringFlag{Name: "hash", Value: "fnv1a_64", Usage: "ketama hash of the pool (--compare)"},
			&cli.StringFlag{Name: "mcproxy", Usage: "mcproxy binary (--compare; default: go build ./cmd/mcproxy)"},
			&cli.BoolFlag{Name: "mcproxy-flags", Usage: "start mcproxy with --listen/--shard instead of --config with nutcracker's YAML"},
			&cli.StringSliceFlag{Name: "mcproxy-arg", Usage: "extra mcproxy argument (repeatable)"},
			&cli.BoolFlag{Name: "skip-mcproxy", Usage: "compare memcached and nutcracker only"},
			&cli.BoolFlag{Name: "require-mcproxy", Usage: "fail when mcproxy cannot be built or started"},
			&cli.StringFlag{Name: "dir", Usage: "keep configs and logs in `DIR` (default: a removed temp dir)"},
			&cli.BoolFlag{Name: "json", Usage: "print JSON instead of a table"},
			&cli.IntFlag{Name: "idle-conns", Usage: "hold `N` idle connections to mcproxy, then to nutcracker (3 memcached), and report RSS and goroutines per connection"},
		},
		Action: runProxyCommand,
	}
}

func runProxyCommand(c *cli.Context) error {
	mixes := strings.Split(c.String("mix"), ",")
	out := c.App.Writer
	if n := c.Int("idle-conns"); n > 0 {
		return runIdleConns(c, n, out)
	}
	if c.Bool("compare") {
		if c.IsSet("addr") {
			return errors.New("popbench proxy: --addr and --compare are exclusive")
		}
		var progress io.Writer = c.App.ErrWriter
		rep, err := proxycmp.RunProxyCompare(c.Context, proxycmp.ProxyCompareConfig{
			Mixes: mixes, Conns: c.Int("conns"), ConnsList: c.IntSlice("conns-list"), Syscalls: c.Bool("syscalls"),
			Duration: c.Duration("duration"),
			Rounds:   c.Int("rounds"), Keys: c.Int("keys"), Hash: c.String("hash"),
			McproxyBin: c.String("mcproxy"), McproxyFlags: c.Bool("mcproxy-flags"),
			McproxyArgs: c.StringSlice("mcproxy-arg"), SkipMcproxy: c.Bool("skip-mcproxy"),
			RequireMcproxy: c.Bool("require-mcproxy"), Dir: c.String("dir"), Progress: progress,
		})
		if err != nil {
			return err
		}
		if c.Bool("json") {
			return writeJSON(out, rep)
		}
		return rep.WriteTable(out)
	}
	if c.String("addr") == "" {
		return errors.New("popbench proxy: --addr HOST:PORT or --compare is required")
	}
	var results []*proxycmp.ProxyLoadResult
	for _, mix := range mixes {
		res, err := proxycmp.RunProxyLoad(c.Context, proxycmp.ProxyLoadConfig{
			Addr: c.String("addr"), Mix: mix, Conns: c.Int("conns"), Duration: c.Duration("duration"),
			Keys: c.Int("keys"), Seed: c.Uint64("seed"), NoPreload: c.Bool("no-preload"),
		})
		if err != nil {
			return err
		}
		results = append(results, res)
	}
	if c.Bool("json") {
		return writeJSON(out, results)
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "addr\tmix\tconns\tseconds\tops/s\tp50 ms\tp99 ms\tp999 ms\terrors\thits\tmisses\t")
	for _, r := range results {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%.2f\t%.0f\t%.3f\t%.3f\t%.3f\t%d\t%d\t%d\t\n", r.Addr, r.Mix, r.Conns, r.Seconds,
			r.OpsPerSec, r.Latency.P50, r.Latency.P99, r.Latency.P999, r.Errors, r.Hits, r.Misses)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, r := range results {
		if r.FirstError != "" {
			fmt.Fprintf(out, "%s: first error: %s\n", r.Mix, r.FirstError)
		}
	}
	return nil
}

// runIdleConns is "popbench proxy --idle-conns N".
func runIdleConns(c *cli.Context, n int, out io.Writer) error {
	var progress io.Writer = c.App.ErrWriter
	rep, err := proxycmp.RunIdleConns(c.Context, proxycmp.IdleConnsConfig{
		Conns: n, McproxyBin: c.String("mcproxy"), McproxyArgs: c.StringSlice("mcproxy-arg"),
		Dir: c.String("dir"), Progress: progress,
	})
	if err != nil {
		return err
	}
	if c.Bool("json") {
		return writeJSON(out, rep)
	}
	return rep.WriteTable(out)
}
