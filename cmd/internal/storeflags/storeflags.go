// Package storeflags declares the store, store-deadline and breaker flags
// that cmd/edge and cmd/rls share, and wires them in one place: Open
// builds the store (counter/store) and the pop.Config fields they set, so
// both daemons accept, refuse and default the same values.
package storeflags

import (
	"fmt"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/poplimit/poplimit/counter"
	"github.com/poplimit/poplimit/counter/store"
	"github.com/poplimit/poplimit/pop"
)

// Flags are the store, store-deadline and breaker flags.
func Flags() []cli.Flag {
	return []cli.Flag{
		&cli.StringSliceFlag{Name: "memcached", Usage: "memcached or mcproxy `ADDR` (host:port), normally the host's mcproxy; repeatable with --store-client gomemcache (which hashes keys over them); empty = in-process store (this process only, no sharing)"},
		&cli.StringFlag{Name: "store-client", Value: store.Pipe, Usage: "memcached client: 'pipe' (pipelined: one round trip per sliding-window decision, concurrent decisions' calls written together; one --memcached address, the host's mcproxy) or 'gomemcache' (bradfitz/gomemcache: one round trip per store verb; hashes over several --memcached addresses)"},
		&cli.IntFlag{Name: "store-multiplex", Value: 1, Usage: "with --store-client pipe: connections shared by all requests (concurrent store calls are written together and their replies read in order: fewer system calls; one connection batches best); 0 = one pooled connection per call"},
		&cli.StringFlag{Name: "store", Usage: "count in a Redis Cluster instead of memcached: redis://host:port[,host:port…] (seed nodes; package counter/redis: one atomic Lua script per decision); --memcached and --store-client are then unused"},
		&cli.BoolFlag{Name: "store-server-time", Usage: "with --store redis://…: take now from the shard's clock (redis TIME) instead of this process's, so clock skew between processes adds no error"},
		&cli.DurationFlag{Name: "store-deadline", Value: 0, Usage: "fixed deadline of one decision's store calls; 0 = adaptive: 4x the recent p99 store latency, within [--store-deadline-floor, --store-deadline-ceiling] (a burst on a healthy store raises it instead of timing out)"},
		&cli.DurationFlag{Name: "store-deadline-floor", Value: 250 * time.Millisecond, Usage: "shortest adaptive store deadline: a host with saturated cores schedules a process hundreds of ms late, and a timeout on a store that answers costs exactness (the local budget decides); a dead store is not waited on (refused fails at once, the breaker opens)"},
		&cli.DurationFlag{Name: "store-deadline-ceiling", Value: time.Second, Usage: "longest adaptive store deadline: the most a request waits on a store that stopped answering, until the breaker opens; the store's socket timeout is --store-deadline if set, else this"},
		&cli.IntFlag{Name: "store-in-flight", Value: 256, Usage: "decisions waiting on the store at once in this process; beyond it a decision waits up to one deadline for a slot, then is decided by the local budget (reason store_busy)"},
		&cli.IntFlag{Name: "breaker-failures", Value: 5, Usage: "consecutive hard store failures (refused, reset, EOF, server error; not timeouts) that open the circuit breaker"},
		&cli.DurationFlag{Name: "breaker-window", Value: 2 * time.Second, Usage: "failing store calls (timeouts included) with no success at all for this long open the breaker; timeouts while other calls succeed never do"},
		&cli.DurationFlag{Name: "breaker-open", Value: 500 * time.Millisecond, Usage: "how long the breaker stays open before a half-open probe"},
	}
}

// Open builds the store of c's Flags and returns it with the pop.Config
// fields those flags set: NewShared, Store, Deadline, Breaker and
// MaxInFlight. The caller sets the rest and closes the store when done.
func Open(c *cli.Context) (pop.Config, *store.Shared, error) {
	deadline := pop.DeadlineConfig{Fixed: c.Duration("store-deadline"), Floor: c.Duration("store-deadline-floor"), Ceiling: c.Duration("store-deadline-ceiling")}
	scfg, err := storeConfig(c, deadline.SocketTimeout())
	if err != nil {
		return pop.Config{}, nil, err
	}
	shared, err := store.New(scfg)
	if err != nil {
		return pop.Config{}, nil, err
	}
	return pop.Config{
		NewShared:   func(l counter.Limit) (counter.Allower, error) { return shared.NewAllower(l) },
		Store:       shared.Store(),
		Deadline:    deadline,
		MaxInFlight: c.Int("store-in-flight"),
		Breaker:     pop.BreakerConfig{Failures: c.Int("breaker-failures"), Window: c.Duration("breaker-window"), OpenFor: c.Duration("breaker-open")},
	}, shared, nil
}

// storeConfig is the store.Config of c's store flags, with timeout as the
// socket timeout.
func storeConfig(c *cli.Context, timeout time.Duration) (store.Config, error) {
	mux := c.Int("store-multiplex")
	switch {
	case mux < 0:
		return store.Config{}, fmt.Errorf("--store-multiplex %d: want 0 or more", mux)
	case mux == 0:
		mux = -1 // store.Config: no shared connection
	}
	return store.Config{
		Memcached:       c.StringSlice("memcached"),
		Redis:           c.String("store"),
		RedisServerTime: c.Bool("store-server-time"),
		Client:          c.String("store-client"),
		Multiplex:       mux,
		Timeout:         timeout,
	}, nil
}
