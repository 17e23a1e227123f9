package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

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
	rep, unexpected, err := differential.RunSeeds(c.Context, differential.Config{Seeds: seeds, Requests: c.Int("requests"), Stores: stores,
		RLSBin: rlsBin, MCProxyBin: bins["mcproxy"], PeerBin: peer, Dir: dir})
	if err != nil {
		return err
	}
	if err := output(c, rep, rep.Tables()); err != nil {
		return err
	}
	if unexpected > 0 {
		return fmt.Errorf("%d unexpected differences from envoyproxy/ratelimit", unexpected)
	}
	return nil
}
