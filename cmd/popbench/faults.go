package main

import (
	"fmt"
	"os"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/poplimit/poplimit/bench"
)

func faultsCommand() *cli.Command {
	return &cli.Command{
		Name:  "faults",
		Usage: "scripted faults under load (shard killed, hung, slowed; mcproxy restarted; reload): errors, fail-mode decisions, time to recover",
		Flags: commonFlags(
			&cli.StringFlag{Name: "scenarios", Usage: "comma-separated: shard-kill, shard-hang, shard-slow, proxy-restart, reload", Value: "shard-kill,shard-hang,shard-slow,reload,proxy-restart"},
			&cli.DurationFlag{Name: "fault", Usage: "how long each fault lasts", Value: 2 * time.Second},
			&cli.DurationFlag{Name: "settle", Usage: "observation after each repair (≥ 1s)", Value: 4 * time.Second},
			&cli.DurationFlag{Name: "slow-delay", Usage: "one-way delay of the slowed shard", Value: 300 * time.Millisecond},
			inprocessFlag(),
			seedFlag(),
		),
		Action: func(c *cli.Context) error {
			rep, err := runScenario(c, !c.Bool("inprocess"), "faults", func(env *bench.Env, prog func(int, int)) (*bench.FaultsReport, error) {
				return bench.RunFaults(c.Context, env, bench.FaultsConfig{
					Scenarios: list(c.String("scenarios")), Fault: c.Duration("fault"), Settle: c.Duration("settle"),
					SlowDelay: c.Duration("slow-delay"), InProcess: c.Bool("inprocess"), OutDir: c.String("out"), ChartFormat: c.String("chart-format"),
					Seed: c.Uint64("seed"), Progress: prog,
				})
			})
			if err != nil {
				return err
			}
			if !c.Bool("json") && rep.Report != "" {
				fmt.Fprintf(os.Stdout, "\nreport: %s\n", rep.Report)
			}
			return nil
		},
	}
}
