package openloop

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/poplimit/poplimit/counter"
	"github.com/poplimit/poplimit/counter/store"
	"github.com/poplimit/poplimit/pop"
)

// Paths of RunOpenLoop, in the order they run each round.
const (
	// PathGenerator sends to nothing (the op returns at once): its CPU
	// per request is the generator's own cost, its lateness the
	// schedule's error.
	pathGenerator = "generator"
	// PathFloor is the client's bare incr to one memcached shard: the
	// round trip no design avoids.
	pathFloor = "floor"
	// PathNutcracker and PathMcproxy are the same incr through Debian's
	// Twemproxy and through mcproxy, over the same 3 shards.
	pathNutcracker = "nutcracker"
	pathMcproxy    = "mcproxy"
	// pathPopGomemcache and pathPopPipe are a full pop decision (policy
	// match, identity, sliding window in the store) through mcproxy, over
	// gomemcache and over the pipelining PipeStore with one multiplexed
	// connection (edge's and rls's default client).
	pathPopGomemcache = "pop-gomemcache"
	pathPopPipe       = "pop-pipe"
)

// AllOpenPaths is every path, in run order.
var allOpenPaths = []string{pathGenerator, pathFloor, pathHop, pathNutcracker, pathMcproxy, pathPopGomemcache, pathPopPipe, pathRLS}

// errOpenLoop reports an open-loop run that could not be made.
var errOpenLoop = errors.New("bench: open loop")

// openPath is one measured path: its request, the processes serving it
// (their CPU and context switches are charged to it), and what to close.
type openPath struct {
	Name, Detail string
	Op           openOp
	// Proxy is the proxy's pid (0 for none); Shards the memcached pids
	// the path's keys reach; Server the decision's server (rls), if not
	// this process.
	Proxy  int
	Shards []int
	Server []int
	close  func()
}

// openTargets are the processes RunOpenLoop started.
type openTargets struct {
	shardAddr string // shard 1 of 3
	ncAddr    string
	mcAddr    string
	shardPids []int
	ncPid     int
	mcPid     int
	mcDetail  string
	quantity  int64
	keys      []string
	// rlsAddr, rlsPid, rlsDetail: the rls process (PathRLS only).
	rlsAddr   string
	rlsPid    int
	rlsDetail string
	// hopAddr, hopPid: the bare forwarder to shard 1 (PathHop only).
	hopAddr string
	hopPid  int
}

// incrOp is one gomemcache incr of a Zipf key (created on its first miss,
// as a counter does): the raw request of the floor and proxy paths.
func incrOp(st counter.Store, keys []string) openOp {
	return func(ctx context.Context, _ int, k uint64) error {
		key := keys[k%uint64(len(keys))]
		_, err := st.Incr(ctx, key, 1)
		if errors.Is(err, counter.ErrNotFound) {
			if err = st.Add(ctx, key, []byte("1"), time.Hour); errors.Is(err, counter.ErrNotStored) {
				err = nil // another worker created it meanwhile
			}
		}
		return err
	}
}

// openPolicy is the pop policy of the decision paths: one sliding window
// per API key, quantity per second.
const openPolicy = `version: 1
headers: both
api_key: {header: X-API-Key}
tiers:
  t: {limits: [{name: burst, algorithm: sliding_window, quantity: %d, window: 1s}]}
policies:
  - {name: api, routes: ["/"], identity: [api_key, route], tier: t}
`

// popOp is a full pop decision over store: each decision borrows a
// request from a pool (its header rewritten per decision), as many as
// are in flight at once. A fail-open decision (the store did not answer)
// is an error.
func popOp(store counter.Store, quantity int64, keys []string) (openOp, error) {
	l, err := pop.New(pop.Config{
		NewShared:     func(lim counter.Limit) (counter.Allower, error) { return counter.New(store, lim) },
		NewLocal:      func(lim counter.Limit) (counter.Allower, error) { return counter.NewLocal(lim) },
		StoreDeadline: time.Second,
		Logger:        slog.New(slog.DiscardHandler),
	})
	if err != nil {
		return nil, err
	}
	if err := l.LoadBytes("openloop.yml", fmt.Appendf(nil, openPolicy, quantity)); err != nil {
		return nil, err
	}
	u := &url.URL{Path: "/items"}
	reqs := sync.Pool{New: func() any {
		return &http.Request{Method: "GET", URL: u, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
			Host: "edge.test", RemoteAddr: "192.0.2.1:1000", Header: http.Header{"X-Api-Key": {""}}}
	}}
	return func(ctx context.Context, _ int, k uint64) error {
		r := reqs.Get().(*http.Request)
		defer reqs.Put(r)
		r.Header["X-Api-Key"][0] = keys[k%uint64(len(keys))]
		if d := l.Decide(ctx, r, time.Now()); d.Reason == pop.ReasonFailOpen {
			return errOpenLoop
		}
		return nil
	}, nil
}

// openPaths builds the named paths over t. The closed-loop capacity
// probe uses one path more, as many workers as the schedule's.
func openPaths(names []string, t *openTargets) ([]*openPath, error) {
	gomc := func(addr string) counter.Store {
		sh, _ := store.New(store.Config{Memcached: []string{addr}, Client: store.Gomemcache, Timeout: time.Second}) // a gomemcache Config New never refuses
		return sh.Store()
	}
	var out []*openPath
	for _, name := range names {
		p := &openPath{Name: name, close: func() {}}
		switch name {
		case pathGenerator:
			p.Detail = "no request: the generator alone"
			p.Op = func(context.Context, int, uint64) error { return nil }
		case pathFloor:
			p.Detail, p.Shards = "gomemcache incr to memcached shard 1 of 3, no proxy", t.shardPids[:1]
			p.Op = incrOp(gomc(t.shardAddr), t.keys)
		case pathHop:
			p.Detail, p.Proxy, p.Shards = "gomemcache incr through a bare TCP forwarder (bench/fixture/tcphop: read, write, nothing parsed) to the floor's shard", t.hopPid, t.shardPids[:1]
			p.Op = incrOp(gomc(t.hopAddr), t.keys)
		case pathNutcracker:
			p.Detail, p.Proxy, p.Shards = "gomemcache incr through nutcracker 0.5.0 (3 shards)", t.ncPid, t.shardPids
			p.Op = incrOp(gomc(t.ncAddr), t.keys)
		case pathMcproxy:
			p.Detail, p.Proxy, p.Shards = "gomemcache incr through "+t.mcDetail, t.mcPid, t.shardPids
			p.Op = incrOp(gomc(t.mcAddr), t.keys)
		case pathPopGomemcache, pathPopPipe:
			var st counter.Store = gomc(t.mcAddr)
			p.Detail = "pop decision (sliding window) over gomemcache through mcproxy (edge --store-client gomemcache)"
			if name == pathPopPipe {
				sh, err := store.New(store.Config{Memcached: []string{t.mcAddr}, Timeout: time.Second})
				if err != nil {
					return nil, fmt.Errorf("%w: %s: %v", errOpenLoop, name, err)
				}
				st, p.close = sh.Store(), func() { sh.Close() }
				p.Detail = "pop decision (sliding window) over PipeStore, one multiplexed connection, through mcproxy (edge's and rls's default: --store-client pipe --store-multiplex 1)"
			}
			op, err := popOp(st, t.quantity, t.keys)
			if err != nil {
				return nil, fmt.Errorf("%w: %s: %v", errOpenLoop, name, err)
			}
			p.Op, p.Proxy, p.Shards = op, t.mcPid, t.shardPids
		case pathRLS:
			op, closeFn, err := rlsOp(t.rlsAddr, t.keys)
			if err != nil {
				return nil, fmt.Errorf("%w: %s: %v", errOpenLoop, name, err)
			}
			p.Op, p.close, p.Detail = op, closeFn, t.rlsDetail
			p.Proxy, p.Shards, p.Server = t.mcPid, t.shardPids, []int{t.rlsPid}
		default:
			return nil, fmt.Errorf("%w: unknown path %q (want one of %v)", errOpenLoop, name, allOpenPaths)
		}
		out = append(out, p)
	}
	return out, nil
}

// openKeys returns the n identity strings of the Zipf key space.
func openKeys(n uint64) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = "ol:k" + strconv.Itoa(i)
	}
	return keys
}
