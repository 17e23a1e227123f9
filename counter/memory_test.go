package counter_test

import (
	"bufio"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/poplimit/poplimit/bench/fixture"
	"github.com/poplimit/poplimit/counter"
	"github.com/poplimit/poplimit/counter/memcached"
)

// slabUse returns memcached's slab memory in use (Σ used_chunks ×
// chunk_size) and the chunk sizes of the classes in use.
func slabUse(t *testing.T, addr string) (bytes int64, chunks []string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "stats slabs\r\n")
	size := map[string]int64{}
	used := map[string]int64{}
	r := bufio.NewReader(c)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		line = strings.TrimSpace(line)
		if line == "END" {
			break
		}
		f := strings.Fields(line) // STAT <class>:<name> <value>
		if len(f) != 3 {
			continue
		}
		class, name, ok := strings.Cut(f[1], ":")
		if !ok {
			continue
		}
		v, _ := strconv.ParseInt(f[2], 10, 64)
		switch name {
		case "chunk_size":
			size[class] = v
		case "used_chunks":
			used[class] = v
		}
	}
	for class, u := range used {
		if u > 0 {
			bytes += u * size[class]
			chunks = append(chunks, fmt.Sprintf("%d×%dB", u, size[class]))
		}
	}
	return bytes, chunks
}

// TestBytesPerLimiter measures memcached's own slab accounting for
// two-counter sliding-window limiters on IPv4 identities (issue 7: at
// most 192 bytes, two items in the 96-byte class), and for the other
// algorithms.
func TestBytesPerLimiter(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	limiters := 5000
	if raceEnabled {
		limiters = 1000
	}
	for _, tc := range []struct {
		name  string
		limit counter.Limit
		max   int64 // bytes per limiter; 0: report only
	}{
		{"sliding", counter.Limit{Quantity: 100, Window: time.Minute}, 192},
		{"sliding-p4", counter.Limit{Quantity: 100, Window: time.Minute, Precision: 4}, 0},
		{"fixed", counter.Limit{Algorithm: counter.FixedWindow, Quantity: 100, Window: time.Minute}, 96},
		{"bucket", counter.Limit{Algorithm: counter.TokenBucket, Quantity: 100, Window: time.Minute}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mc := fixture.Memcached(t, 1)
			st := memcached.NewStore(memcached.NewClient(memcached.Config{
				Servers: []string{mc[0].Addr}, Timeout: time.Second}))
			lim, err := counter.New(st, tc.limit)
			if err != nil {
				t.Fatal(err)
			}
			base, _ := slabUse(t, mc[0].Addr)
			// Every limiter counts in the windows a live limiter holds:
			// two for the two-counter sliding window, p+1 with precision
			// p, one for the fixed window and the bucket. Counts of up to
			// 3 digits.
			now := time.Now()
			steps := 1
			if tc.limit.Algorithm == counter.SlidingWindow {
				steps = max(1, tc.limit.Precision) + 1
			}
			step := tc.limit.Window / time.Duration(max(1, tc.limit.Precision))
			for i := 0; i < limiters; i++ {
				key := counter.Key("ip", fmt.Sprintf("203.%d.%d.%d", i>>16&255, i>>8&255, i&255))
				for s := 0; s < steps; s++ {
					if _, err := lim.AllowN(ctx, key, now.Add(time.Duration(s)*step), 100); err != nil {
						t.Fatal(err)
					}
				}
			}
			used, chunks := slabUse(t, mc[0].Addr)
			per := (used - base) / int64(limiters)
			t.Logf("%s: %d bytes of slab memory per limiter (%d items each; classes in use %v), key e.g. %q",
				tc.name, per, steps, chunks, counter.Key("ip", "203.0.19.136"))
			if tc.max > 0 && per > tc.max {
				t.Errorf("%d bytes per limiter, want ≤ %d", per, tc.max)
			}
		})
	}
}
