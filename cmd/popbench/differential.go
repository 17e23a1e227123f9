package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"text/tabwriter"

	"github.com/urfave/cli/v2"

	"github.com/poplimit/poplimit/bench"
	"github.com/poplimit/poplimit/bench/differential"
	"github.com/poplimit/poplimit/bench/fixture/procs"
)

// rlsDifferential is "popbench rls --differential".
func rlsDifferential(c *cli.Context) error {
	peer := c.String("peer")
	if peer == "" {
		return errors.New("--differential needs --peer BIN (envoyproxy/ratelimit)")
	}
	stores := []bench.StoreKind{bench.StoreMemcached, bench.StoreRedis}
	if c.IsSet("store") {
		switch s := c.String("store"); s {
		case "both":
		case "memcached", "redis":
			stores = []bench.StoreKind{bench.StoreKind(s)}
		default:
			return fmt.Errorf("--store %q: want memcached, redis or both", s)
		}
	}
	if c.Int("seeds") < 1 {
		return errors.New("--seeds: want at least 1")
	}
	dir := c.String("dir")
	if dir == "" {
		d, err := os.MkdirTemp("", "popbench-differential-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(d)
		dir = d
	}
	bins, err := procs.Build(c.Context, filepath.Join(dir, "bin"), "mcproxy")
	if err != nil {
		return err
	}
	rlsBin := c.String("rls-bin")
	if rlsBin == "" {
		b, err := procs.Build(c.Context, filepath.Join(dir, "bin"), "rls")
		if err != nil {
			return err
		}
		rlsBin = b["rls"]
	}
	var seeds []uint64
	for i := range uint64(c.Int("seeds")) {
		seeds = append(seeds, c.Uint64("first-seed")+i)
	}
	results, err := differential.RunSeeds(c.Context, differential.Config{Seeds: seeds, Requests: c.Int("requests"), Stores: stores,
		RLSBin: rlsBin, MCProxyBin: bins["mcproxy"], PeerBin: peer, Dir: dir})
	if err != nil {
		return err
	}
	w := c.App.Writer
	unexpected := 0
	for _, r := range results {
		unexpected += r.Unexpected
	}
	if c.Bool("json") {
		e := json.NewEncoder(w)
		e.SetIndent("", "  ")
		if err := e.Encode(results); err != nil {
			return err
		}
	} else {
		printDifferential(c, results)
	}
	if unexpected > 0 {
		return fmt.Errorf("%d unexpected differences from envoyproxy/ratelimit", unexpected)
	}
	return nil
}

func printDifferential(c *cli.Context, results []*differential.Result) {
	w := c.App.Writer
	for _, r := range results {
		for _, d := range r.Differences {
			fmt.Fprintln(w, d)
		}
	}
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "seed\tstore\trequests\tcompared\tdiffering (unexpected)\tdeliberate\tskipped")
	var sum differential.Result
	classes, deliberate := map[string]int{}, map[string]int{}
	for _, r := range results {
		fmt.Fprintf(tw, "%d\t%s\t%d\t%d\t%d\t%d\t%d\n", r.Seed, r.Store, r.Requests, r.Compared, r.Unexpected, r.Deliberate, r.Skipped)
		sum.Requests, sum.Compared, sum.Unexpected = sum.Requests+r.Requests, sum.Compared+r.Compared, sum.Unexpected+r.Unexpected
		sum.Deliberate, sum.Skipped = sum.Deliberate+r.Deliberate, sum.Skipped+r.Skipped
		for k, v := range r.Classes {
			classes[k] += v
		}
		for k, v := range r.ByDeliberate {
			deliberate[k] += v
		}
	}
	fmt.Fprintf(tw, "all\t\t%d\t%d\t%d\t%d\t%d\n", sum.Requests, sum.Compared, sum.Unexpected, sum.Deliberate, sum.Skipped)
	tw.Flush()
	for _, k := range slices.Sorted(maps.Keys(classes)) {
		fmt.Fprintf(w, "unexpected %-50s %d\n", k, classes[k])
	}
	for _, d := range differential.Deliberates {
		fmt.Fprintf(w, "deliberate %-30s %d  (%s)\n", d.Name, deliberate[d.Name], d.Reason)
	}
}
