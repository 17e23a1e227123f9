package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/poplimit/poplimit/bench"
	"github.com/poplimit/poplimit/counter"
)

func accuracyCommand() *cli.Command {
	return &cli.Command{
		Name:  "accuracy",
		Usage: "replay seeded traces through a PoP and an exact sliding log: wrong %, false positives/negatives, rate error, over-admission, skew",
		Flags: commonFlags(
			&cli.StringFlag{Name: "trace", Usage: "traces: below, near, bursts (comma-separated)", Value: "below,near,bursts"},
			&cli.StringFlag{Name: "precision", Usage: "sliding-window sub-windows N (comma-separated, e.g. 1,4,12,60)", Value: "1"},
			&cli.StringFlag{Name: "algorithm", Usage: "sliding, fixed, token (comma-separated)", Value: "sliding"},
			&cli.StringFlag{Name: "skew", Usage: "clock skews to inject between workers (comma-separated durations, e.g. 100ms,1s)"},
			&cli.IntFlag{Name: "sources", Usage: "sources per trace", Value: 200},
			&cli.DurationFlag{Name: "duration", Usage: "trace length (virtual time)", Value: 10 * time.Minute},
			&cli.Int64Flag{Name: "quantity", Usage: "limit per window", Value: 100},
			&cli.DurationFlag{Name: "window", Usage: "limit window", Value: time.Minute},
			&cli.IntFlag{Name: "workers", Usage: "in-process workers", Value: 4},
			&cli.Uint64Flag{Name: "seed", Value: 1},
			&cli.BoolFlag{Name: "no-pop", Usage: "replay over an in-memory store instead of a launched PoP"},
		),
		Action: func(c *cli.Context) error {
			precs, err := intList(c.String("precision"))
			if err != nil {
				return fmt.Errorf("--precision: %w", err)
			}
			var algs []counter.Algorithm
			for _, s := range list(c.String("algorithm")) {
				a, err := bench.ParseAlgorithm(s)
				if err != nil {
					return err
				}
				algs = append(algs, a)
			}
			var skews []time.Duration
			for _, s := range list(c.String("skew")) {
				d, err := time.ParseDuration(s)
				if err != nil {
					return fmt.Errorf("--skew: %w", err)
				}
				skews = append(skews, d)
			}
			env, err := newEnv(c, false)
			if err != nil {
				return err
			}
			defer env.Close()
			prog, done := progress(c, "replay")
			rep, err := bench.RunAccuracy(c.Context, env, bench.AccuracySuiteConfig{
				Traces: list(c.String("trace")), Precisions: precs, Algorithms: algs, Skews: skews,
				Sources: c.Int("sources"), Duration: c.Duration("duration"), Seed: c.Uint64("seed"),
				Quantity: c.Int64("quantity"), Window: c.Duration("window"), Workers: c.Int("workers"),
				NoPoP: c.Bool("no-pop"), Progress: prog,
			})
			done()
			if err != nil {
				return err
			}
			if err := output(c, rep, rep.Tables()); err != nil {
				return err
			}
			var charts []string
			if len(precs) > 1 {
				if err := os.MkdirAll(c.String("out"), 0o755); err != nil {
					return err
				}
				name := "accuracy-precision" + bench.ChartExt(c.String("chart-format"))
				if err := bench.ChartPrecision(filepath.Join(c.String("out"), name), rep.Rows); err != nil {
					return err
				}
				charts = append(charts, name)
			}
			return saveReport(c, "accuracy", "popbench accuracy", rep, rep.Tables(), charts)
		},
	}
}

func list(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func intList(s string) ([]int, error) {
	var out []int
	for _, f := range list(s) {
		n, err := strconv.Atoi(f)
		if err != nil {
			return nil, err
		}
		out = append(out, n)
	}
	return out, nil
}
