package pop

import (
	"context"
	"fmt"
	"time"

	"github.com/poplimit/poplimit/counter"
	"github.com/poplimit/poplimit/counter/memcached"
	"github.com/poplimit/poplimit/counter/redis"
)

// Memcached clients Open can build (Options.Client).
const (
	// ClientGomemcache is memcached.Store over bradfitz/gomemcache (Open's
	// default; cmd/edge and cmd/rls default to ClientPipe with one
	// multiplexed connection).
	ClientGomemcache = "gomemcache"
	// ClientPipe is memcached.PipeStore: pipelined, one round trip per
	// sliding-window decision.
	ClientPipe = "pipe"
)

// Options configures Open. Zero means default; one of Policy or PolicyDoc
// is required.
type Options struct {
	// Memcached is the host:port the PoP's counts live behind: the host's
	// mcproxy (or a single memcached). Default "": an in-process
	// counter.MemoryStore, shared with no other process (tests, demos).
	Memcached string
	// Store, when set, counts in a Redis Cluster instead:
	// "redis://host:port[,host:port…]" (package counter/redis, one atomic
	// Lua script per decision; Memcached, Client and Multiplex are then
	// unused). StoreServerTime takes now from the shard's clock.
	Store           string
	StoreServerTime bool
	// Client is the memcached client: ClientGomemcache (default) or
	// ClientPipe.
	Client string
	// Multiplex, with ClientPipe, is the number of connections shared by
	// every call (memcached.PipeConfig.Multiplex); default 0: one pooled
	// connection per call.
	Multiplex int
	// Timeout bounds each socket operation of the store; default the
	// longest store deadline (Config.StoreDeadline if set, else the
	// deadline's ceiling, 1s by default), since a gomemcache call does
	// not stop when its context ends.
	Timeout time.Duration
	// Policy is the policy file to load. With PolicyDoc it only names the
	// document in errors.
	Policy string
	// PolicyDoc, if not nil, is the policy document itself.
	PolicyDoc []byte
	// Config configures the Limiter (deadlines, breaker, metrics, events,
	// clock...). Its NewShared must be nil: Open builds it over the store.
	Config Config
}

// Open returns a Limiter that counts in the PoP's memcached (through the
// host's mcproxy) with the policy loaded: the library in one call. It
// builds the store client, counter.New over it for every limit, and the
// Limiter (New), then loads the policy; an invalid policy is an error
// (ErrInvalidPolicy). Until ctx ends it sweeps idle state (Run); when ctx
// ends it closes the store's connections, and the Limiter must not be used
// after that. The store is not dialled before the first decision: a PoP
// whose memcached is down opens, and its policies' fail modes apply.
//
// New with Config.NewShared remains the way to count in any other
// counter.Store.
func Open(ctx context.Context, o Options) (*Limiter, error) {
	if o.Config.NewShared != nil {
		return nil, fmt.Errorf("%w: Open builds NewShared over Options.Memcached; use New for a store of your own", ErrConfig)
	}
	if o.Policy == "" && o.PolicyDoc == nil {
		return nil, fmt.Errorf("%w: Open needs Options.Policy or Options.PolicyDoc", ErrConfig)
	}
	store, closeStore, err := o.store()
	if err != nil {
		return nil, err
	}
	cfg := o.Config
	cfg.NewShared = func(lim counter.Limit) (counter.Allower, error) { return counter.New(store, lim) }
	if o.Store != "" {
		rs, err := o.redisStore()
		if err != nil {
			closeStore()
			return nil, err
		}
		closeMc := closeStore
		store, closeStore = rs, func() { closeMc(); _ = rs.Close() }
		cfg.NewShared = func(lim counter.Limit) (counter.Allower, error) { return rs.NewAllower(lim) }
	}
	cfg.Store = store
	l, err := New(cfg)
	if err == nil {
		if o.PolicyDoc != nil {
			err = l.LoadBytes(o.policyName(), o.PolicyDoc)
		} else {
			err = l.LoadFile(o.Policy)
		}
	}
	if err != nil {
		closeStore()
		return nil, err
	}
	go func() {
		l.Run(ctx, 0)
		closeStore()
	}()
	return l, nil
}

func (o Options) policyName() string {
	if o.Policy != "" {
		return o.Policy
	}
	return "policy"
}

// store builds the store Options name, and what closes it.
func (o Options) store() (counter.Store, func(), error) {
	if o.Multiplex < 0 || o.Timeout < 0 {
		return nil, nil, fmt.Errorf("%w: negative Multiplex %d or Timeout %v", ErrConfig, o.Multiplex, o.Timeout)
	}
	timeout := o.Timeout
	if timeout == 0 {
		timeout = o.Config.deadline().longest()
	}
	switch o.Client {
	case "", ClientGomemcache:
		if o.Multiplex > 0 {
			return nil, nil, fmt.Errorf("%w: Multiplex needs Client %q", ErrConfig, ClientPipe)
		}
		if o.Memcached == "" {
			return counter.NewMemoryStore(), func() {}, nil
		}
		c := memcached.NewClient(memcached.Config{Servers: []string{o.Memcached}, Timeout: timeout})
		return memcached.NewStore(c), func() { _ = c.Close() }, nil
	case ClientPipe:
		if o.Memcached == "" {
			return nil, nil, fmt.Errorf("%w: Client %q needs Memcached (the host's mcproxy)", ErrConfig, ClientPipe)
		}
		p := memcached.NewPipeStore(memcached.PipeConfig{Addr: o.Memcached, Timeout: timeout, Multiplex: o.Multiplex})
		return p, func() { _ = p.Close() }, nil
	}
	return nil, nil, fmt.Errorf("%w: Client %q: want %q or %q", ErrConfig, o.Client, ClientGomemcache, ClientPipe)
}

// redisStore is the Redis Cluster store of Options.Store.
func (o Options) redisStore() (*redis.Store, error) {
	addrs, err := redis.ParseURL(o.Store)
	if err != nil {
		return nil, fmt.Errorf("%w: Store: %w", ErrConfig, err)
	}
	timeout := o.Timeout
	if timeout == 0 {
		timeout = o.Config.deadline().longest()
	}
	return redis.New(redis.Config{Addrs: addrs, Timeout: timeout, ServerTime: o.StoreServerTime})
}
