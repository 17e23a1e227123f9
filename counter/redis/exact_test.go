package redis_test

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
	"github.com/poplimit/poplimit/counter"
	"github.com/poplimit/poplimit/counter/redis"
)

// exactLimits are the limits of counter's zero-over-admission tests (the
// sliding window too: with a fresh key and one instant its estimate is the
// exact count).
var exactLimits = []struct {
	name  string
	limit counter.Limit
}{
	{"fixed-count", counter.Limit{Algorithm: counter.FixedWindow, Quantity: 128, Window: time.Minute}},
	{"fixed-refund", counter.Limit{Algorithm: counter.FixedWindow, Quantity: 128, Window: time.Minute, OnReject: counter.Refund}},
	{"bucket-count", counter.Limit{Algorithm: counter.TokenBucket, Quantity: 128, Window: time.Hour}},
	{"bucket-refund", counter.Limit{Algorithm: counter.TokenBucket, Quantity: 128, Window: time.Hour, OnReject: counter.Refund}},
	{"sliding-count", counter.Limit{Quantity: 128, Window: time.Minute}},
	{"sliding-p10-refund", counter.Limit{Quantity: 128, Window: time.Minute, Precision: 10, OnReject: counter.Refund}},
}

const workerEnv = "REDIS_TEST_WORKER"

// TestZeroOverAdmissionProcesses: 8 worker processes × 32 goroutines burst
// 10× the allowance at one key of the Redis Cluster, all at one instant.
// Every algorithm admits exactly the allowance, and no decision fails
// (there is no compare-and-swap race to lose: the script is atomic on the
// key's master).
func TestZeroOverAdmissionProcesses(t *testing.T) {
	if os.Getenv(workerEnv) != "" {
		t.Skip("inside a worker")
	}
	if testing.Short() {
		t.Skip("-short")
	}
	c := fixture.SharedRedisCluster(t)
	const workers, goroutines = 8, 32
	// Each worker bursts at every limit in turn (one key per limit), so
	// the test starts 8 processes, not 8 per limit.
	key := uniqueKey(t)
	const total = 10 * 128
	var cmds []*exec.Cmd
	var outs []*strings.Builder
	for p := 0; p < workers; p++ {
		cmd := exec.Command(os.Args[0], "-test.run=^TestWorkerProcess$", "-test.v")
		var out strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &out
		cmd.Env = append(os.Environ(), workerEnv+"=1",
			"REDIS_ADDRS="+strings.Join(c.Addrs(), ","), "REDIS_KEY="+key,
			"REDIS_NOW="+strconv.FormatInt(time.Unix(1767225600, 0).UnixNano(), 10),
			"REDIS_G="+strconv.Itoa(goroutines), "REDIS_N="+strconv.Itoa(total/workers))
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds, outs = append(cmds, cmd), append(outs, &out)
	}
	admitted := make([]int64, len(exactLimits))
	for i, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Fatalf("worker %d: %v\n%s", i, err, outs[i])
		}
		a, err := parseWorker(outs[i].String())
		if err != nil {
			t.Fatalf("worker %d: %v\n%s", i, err, outs[i])
		}
		for j := range a {
			admitted[j] += a[j]
		}
	}
	for j, el := range exactLimits {
		if admitted[j] != el.limit.Quantity {
			t.Errorf("%s: %d processes × %d goroutines, %d requests: admitted %d, want exactly %d",
				el.name, workers, goroutines, total, admitted[j], el.limit.Quantity)
			continue
		}
		t.Logf("%s: admitted exactly %d of %d, no failed decision", el.name, admitted[j], total)
	}
}

func parseWorker(out string) ([]int64, error) {
	var got []int64
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		var a int64
		if _, e := fmt.Sscanf(strings.TrimSpace(sc.Text()), "RESULT admitted=%d", &a); e == nil {
			got = append(got, a)
		}
	}
	if len(got) != len(exactLimits) {
		return nil, fmt.Errorf("%d RESULT lines, want %d", len(got), len(exactLimits))
	}
	return got, nil
}

// TestWorkerProcess is the body of one worker process (skipped unless
// re-executed by TestZeroOverAdmissionProcesses): a burst at each limit,
// one RESULT line each, in exactLimits' order.
func TestWorkerProcess(t *testing.T) {
	if os.Getenv(workerEnv) == "" {
		t.Skip("only run as a worker process")
	}
	nowNs, _ := strconv.ParseInt(os.Getenv("REDIS_NOW"), 10, 64)
	g, _ := strconv.Atoi(os.Getenv("REDIS_G"))
	n, _ := strconv.Atoi(os.Getenv("REDIS_N"))
	st, err := redis.New(redis.Config{Addrs: strings.Split(os.Getenv("REDIS_ADDRS"), ","), Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for _, el := range exactLimits {
		a := allower(t, st, el.limit)
		admitted, err := burst(a, os.Getenv("REDIS_KEY")+el.name, time.Unix(0, nowNs), g, n)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Printf("RESULT admitted=%d\n", admitted)
	}
}

// burst sends total requests of 1 unit for key at now from g goroutines and
// returns how many were admitted; any error fails.
func burst(a counter.Allower, key string, now time.Time, g, total int) (int64, error) {
	var next, adm atomic.Int64
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	for i := 0; i < g; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(total) {
				r, err := a.AllowN(ctx, key, now, 1)
				if err != nil {
					mu.Lock()
					first = errors.Join(first, err)
					mu.Unlock()
					return
				}
				if r.Allowed {
					adm.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	return adm.Load(), first
}
