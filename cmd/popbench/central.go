package main

import (
	"time"

	"github.com/urfave/cli/v2"

	"github.com/poplimit/poplimit/bench"
)

func centralCommand() *cli.Command {
	return &cli.Command{
		Name:  "central",
		Usage: "the latency paradox: the same workload with a per-PoP store and with a central store behind an injected round trip",
		Flags: commonFlags(
			&cli.DurationFlag{Name: "rtt", Usage: "injected round trip to the central store", Value: 80 * time.Millisecond},
			&cli.DurationFlag{Name: "duration", Usage: "length of each run", Value: 5 * time.Second},
			&cli.IntFlag{Name: "rounds", Usage: "interleaved rounds (per-PoP, central, …)", Value: 2},
			&cli.IntFlag{Name: "users", Usage: "legitimate users of the Poisson workload (Zipf rates under a 50/s limit each)", Value: 20},
			&cli.IntFlag{Name: "workers", Usage: "workers per PoP", Value: 4},
			inprocessFlag(),
			seedFlag(),
		),
		Action: func(c *cli.Context) error {
			rep, err := runScenario(c, !c.Bool("inprocess"), "central", func(env *bench.Env, prog func(int, int)) (bench.Result, error) {
				return bench.RunCentral(c.Context, env, bench.CentralConfig{
					RTT: c.Duration("rtt"), Duration: c.Duration("duration"), Rounds: c.Int("rounds"), Users: c.Int("users"),
					Workers: c.Int("workers"), InProcess: c.Bool("inprocess"), OutDir: c.String("out"), ChartFormat: c.String("chart-format"),
					Seed: c.Uint64("seed"), Progress: prog,
				})
			})
			if err != nil {
				return err
			}
			return saveReport(c, "central", rep, rep.(interface{ ChartFiles() []string }).ChartFiles())
		},
	}
}
