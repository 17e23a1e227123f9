package counter_test

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/poplimit/poplimit/bench/fixture"
	"github.com/poplimit/poplimit/bench/fixture/procs"
	"github.com/poplimit/poplimit/counter"
	"github.com/poplimit/poplimit/counter/memcached"
)

// exactLimits are the limits the zero-over-admission tests burst at. The
// sliding window is included: with a fresh key and one instant its
// estimate is the exact count too.
var exactLimits = []struct {
	name  string
	limit counter.Limit
}{
	{"fixed-count", counter.Limit{Algorithm: counter.FixedWindow, Quantity: 200, Window: time.Minute}},
	{"fixed-refund", counter.Limit{Algorithm: counter.FixedWindow, Quantity: 200, Window: time.Minute, OnReject: counter.Refund}},
	{"bucket-count", counter.Limit{Algorithm: counter.TokenBucket, Quantity: 200, Window: time.Hour}},
	{"bucket-refund", counter.Limit{Algorithm: counter.TokenBucket, Quantity: 200, Window: time.Hour, OnReject: counter.Refund}},
	{"sliding-count", counter.Limit{Quantity: 200, Window: time.Minute}},
}

// burst sends total requests of 1 unit for key at now from g goroutines
// and returns how many were admitted. ErrContention is retried (the
// request was neither admitted nor counted); any other error fails.
func burst(a counter.Allower, key string, now time.Time, g, total int) (admitted, contention int64, err error) {
	var next atomic.Int64
	var adm, cont atomic.Int64
	var wg sync.WaitGroup
	var mu sync.Mutex
	for i := 0; i < g; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(total) {
				for {
					r, e := a.AllowN(ctx, key, now, 1)
					if errors.Is(e, counter.ErrContention) {
						cont.Add(1)
						continue
					}
					if e != nil {
						mu.Lock()
						err = e
						mu.Unlock()
						return
					}
					if r.Allowed {
						adm.Add(1)
					}
					break
				}
			}
		}()
	}
	wg.Wait()
	return adm.Load(), cont.Load(), err
}

// TestZeroOverAdmissionGoroutines: 64 goroutines of one process burst 10×
// the allowance at one key; every exact algorithm admits exactly the
// allowance, on every store.
func TestZeroOverAdmissionGoroutines(t *testing.T) {
	for _, b := range backends(t) {
		if b.store == nil {
			continue
		}
		for _, el := range exactLimits {
			t.Run(b.name+"/"+el.name, func(t *testing.T) {
				lim, err := counter.New(b.store(), el.limit)
				if err != nil {
					t.Fatal(err)
				}
				want := el.limit.Quantity
				got, cont, err := burst(lim, uniqueKey(t), t0, 64, int(10*want))
				if err != nil {
					t.Fatal(err)
				}
				if got != want {
					t.Fatalf("admitted %d, want exactly %d", got, want)
				}
				t.Logf("admitted %d; bucket stats %+v, contention errors retried %d", got, lim.BucketStats(), cont)
			})
		}
	}
}

const workerEnv = "COUNTER_TEST_WORKER"

// TestZeroOverAdmissionProcesses is the integration test: 8 worker
// processes × 32 goroutines (over gomemcache, PipeStore, and PipeStore
// multiplexing 2 connections, whose writer holds calls back to batch them,
// in turn) burst 10× the allowance at one key through
// mcproxy in front of 3 memcached shards. Each worker is this test binary
// re-executed; they share the instant now, so no refill or window change
// blurs the count.
func TestZeroOverAdmissionProcesses(t *testing.T) {
	if os.Getenv(workerEnv) != "" {
		t.Skip("inside a worker")
	}
	if testing.Short() {
		t.Skip("-short")
	}
	shards := fixture.Memcached(t, 3)
	addr, via := throughMcproxy(t, shards)
	t.Logf("target %s (%s)", addr, via)
	const workers, goroutines = 8, 32
	for _, el := range exactLimits {
		t.Run(el.name, func(t *testing.T) {
			key := uniqueKey(t)
			l := el.limit
			l.Quantity = 128 // 1280 requests: 5 per goroutine
			total := 10 * l.Quantity
			var cmds []*exec.Cmd
			var outs []*strings.Builder
			for p := 0; p < workers; p++ {
				cmd := exec.Command(os.Args[0], "-test.run=^TestWorkerProcess$", "-test.v")
				var out strings.Builder
				cmd.Stdout, cmd.Stderr = &out, &out
				client := []string{"pipe", "gomemcache", "pipe-mux"}[p%3]
				cmd.Env = append(os.Environ(), workerEnv+"=1", "COUNTER_CLIENT="+client,
					"COUNTER_ADDR="+addr, "COUNTER_KEY="+key,
					"COUNTER_LIMIT="+el.name, "COUNTER_QUANTITY="+strconv.FormatInt(l.Quantity, 10),
					"COUNTER_NOW="+strconv.FormatInt(t0.UnixNano(), 10),
					"COUNTER_G="+strconv.Itoa(goroutines),
					"COUNTER_N="+strconv.FormatInt(total/workers, 10))
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				cmds, outs = append(cmds, cmd), append(outs, &out)
			}
			var admitted, contention, coalesced int64
			for i, cmd := range cmds {
				if err := cmd.Wait(); err != nil {
					t.Fatalf("worker %d: %v\n%s", i, err, outs[i])
				}
				a, c, co, err := parseWorker(outs[i].String())
				if err != nil {
					t.Fatalf("worker %d: %v\n%s", i, err, outs[i])
				}
				admitted += a
				contention += c
				coalesced += co
			}
			if admitted != l.Quantity {
				t.Fatalf("%d processes × %d goroutines, %d requests: admitted %d, want exactly %d",
					workers, goroutines, total, admitted, l.Quantity)
			}
			t.Logf("%s: admitted exactly %d of %d; contention retries %d; decisions coalesced %d", el.name, admitted, total, contention, coalesced)
		})
	}
}

// parseWorker reads a worker's RESULT line; coalesced is how many of its
// decisions shared another's store call (counter's coalescing, always on).
func parseWorker(out string) (admitted, contention, coalesced int64, err error) {
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		if _, e := fmt.Sscanf(strings.TrimSpace(sc.Text()), "RESULT admitted=%d contention=%d coalesced=%d", &admitted, &contention, &coalesced); e == nil {
			return admitted, contention, coalesced, nil
		}
	}
	return 0, 0, 0, errors.New("no RESULT line")
}

// TestWorkerProcess is the body of one worker process (skipped unless
// re-executed by TestZeroOverAdmissionProcesses).
func TestWorkerProcess(t *testing.T) {
	if os.Getenv(workerEnv) == "" {
		t.Skip("only run as a worker process")
	}
	var l counter.Limit
	for _, el := range exactLimits {
		if el.name == os.Getenv("COUNTER_LIMIT") {
			l = el.limit
		}
	}
	l.Quantity, _ = strconv.ParseInt(os.Getenv("COUNTER_QUANTITY"), 10, 64)
	nowNs, _ := strconv.ParseInt(os.Getenv("COUNTER_NOW"), 10, 64)
	g, _ := strconv.Atoi(os.Getenv("COUNTER_G"))
	n, _ := strconv.Atoi(os.Getenv("COUNTER_N"))
	var st counter.Store = memcached.NewStore(memcached.NewClient(memcached.Config{
		Servers: []string{os.Getenv("COUNTER_ADDR")}, Timeout: 5 * time.Second}))
	switch os.Getenv("COUNTER_CLIENT") {
	case "pipe":
		st = memcached.NewPipeStore(memcached.PipeConfig{Addr: os.Getenv("COUNTER_ADDR"), Timeout: 5 * time.Second})
	case "pipe-mux":
		st = memcached.NewPipeStore(memcached.PipeConfig{Addr: os.Getenv("COUNTER_ADDR"), Timeout: 5 * time.Second, Multiplex: 2})
	}
	lim, err := counter.New(st, l)
	if err != nil {
		t.Fatal(err)
	}
	admitted, cont, err := burst(lim, os.Getenv("COUNTER_KEY"), time.Unix(0, nowNs), g, n)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("RESULT admitted=%d contention=%d coalesced=%d\n", admitted, cont, lim.Coalesced())
}

// throughMcproxy starts cmd/mcproxy (built once per test binary by
// fixture.Binary) in front of the shards and returns its address. A
// command that does not build fails the test: the test claims mcproxy's
// behaviour, so it never falls back to memcached directly.
func throughMcproxy(t *testing.T, shards []*procs.Memcached) (addr, via string) {
	t.Helper()
	// A generous backend timeout: 256 race-instrumented goroutines on a
	// shared 2-core machine must not turn into SERVER_ERROR timeouts (a
	// timed-out incr may have been applied, which would blur the count).
	p := fixture.Mcproxy(t, fixture.Binary(t, "mcproxy"), "", fixture.Addrs(shards), "--timeout", "10s")
	return p.Addr, "through mcproxy, " + strconv.Itoa(len(shards)) + " memcached shards"
}

// TestMain removes the binaries fixture.Binary built.
func TestMain(m *testing.M) { os.Exit(fixture.Main(m)) }
