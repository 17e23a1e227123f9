package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/urfave/cli/v2"

	"github.com/poplimit/poplimit/bench"
	"github.com/poplimit/poplimit/bench/accuracy"
)

func accuracyCommand() *cli.Command {
	return &cli.Command{
		Name:  "accuracy",
		Usage: "replay seeded traces through a PoP and an exact sliding log: wrong %, false positives/negatives, rate error, over-admission, skew",
		Flags: commonFlags(
			&cli.StringFlag{Name: "trace", Usage: "traces (comma-separated): a name (below, near, bursts: testdata/traces/accuracy-<name>.json) or a trace file", Value: "below,near,bursts"},
			&cli.StringFlag{Name: "precision", Usage: "sliding-window sub-windows N (comma-separated, e.g. 1,4,12,60)", Value: "1"},
			&cli.StringFlag{Name: "algorithm", Usage: "sliding, fixed, token (comma-separated)", Value: "sliding"},
			&cli.StringFlag{Name: "skew", Usage: "clock skews to inject between workers (comma-separated durations, e.g. 100ms,1s)"},
			&cli.IntFlag{Name: "sources", Usage: "sources per trace (default: the trace file's)"},
			&cli.DurationFlag{Name: "duration", Usage: "trace length in virtual time (default: the trace file's)"},
			&cli.Int64Flag{Name: "quantity", Usage: "limit per window (default: the trace file's)"},
			&cli.DurationFlag{Name: "window", Usage: "limit window (default: the trace file's)"},
			&cli.IntFlag{Name: "workers", Usage: "in-process workers", Value: 4},
			&cli.Uint64Flag{Name: "seed", Usage: "trace seed (default: the trace file's)"},
			&cli.BoolFlag{Name: "no-pop", Usage: "replay over an in-memory store instead of a launched PoP"},
		),
		Action: func(c *cli.Context) error {
			precs, err := intList(c.String("precision"))
			if err != nil {
				return fmt.Errorf("--precision: %w", err)
			}
			algs, err := algorithms(c.String("algorithm"))
			if err != nil {
				return err
			}
			skews, err := durations(c.String("skew"))
			if err != nil {
				return fmt.Errorf("--skew: %w", err)
			}
			rep, err := runScenario(c, false, "replay", func(env *bench.Env, prog func(int, int)) (bench.Result, error) {
				return accuracy.RunAccuracy(c.Context, env, accuracy.AccuracySuiteConfig{
					TraceFiles: list(c.String("trace")), Precisions: precs, Algorithms: algs, Skews: skews,
					Sources: c.Int("sources"), Duration: c.Duration("duration"), Seed: c.Uint64("seed"),
					Quantity: c.Int64("quantity"), Window: c.Duration("window"), Workers: c.Int("workers"),
					NoPoP: c.Bool("no-pop"), Progress: prog,
				})
			})
			if err != nil {
				return err
			}
			var charts []string
			if len(precs) > 1 {
				if err := os.MkdirAll(c.String("out"), 0o755); err != nil {
					return err
				}
				name := "accuracy-precision" + bench.ChartExt(c.String("chart-format"))
				if err := rep.(interface{ ChartPrecision(string) error }).ChartPrecision(filepath.Join(c.String("out"), name)); err != nil {
					return err
				}
				charts = append(charts, name)
			}
			return saveReport(c, "accuracy", rep, charts)
		},
	}
}
