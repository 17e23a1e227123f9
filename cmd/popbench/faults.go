package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/poplimit/poplimit/bench/faults"

	"github.com/urfave/cli/v2"

	"github.com/poplimit/poplimit/bench"
)

func faultsCommand() *cli.Command {
	return &cli.Command{
		Name:  "faults",
		Usage: "scripted faults under load (shard killed, hung, slowed, its connections reset; mcproxy restarted; reload; burst: bursts at one key and a flood of keys on a healthy store): errors, fail-mode decisions, time to recover",
		Flags: commonFlags(
			&cli.StringFlag{Name: "scenarios", Usage: "comma-separated: shard-kill, shard-hang, shard-slow, conn-reset, shard-add-remove (a fourth shard added to mcproxy's pool file and removed, by SIGHUP), proxy-restart, reload, burst (its own PoP: 4 edges on default flags, 1,000 requests at one key limited to 100/minute per algorithm, fail mode and --burst-conns, then the flood)", Value: strings.Join(faults.FaultScenarios, ",")},
			&cli.IntFlag{Name: "burst-rounds", Usage: "burst: rounds of each burst", Value: 5},
			&cli.StringFlag{Name: "burst-conns", Usage: "burst: comma-separated client connection counts", Value: "256,32"},
			&cli.IntFlag{Name: "flood-rate", Usage: "burst: distinct API keys per second in the flood", Value: 2000},
			&cli.DurationFlag{Name: "flood-for", Usage: "burst: length of the flood (negative: none)", Value: 10 * time.Second},
			&cli.DurationFlag{Name: "fault", Usage: "how long each fault lasts", Value: 2 * time.Second},
			&cli.DurationFlag{Name: "settle", Usage: "observation after each repair (≥ 1s)", Value: 4 * time.Second},
			&cli.DurationFlag{Name: "slow-delay", Usage: "one-way delay of the slowed shard", Value: 300 * time.Millisecond},
			inprocessFlag(),
			seedFlag(),
		),
		Action: func(c *cli.Context) error {
			conns, err := intList(c.String("burst-conns"))
			if err != nil {
				return fmt.Errorf("--burst-conns: %w", err)
			}
			burst := bench.BurstConfig{Rounds: c.Int("burst-rounds"), Conns: conns, FloodRate: c.Int("flood-rate"), FloodFor: c.Duration("flood-for")}
			rep, err := runScenario(c, !c.Bool("inprocess"), "faults", func(env *bench.Env, prog func(int, int)) (bench.Result, error) {
				return faults.RunFaults(c.Context, env, faults.FaultsConfig{
					Scenarios: list(c.String("scenarios")), Fault: c.Duration("fault"), Settle: c.Duration("settle"),
					SlowDelay: c.Duration("slow-delay"), InProcess: c.Bool("inprocess"), OutDir: c.String("out"), ChartFormat: c.String("chart-format"),
					Seed: c.Uint64("seed"), Progress: prog, Burst: burst,
				})
			})
			if err != nil {
				return err
			}
			if path := rep.(interface{ ReportFile() string }).ReportFile(); !c.Bool("json") && path != "" {
				fmt.Fprintf(c.App.Writer, "\nreport: %s\n", path)
			}
			return nil
		},
	}
}
