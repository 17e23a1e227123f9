package main

import (
	"fmt"
	"time"

	"github.com/poplimit/poplimit/bench/soak"

	"github.com/urfave/cli/v2"

	"github.com/poplimit/poplimit/bench"
)

func soakCommand() *cli.Command {
	return &cli.Command{
		Name:  "soak",
		Usage: "a whole PoP at half its measured capacity for a long run: RSS, goroutines, fds of every process, errors, fail-open decisions",
		Flags: commonFlags(
			&cli.DurationFlag{Name: "duration", Usage: "length of the open-loop run", Value: 10 * time.Minute},
			&cli.Float64Flag{Name: "rate", Usage: "requests/s (0: half the capacity a closed loop measures first)"},
			&cli.DurationFlag{Name: "capacity-run", Usage: "closed-loop run that measures capacity (default 5s, at most duration/2)"},
			&cli.DurationFlag{Name: "warmup", Usage: "excluded from the verdict (default 10% of duration)"},
			&cli.DurationFlag{Name: "interval", Usage: "between samples (default duration/60, within 250ms-10s)"},
			&cli.IntFlag{Name: "conns", Usage: "closed-loop clients and open-loop senders", Value: 32},
			&cli.Uint64Flag{Name: "keys", Usage: "Zipf identity space", Value: 10000},
			&cli.IntFlag{Name: "edges", Usage: "edge workers", Value: 4},
			&cli.StringFlag{Name: "algorithm", Usage: "sliding, fixed or token", Value: "sliding"},
			&cli.Float64Flag{Name: "tolerance", Usage: "growth allowed after warm-up, percent", Value: 5},
			&cli.BoolFlag{Name: "pprof", Usage: "serve /debug/pprof/ on mcproxy's and the edges' admin listeners (logged) to profile them during the run"},
			seedFlag(),
		),
		Action: func(c *cli.Context) error {
			alg, err := bench.ParseAlgorithm(c.String("algorithm"))
			if err != nil {
				return err
			}
			res, err := runScenario(c, true, "soak", func(env *bench.Env, prog func(int, int)) (bench.Result, error) {
				return soak.RunSoak(c.Context, env, soak.SoakConfig{
					Duration: c.Duration("duration"), Rate: c.Float64("rate"), CapacityRun: c.Duration("capacity-run"),
					Warmup: c.Duration("warmup"), Interval: c.Duration("interval"), Conns: c.Int("conns"), Keys: c.Uint64("keys"),
					Edges: c.Int("edges"), Algorithm: alg, Tolerance: c.Float64("tolerance"), Seed: c.Uint64("seed"), Progress: prog,
					Pprof: c.Bool("pprof"),
				})
			})
			if err != nil {
				return err
			}
			if !c.Bool("json") {
				fmt.Fprintln(c.App.Writer, "\n"+res.(interface{ Summary() string }).Summary())
			}
			return saveReport(c, "soak", res, nil)
		},
	}
}
