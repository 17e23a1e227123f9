package redis_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/poplimit/poplimit/bench/fixture"
	"github.com/poplimit/poplimit/counter"
	"github.com/poplimit/poplimit/counter/memstore"
	"github.com/poplimit/poplimit/counter/redis"
)

var ctx = context.Background()

func TestMain(m *testing.M) { os.Exit(fixture.Main(m)) }

// store returns a Store on the test binary's shared cluster.
func store(t testing.TB, serverTime bool) *redis.Store {
	t.Helper()
	c := fixture.SharedRedisCluster(t)
	st, err := redis.New(redis.Config{Addrs: c.Addrs(), Timeout: 5 * time.Second, ServerTime: serverTime})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func allower(t testing.TB, st *redis.Store, l counter.Limit) *redis.Limiter {
	t.Helper()
	a, err := st.NewAllower(l)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func uniqueKey(t testing.TB, parts ...string) string {
	return counter.Key(append([]string{"test", t.Name(), time.Now().Format(time.RFC3339Nano)}, parts...)...)
}

func TestParseURL(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want string // joined addrs; "" means an error
	}{
		{"redis://127.0.0.1:7000", "127.0.0.1:7000"},
		{"redis://a:1,b:2,c:3", "a:1,b:2,c:3"},
		{"redis://[::1]:7000", "[::1]:7000"},
		{"redis://a:1/", "a:1"},
		{"memcached://a:1", ""},
		{"redis://", ""},
		{"redis://a", ""},
		{"redis://a:0", ""},
		{"redis://a:99999", ""},
		{"redis://a:1,", ""},
		{"redis://a:1/db", ""},
		{"redis://u:p@a:1", ""},
		{"redis://a:1?x=1", ""},
		{"a:1", ""},
	} {
		got, err := redis.ParseURL(tc.in)
		if tc.want == "" {
			if !errors.Is(err, redis.ErrBadURL) {
				t.Errorf("ParseURL(%q) = %v, %v; want ErrBadURL", tc.in, got, err)
			}
			continue
		}
		if err != nil || strings.Join(got, ",") != tc.want {
			t.Errorf("ParseURL(%q) = %v, %v; want %s", tc.in, got, err, tc.want)
		}
	}
	if _, err := redis.New(redis.Config{}); !errors.Is(err, redis.ErrBadURL) {
		t.Errorf("New without addresses: %v, want ErrBadURL", err)
	}
}

// TestBadInput: limits the Lua doubles cannot hold exactly, bad costs and
// bad keys are refused with precise errors before any network call.
func TestBadInput(t *testing.T) {
	st, err := redis.New(redis.Config{Addrs: []string{"127.0.0.1:1"}, Timeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for _, l := range []counter.Limit{
		{Quantity: 1 << 30, Window: 7 * 24 * time.Hour},
		{Algorithm: counter.TokenBucket, Quantity: 1, Window: 200 * 24 * time.Hour},
		{Quantity: 0, Window: time.Second},
	} {
		if _, err := st.NewAllower(l); !errors.Is(err, counter.ErrBadLimit) {
			t.Errorf("NewAllower(%v): %v, want ErrBadLimit", l, err)
		}
	}
	a := allower(t, st, counter.Limit{Quantity: 10, Window: time.Second})
	if _, err := a.AllowN(ctx, counter.Key("x"), time.Now(), 0); !errors.Is(err, counter.ErrBadCost) {
		t.Errorf("AllowN n=0: %v", err)
	}
	if err := a.Undo(ctx, counter.Key("x"), time.Now(), 0); !errors.Is(err, counter.ErrBadCost) {
		t.Errorf("Undo n=0: %v", err)
	}
	if _, err := a.AllowN(ctx, "bad key", time.Now(), 1); !errors.Is(err, counter.ErrBadKey) {
		t.Errorf("AllowN bad key: %v", err)
	}
	other, _ := redis.New(redis.Config{Addrs: []string{"127.0.0.1:1"}})
	defer other.Close()
	b := allower(t, other, counter.Limit{Quantity: 10, Window: time.Second})
	if _, _, err := st.AllowAll(ctx, time.Now(), 1, counter.Check{Allower: a, Key: counter.Key("x")},
		counter.Check{Allower: b, Key: counter.Key("x")}); !errors.Is(err, redis.ErrForeign) {
		t.Errorf("AllowAll with another store's limiter: %v, want ErrForeign", err)
	}
	if _, _, err := st.AllowAll(ctx, time.Now(), 1, counter.Check{Allower: a, Key: counter.Key("x")},
		counter.Check{Allower: a, Key: counter.Key("y")}); !errors.Is(err, redis.ErrCrossSlot) {
		t.Errorf("AllowAll over two identities: %v, want ErrCrossSlot", err)
	}
}

// TestCrossSlot shows the failure the design warns about, and that
// counter.Key's keys never produce it: the same script over two keys
// without a hash tag is refused by the cluster with CROSSSLOT; compound
// rules of one identity (three limits, three algorithms) over 500
// identities never are.
func TestCrossSlot(t *testing.T) {
	st := store(t, false)
	// Find two untagged keys in different slots (the cluster's own hash).
	var k1, k2 string
	for i := 0; k2 == ""; i++ {
		a, b := fmt.Sprintf("untagged-%d", i), fmt.Sprintf("untagged-%d-b", i)
		sa, _ := st.Client().ClusterKeySlot(ctx, a).Result()
		sb, _ := st.Client().ClusterKeySlot(ctx, b).Result()
		if sa != sb {
			k1, k2 = a, b
		}
	}
	err := st.Client().Eval(ctx, "return redis.call('INCR', KEYS[1]) + redis.call('INCR', KEYS[2])", []string{k1, k2}).Err()
	if err == nil || !strings.Contains(err.Error(), "CROSSSLOT") {
		t.Fatalf("two untagged keys in one script: %v, want CROSSSLOT", err)
	}
	lims := []*redis.Limiter{
		allower(t, st, counter.Limit{Quantity: 100, Window: time.Minute, Precision: 6}),
		allower(t, st, counter.Limit{Algorithm: counter.FixedWindow, Quantity: 1000, Window: time.Hour}),
		allower(t, st, counter.Limit{Algorithm: counter.TokenBucket, Quantity: 10, Window: time.Second}),
	}
	now := time.Now()
	for i := 0; i < 500; i++ {
		var checks []counter.Check
		for j, l := range lims {
			checks = append(checks, counter.Check{Allower: l, Key: counter.Key("tenant", fmt.Sprint("t", i), "limit", fmt.Sprint(j))})
		}
		// Different limit parts, different tags: refused before the wire.
		if _, _, err := st.AllowAll(ctx, now, 1, checks...); !errors.Is(err, redis.ErrCrossSlot) {
			t.Fatalf("identity %d, distinct tags: %v, want ErrCrossSlot", i, err)
		}
		key := uniqueKey(t, "tenant", fmt.Sprint("t", i))
		for j := range checks {
			checks[j].Key = key
		}
		r, rs, err := st.AllowAll(ctx, now, 1, checks...)
		if err != nil {
			t.Fatalf("identity %d: %v", i, err)
		}
		if !r.Allowed || len(rs) != 3 {
			t.Fatalf("identity %d: %+v %+v", i, r, rs)
		}
	}
}

// TestServerTime: two workers whose clocks are an hour apart share one
// fixed window when now comes from the shard (exactly the allowance is
// admitted); with their own clocks they count in two windows (twice).
func TestServerTime(t *testing.T) {
	l := counter.Limit{Algorithm: counter.FixedWindow, Quantity: 10, Window: time.Minute}
	for _, tc := range []struct {
		serverTime bool
		want       int
	}{{true, 10}, {false, 20}} {
		t.Run(fmt.Sprint("serverTime=", tc.serverTime), func(t *testing.T) {
			a := allower(t, store(t, tc.serverTime), l)
			key := uniqueKey(t)
			admitted := 0
			for i := 0; i < 40; i++ {
				skew := time.Hour
				if i%2 == 1 {
					skew = -time.Hour
				}
				r, err := a.AllowN(ctx, key, time.Now().Add(skew), 1)
				if err != nil {
					t.Fatal(err)
				}
				if r.Allowed {
					admitted++
				}
			}
			// A minute boundary may pass during the loop on the shard's
			// clock: then up to twice the allowance, never more.
			if tc.serverTime && admitted != tc.want && admitted > 2*tc.want {
				t.Fatalf("admitted %d, want %d", admitted, tc.want)
			}
			if !tc.serverTime && admitted != tc.want {
				t.Fatalf("admitted %d, want %d", admitted, tc.want)
			}
		})
	}
}

// TestUndoAndPeek: Undo gives units back (never below zero, never past a
// full bucket); a request above the allowance is not counted.
func TestUndoAndPeek(t *testing.T) {
	st := store(t, false)
	now := time.Unix(1767225600, 0) // a minute boundary
	for _, l := range []counter.Limit{
		{Algorithm: counter.FixedWindow, Quantity: 5, Window: time.Minute},
		{Quantity: 5, Window: time.Minute, Precision: 3},
		{Algorithm: counter.TokenBucket, Quantity: 5, Window: time.Minute},
	} {
		t.Run(l.String(), func(t *testing.T) {
			a := allower(t, st, l)
			key := uniqueKey(t)
			if r, err := a.AllowN(ctx, key, now, 6); err != nil || r.Allowed || r.RetryAfter != counter.Never {
				t.Fatalf("n above the allowance: %+v %v", r, err)
			}
			if err := a.Undo(ctx, key, now, 3); err != nil { // nothing to give back
				t.Fatal(err)
			}
			if r, err := a.AllowN(ctx, key, now, 5); err != nil || !r.Allowed || r.Remaining != 0 {
				t.Fatalf("full allowance after peek and idle undo: %+v %v", r, err)
			}
			if err := a.Undo(ctx, key, now, 2); err != nil {
				t.Fatal(err)
			}
			if r, err := a.AllowN(ctx, key, now, 2); err != nil || !r.Allowed || r.Remaining != 0 {
				t.Fatalf("after undo of 2: %+v %v", r, err)
			}
			if r, err := a.AllowN(ctx, key, now, 1); err != nil || r.Allowed {
				t.Fatalf("over: %+v %v", r, err)
			}
		})
	}
}

// TestPeekAgreesWithMemory: Peek (Envoy's hits_addend 0) answers as the
// in-process Limiter's Peek at every step of a sequence that fills and
// overfills each limit: allowed while the count is at most the quantity,
// the true remaining, refused above it; a peek counts nothing.
func TestPeekAgreesWithMemory(t *testing.T) {
	st := store(t, false)
	now := time.Unix(1767225600, 0).Add(10 * time.Second)
	for _, l := range []counter.Limit{
		{Algorithm: counter.FixedWindow, Quantity: 3, Window: time.Minute},
		{Quantity: 3, Window: time.Minute, Precision: 3},
		{Algorithm: counter.TokenBucket, Quantity: 3, Window: time.Minute},
	} {
		t.Run(l.String(), func(t *testing.T) {
			a := allower(t, st, l)
			ref, err := counter.New(memstore.New(), l)
			if err != nil {
				t.Fatal(err)
			}
			key := uniqueKey(t)
			for step, n := range []int64{0, 1, 0, 0, 2, 0, 1, 0, 1, 0} {
				at := now.Add(time.Duration(step) * time.Millisecond)
				var got, want counter.Result
				if n == 0 {
					if got, err = a.Peek(ctx, key, at); err == nil {
						want, err = ref.Peek(ctx, key, at)
					}
				} else if got, err = a.AllowN(ctx, key, at, n); err == nil {
					want, err = ref.AllowN(ctx, key, at, n)
				}
				if err != nil {
					t.Fatal(err)
				}
				if l.Algorithm == counter.TokenBucket {
					// The in-process bucket peeks by taking a unit and
					// giving it back: its durations count that unit.
					got.Reset, want.Reset, got.Next, want.Next, got.RetryAfter, want.RetryAfter = 0, 0, 0, 0, 0, 0
				}
				if got != want {
					t.Errorf("step %d (n %d): %+v, want %+v", step, n, got, want)
				}
			}
		})
	}
}
