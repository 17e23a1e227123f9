package main

import (
	"time"

	"github.com/poplimit/poplimit/counter/redis"
)

// newRedisStore is --store redis://host:port[,…]: the Redis Cluster store
// with the memcached socket timeout as its network timeout.
func newRedisStore(url string, timeout time.Duration, serverTime bool) (*redis.Store, error) {
	addrs, err := redis.ParseURL(url)
	if err != nil {
		return nil, err
	}
	return redis.New(redis.Config{Addrs: addrs, Timeout: timeout, ServerTime: serverTime})
}
