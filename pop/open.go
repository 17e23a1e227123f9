package pop

import (
	"context"
	"fmt"

	"github.com/poplimit/poplimit/counter"
	"github.com/poplimit/poplimit/counter/store"
)

// Options configures Open. Zero means default; one of Policy or PolicyDoc
// is required.
type Options struct {
	// Store names the store the PoP's counts live in (package
	// counter/store): usually Memcached: the host's mcproxy, through the
	// pipelined client. Default: an in-process memstore.Store, shared
	// with no other process (tests, demos). Its Timeout defaults to
	// Config's deadline's SocketTimeout.
	Store store.Config
	// Policy is the policy file to load. With PolicyDoc it only names the
	// document in errors.
	Policy string
	// PolicyDoc, if not nil, is the policy document itself.
	PolicyDoc []byte
	// Config configures the Limiter (deadlines, breaker, metrics, events,
	// clock...). Its NewShared must be nil: Open builds it, and Store,
	// from Options.Store.
	Config Config
}

// Open returns a Limiter that counts in the PoP's memcached (through the
// host's mcproxy) with the policy loaded: the library in one call. It
// builds the store (store.New), the Limiter over it (New), then loads the
// policy; an invalid policy is an error (ErrInvalidPolicy), so is a
// store.Config store.New refuses (ErrConfig). Until ctx ends it sweeps
// idle state (Run); when ctx ends it closes the store's connections, and
// the Limiter must not be used after that. The store is not dialled
// before the first decision: a PoP whose memcached is down opens, and its
// policies' fail modes apply.
//
// New with Config.NewShared and Config.Store remains the way to count in
// any other counter.Store.
func Open(ctx context.Context, o Options) (*Limiter, error) {
	if o.Config.NewShared != nil {
		return nil, fmt.Errorf("%w: Open builds NewShared from Options.Store; use New for a store of your own", ErrConfig)
	}
	if o.Policy == "" && o.PolicyDoc == nil {
		return nil, fmt.Errorf("%w: Open needs Options.Policy or Options.PolicyDoc", ErrConfig)
	}
	scfg := o.Store
	if scfg.Timeout == 0 {
		scfg.Timeout = o.Config.deadline().SocketTimeout()
	}
	shared, err := store.New(scfg)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	cfg := o.Config
	cfg.NewShared = func(lim counter.Limit) (counter.Allower, error) { return shared.NewAllower(lim) }
	cfg.Store = shared.Store()
	l, err := New(cfg)
	if err == nil {
		if o.PolicyDoc != nil {
			err = l.LoadBytes(o.policyName(), o.PolicyDoc)
		} else {
			err = l.LoadFile(o.Policy)
		}
	}
	if err != nil {
		_ = shared.Close()
		return nil, err
	}
	go func() {
		l.Run(ctx, 0)
		_ = shared.Close()
	}()
	return l, nil
}

func (o Options) policyName() string {
	if o.Policy != "" {
		return o.Policy
	}
	return "policy"
}
