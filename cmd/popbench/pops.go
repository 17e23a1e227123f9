package main

import (
	"time"

	"github.com/urfave/cli/v2"

	"github.com/poplimit/poplimit/bench"
)

func popsCommand() *cli.Command {
	return &cli.Command{
		Name:  "pops",
		Usage: "several PoPs side by side, one client spread across them: each enforces its limit alone",
		Flags: commonFlags(
			&cli.IntFlag{Name: "pops", Usage: "PoPs side by side, each its own shards, mcproxy and workers", Value: 3},
			&cli.IntFlag{Name: "shards", Usage: "shards per PoP", Value: 2},
			&cli.IntFlag{Name: "workers", Usage: "workers per PoP", Value: 2},
			&cli.DurationFlag{Name: "duration", Usage: "length of the run", Value: 5 * time.Second},
			&cli.Int64Flag{Name: "quantity", Usage: "limit per window", Value: 20},
			&cli.DurationFlag{Name: "window", Usage: "limit window", Value: time.Second},
			&cli.Float64Flag{Name: "multiple", Usage: "offered rate over the limit, in all (default 2 × pops)"},
			&cli.StringFlag{Name: "algorithm", Usage: "sliding, fixed or token", Value: "fixed"},
			inprocessFlag(),
			seedFlag(),
		),
		Action: func(c *cli.Context) error {
			alg, err := bench.ParseAlgorithm(c.String("algorithm"))
			if err != nil {
				return err
			}
			rep, err := runScenario(c, !c.Bool("inprocess"), "pops", func(env *bench.Env, prog func(int, int)) (bench.Result, error) {
				return bench.RunPops(c.Context, env, bench.PopsConfig{
					PoPs: c.Int("pops"), Shards: c.Int("shards"), Workers: c.Int("workers"), Duration: c.Duration("duration"),
					Quantity: c.Int64("quantity"), Window: c.Duration("window"), Multiple: c.Float64("multiple"),
					Algorithm: alg, InProcess: c.Bool("inprocess"), Seed: c.Uint64("seed"), Progress: prog,
				})
			})
			if err != nil {
				return err
			}
			return saveReport(c, "pops", rep, nil)
		},
	}
}
