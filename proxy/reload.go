package proxy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/poplimit/poplimit/proxy/protocol"
	"github.com/poplimit/poplimit/shard"
)

// Router returns the Router new requests go to.
func (s *Server) Router() *Router { return s.router.Load() }

// SetRouter makes requests read from now on go to r, and returns the
// previous Router. Requests already dispatched finish on the previous one;
// the caller owns it and should Drain it. Client connections are kept.
func (s *Server) SetRouter(r *Router) (old *Router) {
	if r == nil {
		panic("proxy: SetRouter(nil)")
	}
	return s.router.Swap(r)
}

// InFlight returns the calls sent through r that have not finished yet.
func (r *Router) InFlight() uint64 {
	var sent, done uint64
	for i := range r.stats {
		sent += r.stats[i].requests.Load()
		done += r.lat[i].snapshot().count()
	}
	return sent - done
}

func (r *Router) sent() uint64 {
	var n uint64
	for i := range r.stats {
		n += r.stats[i].requests.Load()
	}
	return n
}

// Drain waits until no call sent through r is in flight and none has been
// sent for quiet (default 1s; it covers a client that picked r just before
// a SetRouter swap), then closes r. When ctx ends first, r is closed at
// once (calls still pending finish with ErrBackendClosed) and ctx's error
// returned.
func (r *Router) Drain(ctx context.Context, quiet time.Duration) error {
	if quiet <= 0 {
		quiet = time.Second
	}
	defer r.Close()
	t := time.NewTicker(min(quiet/4, 50*time.Millisecond))
	defer t.Stop()
	last, since := r.sent(), time.Now()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case now := <-t.C:
			sent := r.sent()
			if sent != last || r.InFlight() != 0 {
				last, since = sent, now
				continue
			}
			if now.Sub(since) >= quiet {
				return nil
			}
		}
	}
}

// shardTotals are one shard's counters, summed over the Routers a pool has
// had (reloads replace Routers; the totals stay monotonic).
type shardTotals struct {
	requests, errors, timeouts, ejections uint64
	fragments                             uint64
	lat                                   latencySnap
	// wire's counters (bytes, server_eof) are summed; its queue gauges
	// are only meaningful for a live Router's own totals.
	wire BackendStats
}

func (t *shardTotals) add(o shardTotals) {
	t.requests += o.requests
	t.errors += o.errors
	t.timeouts += o.timeouts
	t.ejections += o.ejections
	t.fragments += o.fragments
	t.lat.add(o.lat)
	t.wire.add(o.wire)
}

func (r *Router) totals(i int) shardTotals {
	return shardTotals{
		requests:  r.stats[i].requests.Load(),
		errors:    r.stats[i].errors.Load(),
		timeouts:  r.stats[i].timeouts.Load(),
		ejections: r.m.Health(i).Stats().Ejections,
		fragments: r.stats[i].fragments.Load(),
		lat:       r.lat[i].snapshot(),
		wire:      r.backendStats(i),
	}
}

// ProxyConfig configures NewProxy. Zero means default.
type ProxyConfig struct {
	// Logger receives pool, reload and shard events; default
	// slog.Default().
	Logger *slog.Logger
	// Limits, Version and MaxPipeline are passed to every pool's Server.
	Limits      protocol.Limits
	Version     string
	MaxPipeline int
	// NewBackend, when set, builds the backends of every pool (e.g.
	// in-process memory shards); default a Pool per memcached.
	NewBackend func(pool string, i int, s shard.Server, hooks BackendHooks) (Backend, error)
	// DrainQuiet is Router.Drain's quiet period for Routers replaced by a
	// reload; default 1s.
	DrainQuiet time.Duration
	// DrainTimeout bounds the wait for a replaced Router's calls; default
	// 30s.
	DrainTimeout time.Duration
	// Now is the clock of the stats (uptime, timestamp); default time.Now.
	Now func() time.Time
	// ClientConnections and ClientTimeout apply to pools whose spec
	// leaves them zero (e.g. command-line defaults under a YAML file).
	ClientConnections int
	ClientTimeout     time.Duration
	// RequestTimeout is every pool's ServerConfig.RequestTimeout (a
	// request not complete this long after its first byte closes the
	// client); zero: DefaultRequestTimeout, negative: never.
	RequestTimeout time.Duration
	// ParkAfter is every pool's ServerConfig.ParkAfter (a client silent
	// this long parks); zero: DefaultParkAfter, negative: never.
	ParkAfter time.Duration
}

// Proxy runs the pools of one configuration, each with its own listener,
// Server and Router, and replaces them on Reload without dropping client
// connections. It is safe for concurrent use.
type Proxy struct {
	cfg     ProxyConfig
	log     *slog.Logger
	now     func() time.Time
	started time.Time

	mu     sync.Mutex // serialises Reload and Shutdown; guards pools
	pools  []*livePool
	closed bool

	ctx    context.Context // ends at Shutdown: stops drains
	cancel context.CancelFunc
	bg     sync.WaitGroup // drains and retiring pools

	reloads, reloadErrors uint64 // under mu
	lastReloadOK          bool
}

// livePool is one running pool.
type livePool struct {
	spec  PoolSpec
	srv   *Server
	ln    net.Listener
	serve chan error // Serve's result

	mu       sync.Mutex
	draining map[*Router]struct{}
	retired  map[string]shardTotals // by shard.Server.Label
}

// ErrReload wraps the reason a new configuration was rejected while
// another one runs; ErrStart the reason the first one could not start.
var (
	ErrReload = errors.New("proxy: reload rejected")
	ErrStart  = errors.New("proxy: cannot start")
)

// rejected wraps err as a failed start when nothing runs yet (first),
// else as a rejected reload, and logs it in the same words.
func (p *Proxy) rejected(first bool, err error) error {
	if first {
		err = fmt.Errorf("%w: %w", ErrStart, err)
		p.log.Error("mcproxy: cannot start", "err", err)
		return err
	}
	err = fmt.Errorf("%w: %w", ErrReload, err)
	p.log.Error("mcproxy: new config rejected, keeping the running one", "err", err)
	return err
}

// NewProxy returns a Proxy serving nothing yet; call Reload with the pools.
func NewProxy(cfg ProxyConfig) *Proxy {
	p := &Proxy{cfg: cfg, log: cfg.Logger, now: cfg.Now, lastReloadOK: true}
	if p.log == nil {
		p.log = slog.Default()
	}
	if p.now == nil {
		p.now = time.Now
	}
	p.started = p.now()
	p.ctx, p.cancel = context.WithCancel(context.Background())
	return p
}

// Addr returns the listener address of the named pool, or nil.
func (p *Proxy) Addr(pool string) net.Addr {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, lp := range p.pools {
		if lp.spec.Name == pool {
			return lp.ln.Addr()
		}
	}
	return nil
}

// Pools returns the running pools' specs in configuration order.
func (p *Proxy) Pools() []PoolSpec {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]PoolSpec, len(p.pools))
	for i, lp := range p.pools {
		out[i] = lp.spec
	}
	return out
}

// Draining returns the number of Routers replaced by reloads that are
// still finishing their calls (see Router.Drain).
func (p *Proxy) Draining() int {
	p.mu.Lock()
	pools := p.pools
	p.mu.Unlock()
	n := 0
	for _, lp := range pools {
		lp.mu.Lock()
		n += len(lp.draining)
		lp.mu.Unlock()
	}
	return n
}

// Server returns the named pool's Server, or nil.
func (p *Proxy) Server(pool string) *Server {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, lp := range p.pools {
		if lp.spec.Name == pool {
			return lp.srv
		}
	}
	return nil
}

// ReloadFile reads and parses a nutcracker YAML file and applies it with
// Reload. A file that does not parse, or pools that cannot start, leave the
// running configuration as it was; the reason is logged and returned.
func (p *Proxy) ReloadFile(path string) error {
	data, err := os.ReadFile(path)
	if err == nil {
		var specs []PoolSpec
		if specs, err = ParseConfig(data, p.log); err == nil {
			return p.Reload(specs)
		}
	}
	p.mu.Lock()
	p.reloadErrors++
	p.lastReloadOK = false
	first := len(p.pools) == 0
	p.mu.Unlock()
	return p.rejected(first, fmt.Errorf("%s: %w", path, err))
}

// Reload makes the running pools match specs, without dropping client
// connections of pools whose listen address is unchanged:
//
//   - a pool whose shards or routing settings changed gets a new Router;
//     requests read from then on use it, requests in flight finish on the
//     old one, which is closed once drained (see Router.Drain);
//   - client_connections and client_timeout change in place;
//   - a new pool starts listening; a removed pool, or one whose listen
//     address changed, stops accepting and is shut down gracefully (its
//     clients are disconnected after their in-flight requests).
//
// Everything that can fail (validation, building Routers, opening
// listeners) happens before anything changes: on error the running
// configuration stays, the reason is logged, and the error wraps ErrReload
// (and ErrConfig for a bad spec). The first call starts the proxy: its
// error wraps ErrStart instead.
func (p *Proxy) Reload(specs []PoolSpec) (err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	first := len(p.pools) == 0
	defer func() {
		if err != nil {
			p.reloadErrors++
			p.lastReloadOK = false
			err = p.rejected(first, err)
		}
	}()
	if p.closed {
		return ErrServerClosed
	}
	if specs, err = p.checkSpecs(specs); err != nil {
		return err
	}
	steps, err := p.prepare(specs)
	if err != nil {
		return err
	}
	p.commit(steps)
	return nil
}

// checkSpecs returns specs with the proxy's client defaults filled in,
// once each is valid and no two share a name or listen address.
func (p *Proxy) checkSpecs(specs []PoolSpec) ([]PoolSpec, error) {
	if len(specs) == 0 {
		return nil, fmt.Errorf("%w: no pools", ErrConfig)
	}
	specs = slices.Clone(specs)
	for i := range specs {
		if specs[i].ClientConnections == 0 {
			specs[i].ClientConnections = p.cfg.ClientConnections
		}
		if specs[i].ClientTimeout == 0 {
			specs[i].ClientTimeout = p.cfg.ClientTimeout
		}
	}
	for i, s := range specs {
		if err := s.Validate(); err != nil {
			return nil, err
		}
		for _, q := range specs[:i] {
			if q.Name == s.Name || q.conflicts(s) {
				return nil, fmt.Errorf("%w: pools %q and %q share a name or listen address", ErrConfig, q.Name, s.Name)
			}
		}
	}
	return specs, nil
}

// reloadStep is what Reload does for one pool of the new configuration.
type reloadStep struct {
	spec PoolSpec
	old  *livePool // nil: a new pool
	rt   *Router   // nil: keep old's Router
	ln   net.Listener
}

// prepare does, for every pool, what can fail: a new Router for a pool
// that is new or routes differently, a listener for a new pool. On error
// it closes what it opened.
func (p *Proxy) prepare(specs []PoolSpec) ([]reloadStep, error) {
	steps := make([]reloadStep, len(specs))
	undo := func() {
		for _, st := range steps {
			if st.rt != nil {
				_ = st.rt.Close()
			}
			if st.ln != nil {
				_ = st.ln.Close()
			}
		}
	}
	for i, s := range specs {
		st := reloadStep{spec: s}
		for _, lp := range p.pools {
			if lp.spec.Name == s.Name && listenKey(lp.spec.listen()) == listenKey(s.listen()) {
				st.old = lp
			}
		}
		var err error
		if st.old == nil || !st.old.spec.sameRouting(s) {
			if st.rt, err = p.newRouter(s); err != nil {
				undo()
				return nil, fmt.Errorf("pool %q: %w", s.Name, err)
			}
			if st.old != nil {
				p.warm(s, st.rt) // traffic switches to it at once: connect first
			}
		}
		if st.old == nil {
			if st.ln, err = Listen(s.listen()); err != nil {
				steps[i] = st
				undo()
				return nil, fmt.Errorf("pool %q: %w", s.Name, err)
			}
		}
		steps[i] = st
	}
	return steps, nil
}

// commit applies the prepared steps; nothing in it fails. Pools not in
// steps are retired, new ones start, kept ones get their new limits and
// Router (the old one drains).
func (p *Proxy) commit(steps []reloadStep) {
	kept := make(map[*livePool]bool)
	for _, st := range steps {
		if st.old != nil {
			kept[st.old] = true
		}
	}
	for _, lp := range p.pools {
		if !kept[lp] {
			p.log.Info("mcproxy: pool removed, shutting it down", "pool", lp.spec.Name, "listen", lp.spec.listen())
			p.retire(lp)
		}
	}
	next := make([]*livePool, 0, len(steps))
	for _, st := range steps {
		lp := st.old
		if lp == nil {
			lp = p.start(st.spec, st.rt, st.ln)
			p.log.Info("mcproxy: listening", "pool", st.spec.Name, "addr", st.ln.Addr().String(),
				"shards", len(st.spec.Servers), "distribution", st.spec.Distribution, "hash_tag", st.spec.HashTag)
		} else {
			p.reconfigure(lp, st)
		}
		next = append(next, lp)
	}
	p.pools = next
	p.reloads++
	p.lastReloadOK = true
}

// reconfigure gives a kept pool its new spec: client limits, the socket
// mode of a Unix listener, and a new Router when routing changed.
func (p *Proxy) reconfigure(lp *livePool, st reloadStep) {
	lp.srv.SetClientLimits(st.spec.ClientConnections, st.spec.ClientTimeout)
	if network, path, mode, _ := ParseListen(st.spec.listen()); network == "unix" && mode != 0 && st.spec.listen() != lp.spec.listen() {
		if err := os.Chmod(path, mode); err != nil {
			p.log.Warn("mcproxy: cannot change the socket's mode", "pool", st.spec.Name, "path", path, "err", err)
		}
	}
	if st.rt != nil {
		old := lp.srv.SetRouter(st.rt)
		p.drain(lp, old)
		p.log.Info("mcproxy: pool reconfigured, old shards drain", "pool", st.spec.Name,
			"shards", len(st.spec.Servers), "was", old.Len())
	}
	lp.mu.Lock()
	lp.spec = st.spec
	lp.mu.Unlock()
}

// warm opens the connections of rt, which replaces a running pool's
// Router, before it takes traffic (see Warmer); a shard that does not
// answer is logged and left to its health.
func (p *Proxy) warm(s PoolSpec, rt *Router) {
	for i, err := range rt.Warm(p.ctx) {
		p.log.Warn("mcproxy: a shard did not answer before taking traffic", "pool", s.Name,
			"shard", i, "addr", s.Servers[i].Addr, "err", err)
	}
}

func (p *Proxy) newRouter(s PoolSpec) (*Router, error) {
	rc := s.RouterConfig()
	rc.Logger = p.log.With("pool", s.Name)
	if nb := p.cfg.NewBackend; nb != nil {
		name := s.Name
		rc.NewBackend = func(i int, sv shard.Server, h BackendHooks) (Backend, error) {
			return nb(name, i, sv, h)
		}
	}
	return NewRouter(rc)
}

// start serves a new pool; p.mu is held.
func (p *Proxy) start(s PoolSpec, rt *Router, ln net.Listener) *livePool {
	srv, err := NewServer(ServerConfig{
		Router: rt, Limits: p.cfg.Limits, Version: p.cfg.Version, MaxPipeline: p.cfg.MaxPipeline,
		Logger: p.log.With("pool", s.Name), MaxClients: s.ClientConnections, ClientIdleTimeout: s.ClientTimeout,
		RequestTimeout: p.cfg.RequestTimeout, ParkAfter: p.cfg.ParkAfter,
	})
	if err != nil {
		panic(err) // only for a nil Router
	}
	lp := &livePool{spec: s, srv: srv, ln: ln, serve: make(chan error, 1),
		draining: make(map[*Router]struct{}), retired: make(map[string]shardTotals)}
	go func() { lp.serve <- srv.Serve(ln) }()
	return lp
}

// drain closes old once its calls are done, folding its counters into the
// pool's totals.
func (p *Proxy) drain(lp *livePool, old *Router) {
	lp.mu.Lock()
	lp.draining[old] = struct{}{}
	lp.mu.Unlock()
	timeout := p.cfg.DrainTimeout
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	name := lp.spec.Name
	p.bg.Add(1)
	go func() {
		defer p.bg.Done()
		ctx, cancel := context.WithTimeout(p.ctx, timeout)
		defer cancel()
		if err := old.Drain(ctx, p.cfg.DrainQuiet); err != nil && p.ctx.Err() == nil {
			p.log.Warn("mcproxy: old shards closed before their calls finished", "pool", name, "in_flight", old.InFlight(), "err", err)
		}
		lp.mu.Lock()
		delete(lp.draining, old)
		servers := old.m.Servers()
		for i := range servers {
			t := lp.retired[servers[i].Label()]
			t.add(old.totals(i))
			lp.retired[servers[i].Label()] = t
		}
		lp.mu.Unlock()
	}()
}

// retire shuts a removed pool down in the background; p.mu is held.
func (p *Proxy) retire(lp *livePool) {
	timeout := p.cfg.DrainTimeout
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	p.bg.Add(1)
	go func() {
		defer p.bg.Done()
		ctx, cancel := context.WithTimeout(p.ctx, timeout)
		defer cancel()
		_ = lp.srv.Shutdown(ctx)
		<-lp.serve
		_ = lp.srv.Router().Close()
	}()
}

// Shutdown stops every pool: listeners close, clients stop being read,
// requests already read are answered, then connections and shards close.
// When ctx ends first, the rest is closed at once. Reload fails after it.
func (p *Proxy) Shutdown(ctx context.Context) error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	pools := p.pools
	p.mu.Unlock()
	var wg sync.WaitGroup
	errs := make([]error, len(pools))
	for i, lp := range pools {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = lp.srv.Shutdown(ctx)
			<-lp.serve
			_ = lp.srv.Router().Close()
		}()
	}
	wg.Wait()
	p.cancel() // stops drains: their Routers close now
	p.bg.Wait()
	return errors.Join(errs...)
}

// Wait returns the first error of a pool's Serve other than
// ErrServerClosed, or nil when ctx ends.
func (p *Proxy) Wait(ctx context.Context) error {
	for {
		p.mu.Lock()
		pools := p.pools
		p.mu.Unlock()
		for _, lp := range pools {
			select {
			case err := <-lp.serve:
				lp.serve <- err // keep it for Shutdown
				if !errors.Is(err, ErrServerClosed) {
					return fmt.Errorf("pool %q: %w", lp.spec.Name, err)
				}
			default:
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(200 * time.Millisecond):
		}
	}
}
