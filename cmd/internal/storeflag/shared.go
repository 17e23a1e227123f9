package storeflag

import (
	"time"

	"github.com/urfave/cli/v2"

	"github.com/poplimit/poplimit/counter"
	"github.com/poplimit/poplimit/counter/redis"
)

// RedisFlags are --store and --store-server-time: counting in a Redis
// Cluster instead of memcached (cmd/edge, cmd/rls).
func RedisFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "store", Usage: "count in a Redis Cluster instead of memcached: redis://host:port[,host:port…] (seed nodes; package counter/redis: one atomic Lua script per decision); --memcached and --store-client are then unused"},
		&cli.BoolFlag{Name: "store-server-time", Usage: "with --store redis://…: take now from the shard's clock (redis TIME) instead of this worker's, so worker clock skew adds no error"},
	}
}

// Shared is the shared count a daemon's flags name.
type Shared struct {
	// Store serves the verbs (concurrency limits, mitigation flags, global
	// limits' local pools).
	Store counter.Store
	// NewShared builds a limit's Allower over Store: counter.New over
	// memcached, or one Lua script per decision over Redis.
	NewShared func(counter.Limit) (counter.Allower, error)
	// Close releases the Redis connections (a no-op for memcached).
	Close func() error
}

// FromFlags builds the Shared of c's --store (RedisFlags), else of
// --store-client, --memcached and --store-multiplex (New), with timeout as
// the socket timeout.
func FromFlags(c *cli.Context, timeout time.Duration) (Shared, error) {
	if u := c.String("store"); u != "" {
		addrs, err := redis.ParseURL(u)
		if err != nil {
			return Shared{}, err
		}
		rs, err := redis.New(redis.Config{Addrs: addrs, Timeout: timeout, ServerTime: c.Bool("store-server-time")})
		if err != nil {
			return Shared{}, err
		}
		return Shared{Store: rs, Close: rs.Close, NewShared: func(l counter.Limit) (counter.Allower, error) { return rs.NewAllower(l) }}, nil
	}
	st, err := New(c.String("store-client"), c.StringSlice("memcached"), timeout, c.Int("store-multiplex"))
	if err != nil {
		return Shared{}, err
	}
	return Shared{Store: st, Close: func() error { return nil }, NewShared: func(l counter.Limit) (counter.Allower, error) { return counter.New(st, l) }}, nil
}
