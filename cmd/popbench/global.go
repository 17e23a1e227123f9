package main

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/poplimit/poplimit/bench"
)

func globalCommand() *cli.Command {
	return &cli.Command{
		Name:  "global",
		Usage: "a global limit (scope: global) across PoPs vs per-PoP limits vs a central store, the client's traffic shifting between PoPs mid-run",
		Flags: commonFlags(
			&cli.IntFlag{Name: "pops", Usage: "PoPs, each its own shards, mcproxy and edge workers", Value: 3},
			&cli.IntFlag{Name: "shards", Usage: "shards per PoP", Value: 2},
			&cli.IntFlag{Name: "workers", Usage: "edge workers per PoP", Value: 2},
			&cli.Int64Flag{Name: "quantity", Usage: "global limit per window (with --cold, 100 unless set: a burst a 2-core host serves within a home round trip)", Value: 500},
			&cli.DurationFlag{Name: "window", Usage: "limit window (fixed, epoch-aligned); 500 per 10s is 3,000/min in short windows", Value: 10 * time.Second},
			&cli.IntFlag{Name: "windows", Usage: "length of the run in windows (it starts on a boundary; the split shifts halfway)", Value: 3},
			&cli.Float64Flag{Name: "multiple", Usage: "offered rate over the limit", Value: 2},
			&cli.DurationFlag{Name: "delay", Usage: "one-way delay in front of the home (and central) store", Value: 80 * time.Millisecond},
			&cli.StringFlag{Name: "split", Usage: "the client's traffic split over the PoPs, before/after the shift", Value: "70,20,10/10,20,70"},
			&cli.BoolFlag{Name: "no-central", Usage: "skip the central-store comparison"},
			&cli.BoolFlag{Name: "cold", Usage: "cold-key scenario: fresh keys each window, each bursting multiple × quantity ÷ pops requests at every PoP at the window's start"},
			&cli.IntFlag{Name: "keys", Usage: "with --cold, fresh keys per window", Value: 2},
		),
		Action: func(c *cli.Context) error {
			before, after, err := parseSplit(c.String("split"))
			if err != nil {
				return err
			}
			quantity := c.Int64("quantity")
			if c.Bool("cold") && !c.IsSet("quantity") {
				quantity = coldQuantity
			}
			rep, err := runScenario(c, true, "global", func(env *bench.Env, prog func(int, int)) (bench.Result, error) {
				return bench.RunGlobal(c.Context, env, bench.GlobalConfig{
					PoPs: c.Int("pops"), Shards: c.Int("shards"), Workers: c.Int("workers"), Quantity: quantity,
					Window: c.Duration("window"), Windows: c.Int("windows"), Multiple: c.Float64("multiple"), Delay: c.Duration("delay"),
					Before: before, After: after, NoCentral: c.Bool("no-central"), Cold: c.Bool("cold"), Keys: c.Int("keys"), Progress: prog,
				})
			})
			if err != nil {
				return err
			}
			return saveReport(c, "global", rep, nil)
		},
	}
}

// coldQuantity is --cold's limit when --quantity is not set.
const coldQuantity = 100

// parseSplit reads "70,20,10/10,20,70" as two weight lists.
func parseSplit(s string) (before, after []float64, err error) {
	b, a, ok := strings.Cut(s, "/")
	if !ok {
		a = b
	}
	for i, part := range []string{b, a} {
		var ws []float64
		for _, f := range strings.Split(part, ",") {
			w, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
			if err != nil || w < 0 {
				return nil, nil, fmt.Errorf("--split %q: %q is not a weight", s, f)
			}
			ws = append(ws, w)
		}
		if i == 0 {
			before = ws
		} else {
			after = ws
		}
	}
	if len(before) != len(after) {
		return nil, nil, fmt.Errorf("--split %q: %d weights before the shift, %d after", s, len(before), len(after))
	}
	return before, after, nil
}
