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
			&cli.IntFlag{Name: "limiters", Usage: "limiters per configuration (capped at 200000/(N+1))", Value: 10000},
			&cli.StringFlag{Name: "precision", Usage: "sliding-window precisions (comma-separated)", Value: "1,4,12,60"},
			&cli.DurationFlag{Name: "window", Value: time.Minute},
		),
		Action: func(c *cli.Context) error {
			precs, err := intList(c.String("precision"))
			if err != nil {
				return err
			}
			env, err := newEnv(c, false)
			if err != nil {
				return err
			}
			defer env.Close()
			prog, done := progress(c, "limiters")
			rep, err := bench.RunMemory(c.Context, env, bench.MemoryConfig{Limiters: c.Int("limiters"), Precisions: precs,
				Window: c.Duration("window"), Progress: prog})
			done()
			if err != nil {
				return err
			}
			if err := output(c, rep, rep.Tables()); err != nil {
				return err
			}
			return saveReport(c, "memory", "popbench memory", rep, rep.Tables(), nil)
		},
	}
}
