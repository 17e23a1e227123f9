package main

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/poplimit/poplimit/bench/openloop"

	"github.com/urfave/cli/v2"
)

const openLoadDescription = `Without --rate: closed loop (--conns clients, each sending its next request
when the previous is answered) through a launched or existing PoP.

With --rate (or --open): open loop. It starts 3 memcached shards, nutcracker
and mcproxy over them (the same YAML), measures the capacity of the full
decision over gomemcache through mcproxy (one round trip per store
operation, like the floor's and the proxies' paths; closed loop, --conns;
--capacity-path picks another path), then at
each rate runs every path for --duration (default 2s) per round, --rounds
rounds (default 5), in slices of --slice (100ms): the paths take turns slice
by slice, so machine noise falls on all of them alike. Requests have fixed
intended send times (rate R: one every 1/R s), each sent by whichever sending
goroutine is free first (a slow request delays no other): a run starts --conns
of them and, with --max-senders above --conns, starts one more whenever one is
about to send with no other free to wait for the next request (an edge serves
every request on its own goroutine: a request then waits for no generator while
the path is slow; each sender in a request holds a gomemcache connection);
latency is measured from the intended time (no coordinated omission; "queued"
counts requests that found every goroutine busy), service time from the
actual start, and the generator's lateness (wake-up after the intended time)
is reported. Beside each path's p99 pooled over the rounds, the report gives
the median over rounds of its p99 and of its ratio to the floor's p99 in the
same round. Paths: generator (no request: the generator's own CPU),
floor (gomemcache incr to one memcached), hop (the same incr through a bare
TCP forwarder in a process of its own, bench/fixture/tcphop: what one more
process on the path costs by itself, the bound under any proxy), nutcracker,
mcproxy (the same incr through each), pop-gomemcache and pop-pipe (a full pop decision through
mcproxy over each client), rls (a full decision through one cmd/rls over
mcproxy: gRPC ShouldRateLimit, one descriptor).

  popbench load --rate 25%,50%,75%
  popbench load --rate 2000,5000 --paths floor,mcproxy,pop-pipe`

// runOpenLoad is "popbench load --rate".
func runOpenLoad(c *cli.Context) error {
	cfg := openloop.OpenLoopConfig{Workers: c.Int("conns"), MaxWorkers: c.Int("max-senders"), Keys: c.Uint64("keys"), ZipfS: c.Float64("zipf"),
		McproxyBin: c.String("mcproxy"), RLSBin: c.String("rls-bin"),
		CapacityPath: c.String("capacity-path"), Progress: logOut(c)}
	if c.IsSet("duration") {
		cfg.Duration = c.Duration("duration")
	}
	if c.IsSet("slice") {
		cfg.Slice = c.Duration("slice")
	}
	if c.IsSet("rounds") {
		cfg.Rounds = c.Int("rounds")
	}
	if c.IsSet("quantity") {
		cfg.Quantity = c.Int64("quantity")
	}
	var err error
	if cfg.Rates, cfg.Fractions, err = parseRates(c.String("rate")); err != nil {
		return err
	}
	if p := c.String("paths"); p != "all" && p != "" {
		cfg.Paths = strings.Split(p, ",")
	}
	rep, err := openloop.RunOpenLoop(c.Context, cfg)
	if err != nil {
		return err
	}
	if err := output(c, rep, rep.Tables()); err != nil {
		return err
	}
	return saveReport(c, "load-open", rep, nil)
}

// parseRates parses --rate: absolute rates per second, or percentages of
// the measured capacity (N%); one kind only. "" means the default
// fractions.
func parseRates(s string) (rates, fractions []float64, err error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil, nil
	}
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		pct := strings.HasSuffix(f, "%")
		v, perr := strconv.ParseFloat(strings.TrimSuffix(f, "%"), 64)
		if perr != nil || v <= 0 {
			return nil, nil, fmt.Errorf("--rate %q: %q is not a positive rate or percentage", s, f)
		}
		if pct {
			fractions = append(fractions, v/100)
		} else {
			rates = append(rates, v)
		}
	}
	if len(rates) > 0 && len(fractions) > 0 {
		return nil, nil, fmt.Errorf("--rate %q: rates and percentages cannot be mixed", s)
	}
	return rates, fractions, nil
}
