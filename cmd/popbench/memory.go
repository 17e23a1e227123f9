package main

import (
	"time"

	"github.com/urfave/cli/v2"

	"github.com/poplimit/poplimit/bench"
)

func memoryCommand() *cli.Command {
	return &cli.Command{
		Name:  "memory",
		Usage: "bytes per limiter: write limiters through a PoP of real memcached, read its stats and stats slabs",
		Flags: commonFlags(
			&cli.IntFlag{Name: "limiters", Usage: "limiters per configuration (e.g. 1000000; shards are sized to hold them)", Value: 10000},
			&cli.StringFlag{Name: "algorithm", Usage: "sliding, fixed, token (comma-separated)", Value: "fixed,token,sliding"},
			&cli.StringFlag{Name: "precision", Usage: "sliding-window precisions (comma-separated)", Value: "1,4,12,60"},
			&cli.DurationFlag{Name: "window", Usage: "limit window: items live about this long, so writing must finish within it (2m: keys as long as 1m's)", Value: 2 * time.Minute},
		),
		Action: func(c *cli.Context) error {
			precs, err := intList(c.String("precision"))
			if err != nil {
				return err
			}
			algs, err := algorithms(c.String("algorithm"))
			if err != nil {
				return err
			}
			rep, err := runScenario(c, false, "limiters", func(env *bench.Env, prog func(int, int)) (bench.Result, error) {
				return bench.RunMemory(c.Context, env, bench.MemoryConfig{Limiters: c.Int("limiters"), Algorithms: algs,
					Precisions: precs, Window: c.Duration("window"), Progress: prog})
			})
			if err != nil {
				return err
			}
			return saveReport(c, "memory", rep, nil)
		},
	}
}
