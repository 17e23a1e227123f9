package bench

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/poplimit/poplimit/counter"
)

// MemoryConfig configures RunMemory. Zero means default.
type MemoryConfig struct {
	// Limiters written per configuration; default 10,000. A sliding window
	// of precision N costs N+1 decisions and items per limiter; each shard
	// gets memory for 300 bytes per item (memcached's -m, at least 64 MB),
	// so nothing is evicted (a run that saw evictions fails).
	Limiters int
	// Algorithms to measure; default fixed window, token bucket and sliding
	// window.
	Algorithms []counter.Algorithm
	// Precisions of the sliding window; default 1, 4, 12, 60.
	Precisions []int
	// Window of every limit; default 2m (keys as long as 1m's: the window
	// and the window id are part of the key). Items live one window (fixed)
	// or a window and a sub-window (sliding) after their write (memcached
	// TTLs run on real time), so writing must finish within that or the
	// run fails.
	Window time.Duration
	// Parallel decisions in flight; default 16.
	Parallel int
	// Progress is called with limiters done and total per configuration.
	Progress func(done, total int)
}

// MemoryRow is memcached's own accounting for one configuration.
type memoryRow struct {
	Algorithm string `json:"algorithm"`
	Precision int    `json:"precision"`
	Limiters  int    `json:"limiters"`
	// Items is memcached's curr_items over the shards; ItemsPerLimiter is
	// Items / Limiters (the steady state: every window the algorithm keeps
	// alive has been written). A token bucket's item lives only until its
	// bucket is full again (TTL = theoretical arrival time − now + 1s), so
	// its count drops below one per limiter as items expire during the run.
	Items           int64   `json:"items"`
	ItemsPerLimiter float64 `json:"items_per_limiter"`
	// BytesPerItem is memcached's "bytes" stat / curr_items: key, value
	// and item header as memcached counts them.
	BytesPerItem float64 `json:"bytes_per_item"`
	// SlabBytesPerLimiter is the slab memory used (chunk size × chunks in
	// use, from "stats slabs") per limiter: what a limiter really costs.
	SlabBytesPerLimiter float64 `json:"slab_bytes_per_limiter"`
	// ChunkSizes lists the slab classes in use (bytes per chunk).
	ChunkSizes []int64 `json:"chunk_sizes"`
	// Seconds is how long writing the limiters took.
	Seconds float64 `json:"seconds"`
}

// memoryReport is the result of RunMemory.
type memoryReport struct {
	PoP  string       `json:"pop"`
	Rows []*memoryRow `json:"rows"`
}

// RunMemory writes limiters through a PoP of 3 real memcached shards and
// mcproxy (a fresh PoP per configuration) and reads memcached's own
// accounting: items, bytes, slab chunks. It needs real memcached.
func RunMemory(ctx context.Context, env *Env, cfg MemoryConfig) (Result, error) {
	r, err := runMemory(ctx, env, cfg)
	if r == nil {
		return nil, err
	}
	return r, err
}

// runMemory is RunMemory returning the report itself.
func runMemory(ctx context.Context, env *Env, cfg MemoryConfig) (*memoryReport, error) {
	if env.Store != StoreMemcached {
		return nil, fmt.Errorf("%w: memory accounting needs real memcached shards", ErrNoPoP)
	}
	defaultTo(&cfg.Limiters, 10000)
	if len(cfg.Precisions) == 0 {
		cfg.Precisions = []int{1, 4, 12, 60}
	}
	defaultTo(&cfg.Window, 2*time.Minute)
	defaultTo(&cfg.Parallel, 16)
	type conf struct {
		alg  counter.Algorithm
		prec int
	}
	if len(cfg.Algorithms) == 0 {
		cfg.Algorithms = []counter.Algorithm{counter.FixedWindow, counter.TokenBucket, counter.SlidingWindow}
	}
	var confs []conf
	for _, a := range cfg.Algorithms {
		if a != counter.SlidingWindow {
			confs = append(confs, conf{a, 1})
			continue
		}
		for _, p := range cfg.Precisions {
			confs = append(confs, conf{a, p})
		}
	}
	const shards = 3
	rep := &memoryReport{}
	for i, c := range confs {
		items := int64(cfg.Limiters) * int64(c.prec+1)
		mb := max(64, int(items*300/shards>>20)+1)
		p, err := env.Launch(ctx, PoPConfig{Name: fmt.Sprintf("memory%d", i), Shards: shards, Proxies: 1, ShardMemoryMB: mb})
		if err != nil {
			return nil, err
		}
		rep.PoP = p.Describe()
		row, err := measureMemory(ctx, p, c.alg, c.prec, cfg)
		p.close()
		if err != nil {
			return nil, err
		}
		rep.Rows = append(rep.Rows, row)
	}
	return rep, nil
}

func measureMemory(ctx context.Context, p *PoP, alg counter.Algorithm, prec int, cfg MemoryConfig) (*memoryRow, error) {
	route := Route{Path: "/api", Quantity: 1000, Window: cfg.Window}
	servers, direct := p.WorkerServers()
	in, err := NewInproc([]Route{route}, InprocConfig{Servers: servers, Direct: direct, Workers: 4, Algorithm: alg, Precision: prec})
	if err != nil {
		return nil, err
	}
	steps := 1 // decisions per limiter
	sub := cfg.Window
	if alg == counter.SlidingWindow {
		steps = prec + 1
		sub = cfg.Window / time.Duration(prec)
	}
	n := cfg.Limiters
	// Real time: memcached expires items on its own clock; every write
	// of a limiter happens now, at instants one sub-window apart.
	base := time.Now()
	var mu sync.Mutex
	var first firstError
	done := 0
	g := new(errgroup.Group)
	g.SetLimit(max(1, cfg.Parallel))
	for i := 0; i < n && ctx.Err() == nil; i++ {
		g.Go(func() error {
			id := "m" + strconv.Itoa(i)
			for s := 0; s < steps; s++ {
				// A store timeout on a loaded machine is retried: the item is
				// what is measured, not the decision.
				var err error
				for try := 0; try < 3 && (try == 0 || err != nil) && ctx.Err() == nil; try++ {
					_, err = in.Decide(ctx, i+s, id, route.Path, base.Add(time.Duration(s-steps+1)*sub))
				}
				first.set(err)
			}
			mu.Lock()
			done++
			if cfg.Progress != nil && done%1000 == 0 {
				cfg.Progress(done, n)
			}
			mu.Unlock()
			return nil
		})
	}
	_ = g.Wait() // every call returns nil
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if first.err != nil {
		return nil, fmt.Errorf("bench: memory: %w", first.err)
	}
	// An item lives its TTL after its write: the window (fixed), the
	// window plus a sub-window (sliding), each plus a second.
	took, life := time.Since(base), cfg.Window
	if alg == counter.SlidingWindow {
		life += sub
	}
	if alg != counter.TokenBucket && took >= life {
		return nil, fmt.Errorf("bench: memory: writing %d limiters took %v, longer than an item lives (%v): items expired before they were counted (use a longer window)",
			n, took.Round(time.Second), life)
	}
	row := &memoryRow{Algorithm: AlgorithmName(alg), Precision: prec, Limiters: n, Seconds: took.Seconds()}
	if alg != counter.SlidingWindow {
		row.Precision = 0
	}
	var bytes, slab, evictions int64
	chunks := map[int64]bool{}
	for _, s := range p.Shards {
		st, err := serverStats(s.Direct, 2*time.Second)
		if err != nil {
			return nil, err
		}
		row.Items += atoi(st["curr_items"])
		bytes += atoi(st["bytes"])
		evictions += atoi(st["evictions"])
		sl, err := slabStats(s.Direct, 2*time.Second)
		if err != nil {
			return nil, err
		}
		for _, c := range sl {
			if c.UsedChunks > 0 {
				slab += c.ChunkSize * c.UsedChunks
				chunks[c.ChunkSize] = true
			}
		}
	}
	if evictions > 0 {
		return nil, fmt.Errorf("bench: memory: memcached evicted %d items: the figures would be wrong", evictions)
	}
	for c := range chunks {
		row.ChunkSizes = append(row.ChunkSizes, c)
	}
	slices.Sort(row.ChunkSizes)
	row.ItemsPerLimiter = float64(row.Items) / float64(n)
	if row.Items > 0 {
		row.BytesPerItem = float64(bytes) / float64(row.Items)
	}
	row.SlabBytesPerLimiter = float64(slab) / float64(n)
	return row, nil
}

func atoi(s string) int64 {
	v, _ := strconv.ParseInt(s, 10, 64)
	return v
}

// Tables returns the human view.
func (r *memoryReport) Tables() []*Table {
	t := &Table{Title: "Bytes per limiter, memcached's own accounting (" + r.PoP + ")",
		Header: []string{"algorithm", "N", "limiters", "items/limiter", "bytes/item", "slab bytes/limiter", "chunk sizes"}}
	for _, x := range r.Rows {
		prec := "-"
		if x.Precision > 0 {
			prec = strconv.Itoa(x.Precision)
		}
		t.Add(x.Algorithm, prec, x.Limiters, x.ItemsPerLimiter, x.BytesPerItem, x.SlabBytesPerLimiter, fmt.Sprint(x.ChunkSizes))
	}
	return []*Table{t}
}
