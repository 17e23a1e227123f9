// Package globalflags is the command-line side of scope: global limits
// (package pop/global), shared by edge and rls: the flags and the wiring
// of their values into pop.Config's NewGlobal and HealthReasons.
package globalflags

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/urfave/cli/v2"

	"github.com/poplimit/poplimit/counter"
	"github.com/poplimit/poplimit/counter/store"
	"github.com/poplimit/poplimit/pop/global"
	"github.com/poplimit/poplimit/pop/policy"
)

// Flags are --global-memcached, --pops, --global-overdraft,
// --global-horizon and --global-wait.
func Flags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "global-memcached", Usage: "home region's memcached or mcproxy `ADDR` holding the global counts of scope: global limits (pipelined client: one round trip per claim); empty: configurations with global limits are rejected"},
		&cli.IntFlag{Name: "pops", Value: 1, Usage: "number of PoPs sharing the global limits: with the home store unreachable, fail_mode local credits limit ÷ this per window"},
		&cli.Int64Flag{Name: "global-overdraft", Value: 0, Usage: "units per global key and window this PoP admits at once, without waiting, while its pool is empty (each adds to the over-admission bound); 0 = wait for the claim (--global-wait)"},
		&cli.DurationFlag{Name: "global-wait", Value: 300 * time.Millisecond, Usage: "how long a request that finds its PoP's pool of a global key empty waits for the claim on the home store: this (one home round trip with margin), or two recent claim latencies when claims take longer, at most a claim's 1s timeout (the store deadline may end it sooner); then the policy's fail mode decides"},
		&cli.DurationFlag{Name: "global-horizon", Value: 250 * time.Millisecond, Usage: "how much of the PoP's arrival rate one batch claimed from the home store covers (at least 1.5 refill latencies); a PoP holds about rate × (this + 1.5 refill latencies) tokens, which it strands when its traffic moves away late in a window"},
	}
}

// Wire builds, from the flags of c, the allower constructor of scope:
// global limits over this PoP's store local (the policy's fail mode picks
// the fallback: local → the PoP's share, open, closed), the home store's
// health reasons, and registers their metrics in reg. Without
// --global-memcached both are nil. workers is the PoP's worker count.
func Wire(c *cli.Context, local counter.Store, workers int, reg prometheus.Registerer) (func(counter.Limit, policy.FailMode) (counter.Allower, error), func() []string, error) {
	addr := c.String("global-memcached")
	if addr == "" {
		return nil, nil, nil
	}
	cfg := global.Config{Local: local, PoPs: c.Int("pops"), Workers: workers, Overdraft: c.Int64("global-overdraft"), Horizon: c.Duration("global-horizon"), Wait: c.Duration("global-wait")}
	if cfg.PoPs < 1 || cfg.Overdraft < 0 || cfg.Wait <= 0 {
		return nil, nil, fmt.Errorf("--pops %d, --global-overdraft %d, --global-wait %v: want at least 1, 0 or more, and positive", cfg.PoPs, cfg.Overdraft, cfg.Wait)
	}
	// The pipelined client: a claim (add-if-absent + incr) is one round
	// trip across regions.
	home, err := store.New(store.Config{Memcached: []string{addr}, Multiplex: -1, Timeout: time.Second})
	if err != nil {
		return nil, nil, fmt.Errorf("--global-memcached: %w", err)
	}
	cfg.Home = home.Store()
	if cfg.Metrics, err = global.NewMetrics(reg); err != nil {
		return nil, nil, err
	}
	h, err := global.NewHome(cfg)
	if err != nil {
		return nil, nil, err
	}
	fallback := map[policy.FailMode]global.Fallback{policy.FailLocal: global.FallbackShare, policy.FailOpen: global.FallbackOpen, policy.FailClosed: global.FallbackClosed}
	return func(l counter.Limit, fm policy.FailMode) (counter.Allower, error) { return h.New(l, fallback[fm]) }, h.HealthReasons, nil
}
