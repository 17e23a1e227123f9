// Package storeflag builds the shared count's store from the daemons'
// --store-client, --memcached and --store-multiplex flags (cmd/edge,
// cmd/rls), so both accept and refuse the same values.
package storeflag

import (
	"fmt"
	"time"

	"github.com/poplimit/poplimit/counter"
	"github.com/poplimit/poplimit/counter/memcached"
)

// New builds the shared count's store: an in-process one without
// addresses, else the named memcached client ("pipe" or "gomemcache")
// with timeout as its socket timeout (multiplex:
// memcached.PipeConfig.Multiplex).
func New(client string, addrs []string, timeout time.Duration, multiplex int) (counter.Store, error) {
	switch {
	case client != "pipe" && client != "gomemcache":
		return nil, fmt.Errorf("--store-client %q: want pipe or gomemcache", client)
	case multiplex < 0:
		return nil, fmt.Errorf("--store-multiplex %d: want 0 or more", multiplex)
	case len(addrs) == 0:
		return counter.NewMemoryStore(), nil
	case client == "gomemcache":
		return memcached.NewStore(memcached.NewClient(memcached.Config{Servers: addrs, Timeout: timeout})), nil
	case len(addrs) > 1:
		return nil, fmt.Errorf("--store-client pipe speaks to one address (the host's mcproxy), got %d --memcached; use --store-client gomemcache to hash over several", len(addrs))
	}
	return memcached.NewPipeStore(memcached.PipeConfig{Addr: addrs[0], Timeout: timeout, Multiplex: multiplex}), nil
}
