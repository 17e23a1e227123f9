// Package procsflag is the --procs flag of mcproxy, edge and rls: how many
// threads run Go code at once (GOMAXPROCS), fixed or following the load
// (daemon.GovernProcs).
package procsflag

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"runtime"

	"github.com/urfave/cli/v2"

	"github.com/poplimit/poplimit/cmd/internal/daemon"
)

// Flag is --procs.
func Flag() cli.Flag {
	return &cli.IntFlag{Name: "procs", Usage: "threads running Go code at once (GOMAXPROCS). 0: follow the load, one until it is 70% busy (fewer thread wake-ups and less CPU per request than on more), doubling up to one per core above while the machine has half a core idle to run another (or its Ps are 95% busy), halving when the load fits in half of them under 60% busy (daemon.GovernProcs); the GOMAXPROCS environment variable, when set, fixes it instead. N: always N (1 for one worker process per core, as nginx runs its workers)"}
}

// Start applies --procs of c: a fixed count at once, or, for 0 without
// GOMAXPROCS in the environment, a governor on one P from now until ctx
// ends. The channel is closed once the governor has exited (at once
// without one).
func Start(ctx context.Context, c *cli.Context, log *slog.Logger) (<-chan struct{}, error) {
	n := c.Int("procs")
	switch {
	case n < 0:
		return nil, fmt.Errorf("--procs %d: want 0 (follow the load) or more", n)
	case n > 0:
		runtime.GOMAXPROCS(n)
	case os.Getenv("GOMAXPROCS") == "":
		return daemon.GovernProcs(ctx, daemon.ProcsConfig{Logger: log}), nil
	}
	done := make(chan struct{})
	close(done)
	return done, nil
}
