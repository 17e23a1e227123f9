package main

import (
	"fmt"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/poplimit/poplimit/bench"
)

func demoCommand() *cli.Command {
	return &cli.Command{
		Name:  "demo",
		Usage: "launch a PoP (3 shards, 1 mcproxy, 4 edge workers, an upstream), run a mixed workload, report",
		Flags: commonFlags(
			&cli.DurationFlag{Name: "duration", Usage: "traffic duration", Value: 20 * time.Second},
			seedFlag(),
			&cli.IntFlag{Name: "shards", Usage: "memcached shards (or in-process shards) behind the proxies", Value: 3},
			&cli.IntFlag{Name: "proxies", Usage: "mcproxy processes, each in front of every shard (edges spread over them)", Value: 1},
			&cli.IntFlag{Name: "workers", Usage: "edge worker processes sharing one count per key", Value: 4},
			&cli.StringFlag{Name: "algorithm", Usage: "sliding, fixed or token", Value: "sliding"},
			&cli.StringFlag{Name: "arrivals", Usage: "poisson or bursty (on/off) arrivals", Value: "poisson"},
			&cli.StringFlag{Name: "events", Usage: "every edge's rejection events to kafka://BROKER[,BROKER...]/TOPIC (or a file, '-' for stderr); the report counts events written per second and dropped"},
		),
		Action: func(c *cli.Context) error {
			alg, err := bench.ParseAlgorithm(c.String("algorithm"))
			if err != nil {
				return err
			}
			arrivals := bench.Poisson
			switch c.String("arrivals") {
			case "poisson":
			case "bursty":
				arrivals = bench.Bursty
			default:
				return fmt.Errorf("--arrivals %q: want poisson or bursty", c.String("arrivals"))
			}
			_, err = runScenario(c, true, "traffic", func(env *bench.Env, prog func(int, int)) (bench.Result, error) {
				return bench.RunDemo(c.Context, env, bench.DemoConfig{
					Duration: c.Duration("duration"), Seed: c.Uint64("seed"), Shards: c.Int("shards"),
					Proxies: c.Int("proxies"), Workers: c.Int("workers"), OutDir: c.String("out"),
					Algorithm: alg, Progress: prog, ChartFormat: c.String("chart-format"), Arrivals: arrivals,
					Events: c.String("events"),
				})
			})
			return err
		},
	}
}
