package kafkasink

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/goleak"
)

const testTopic = "rejections"

// startCluster starts a kfake cluster on free loopback ports (port 0 for
// each broker unless kfake.Ports is among opts) with testTopic seeded.
func startCluster(t testing.TB, partitions int32, opts ...kfake.Opt) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(append([]kfake.Opt{kfake.SeedTopics(partitions, testTopic)}, opts...)...)
	if err != nil {
		t.Fatalf("kfake: %v", err)
	}
	return c
}

// quiet swallows the warnings the failure tests provoke.
var quiet = slog.New(slog.DiscardHandler)

// fastRetries makes the producer notice a restarted cluster quickly.
var fastRetries = []kgo.Opt{
	kgo.MetadataMinAge(50 * time.Millisecond),
	kgo.MetadataMaxAge(time.Second),
	kgo.RetryBackoffFn(func(int) time.Duration { return 50 * time.Millisecond }),
}

// keyOf is a stand-in for the identity digest the caller keys by.
func keyOf(i int) []byte {
	h := sha256.Sum256([]byte("client-" + strconv.Itoa(i)))
	return []byte(hex.EncodeToString(h[:8]))
}

// testEvent is shaped like pop's rejection event (about 300 bytes), plus a
// per-key sequence number for the order checks.
type testEvent struct {
	Time       time.Time `json:"time"`
	Policy     string    `json:"policy"`
	Tier       string    `json:"tier"`
	Reason     string    `json:"reason"`
	Status     int       `json:"status"`
	Limit      string    `json:"limit"`
	IP         string    `json:"ip"`
	KeyID      string    `json:"key_id"`
	Tenant     string    `json:"tenant"`
	Route      string    `json:"route"`
	RetryAfter float64   `json:"retry_after_s"`
	Seq        int       `json:"seq"`
}

func eventJSON(t testing.TB, key []byte, seq int) []byte {
	ev := testEvent{
		Time: time.Date(2026, 12, 4, 22, 13, 29, seq*1000, time.UTC), Policy: "api-default", Tier: "free",
		Reason: "over_limit", Status: 429, Limit: "100 per 1m sliding window", IP: "203.0.113." + strconv.Itoa(seq%250),
		KeyID: string(key), Tenant: "7c0f3a52-9d1e-4b8a-a1f0-2b6e2d1c9e44", Route: "/v1/orders/{id}", RetryAfter: 12.5, Seq: seq,
	}
	b, err := json.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// consume reads records of testTopic from the start until it has want of
// them or the deadline passes, then keeps reading briefly to catch
// duplicates.
func consume(t *testing.T, addrs []string, want int, within time.Duration) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.ConsumeTopics(testTopic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var got []*kgo.Record
	deadline := time.Now().Add(within)
	extra := time.Time{}
	for {
		if len(got) >= want && extra.IsZero() {
			extra = time.Now().Add(300 * time.Millisecond)
		}
		end := deadline
		if !extra.IsZero() {
			end = extra
		}
		if time.Now().After(end) {
			return got
		}
		ctx, cancel := context.WithDeadline(context.Background(), end)
		fs := cl.PollFetches(ctx)
		cancel()
		fs.EachError(func(_ string, _ int32, err error) {
			if ctx.Err() == nil {
				t.Logf("fetch: %v", err)
			}
		})
		got = append(got, fs.Records()...)
	}
}

// checkKeyedOrder asserts that records hold every seq 0..perKey[k]-1 of
// each key exactly once, in order, on a single partition.
func checkKeyedOrder(t *testing.T, recs []*kgo.Record, perKey map[string]int) {
	t.Helper()
	next := map[string]int{}
	part := map[string]int32{}
	for _, r := range recs {
		var ev testEvent
		if err := json.Unmarshal(r.Value, &ev); err != nil {
			t.Fatalf("record value is not an event: %v: %q", err, r.Value)
		}
		k := string(r.Key)
		if ev.KeyID != k {
			t.Fatalf("record keyed %q carries key_id %q", k, ev.KeyID)
		}
		if p, ok := part[k]; ok && p != r.Partition {
			t.Fatalf("key %s on partitions %d and %d", k, p, r.Partition)
		}
		part[k] = r.Partition
		if ev.Seq != next[k] {
			t.Fatalf("key %s: got seq %d, want %d (duplicate, gap or reorder)", k, ev.Seq, next[k])
		}
		next[k]++
		if r.ProducerID < 0 {
			t.Fatalf("record without a producer id: the producer is not idempotent")
		}
	}
	for k, n := range perKey {
		if next[k] != n {
			t.Errorf("key %s: %d events read back, want %d", k, next[k], n)
		}
	}
}

// produceKeyed produces n events round-robin over keys and returns how
// many each key got.
func produceKeyed(t testing.TB, s *Sink, n, keys int) map[string]int {
	per := map[string]int{}
	for i := range n {
		k := keyOf(i % keys)
		s.Produce(k, eventJSON(t, k, per[string(k)]))
		per[string(k)]++
	}
	return per
}

func TestProduceDeliversEveryEventOnceInOrderPerKey(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	c := startCluster(t, 6, kfake.NumBrokers(3))
	defer c.Close()
	reg := prometheus.NewPedanticRegistry()
	s, err := New(Config{Brokers: c.ListenAddrs(), Topic: testTopic, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	const n, keys = 3000, 37
	per := produceKeyed(t, s, n, keys)
	if got := testutil.ToFloat64(s.m.produced) + float64(s.Buffered()); got != n {
		t.Errorf("produced+buffered = %v, want %d", got, n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if s.Produced() != n || s.Dropped() != 0 || s.Buffered() != 0 {
		t.Fatalf("after Close: produced %d, dropped %d, buffered %d; want %d, 0, 0", s.Produced(), s.Dropped(), s.Buffered(), n)
	}
	if cnt, _ := testutil.GatherAndCount(reg); cnt != 0 {
		t.Errorf("%d metrics still registered after Close", cnt)
	}
	recs := consume(t, c.ListenAddrs(), n, 20*time.Second)
	if len(recs) != n {
		t.Fatalf("read back %d records, want %d", len(recs), n)
	}
	checkKeyedOrder(t, recs, per)
}

func TestMetricsCountProducedAndDroppedByReason(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	c := startCluster(t, 1, kfake.NumBrokers(1))
	defer c.Close()
	reg := prometheus.NewPedanticRegistry()
	ext := prometheus.NewCounter(prometheus.CounterOpts{Name: "caller_dropped_total", Help: "caller's"})
	out := prometheus.NewCounter(prometheus.CounterOpts{Name: "caller_written_total", Help: "caller's"})
	s, err := New(Config{Brokers: c.ListenAddrs(), Topic: testTopic, Registerer: reg, Dropped: ext, Delivered: out, MaxBufferedBytes: 1000})
	if err != nil {
		t.Fatal(err)
	}
	s.Produce([]byte("k"), []byte("small"))
	s.Produce([]byte("k"), make([]byte, 1001)) // larger than the whole buffer
	for _, name := range []string{"poplimit_kafka_buffered_bytes", "poplimit_kafka_buffered_records", "poplimit_kafka_events_produced_total"} {
		if cnt, err := testutil.GatherAndCount(reg, name); err != nil || cnt != 1 {
			t.Errorf("metric %s: count %d, err %v", name, cnt, err)
		}
	}
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	s.Produce([]byte("k"), []byte("late"))
	if err := s.Close(context.Background()); err != ErrClosed {
		t.Errorf("second Close: %v, want ErrClosed", err)
	}
	for _, tc := range []struct {
		reason string
		want   float64
	}{{DropTooLarge, 1}, {DropClosed, 1}, {DropBufferFull, 0}, {DropDelivery, 0}} {
		if got := testutil.ToFloat64(s.m.dropped.WithLabelValues(tc.reason)); got != tc.want {
			t.Errorf("dropped{reason=%q} = %v, want %v", tc.reason, got, tc.want)
		}
	}
	if got := testutil.ToFloat64(ext); got != 2 {
		t.Errorf("caller's drop counter = %v, want 2", got)
	}
	if got := testutil.ToFloat64(out); got != 1 || s.Produced() != 1 {
		t.Errorf("caller's delivered counter = %v, Produced() = %d, want 1", got, s.Produced())
	}
}

func TestNewRefusesBadConfig(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
	}{
		{"no brokers", Config{Topic: "t"}},
		{"empty broker", Config{Brokers: []string{"k1", ""}, Topic: "t"}},
		{"no topic", Config{Brokers: []string{"k1"}}},
		{"bad topic", Config{Brokers: []string{"k1"}, Topic: "a/b"}},
		{"unknown compression", Config{Brokers: []string{"k1"}, Topic: "t", Compression: "brotli"}},
		{"delivery timeout under a second", Config{Brokers: []string{"k1"}, Topic: "t", DeliveryTimeout: 500 * time.Millisecond}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if s, err := New(tt.cfg); err == nil {
				s.Close(context.Background())
				t.Fatal("New accepted it")
			}
		})
	}
	reg := prometheus.NewPedanticRegistry()
	s, err := New(Config{Brokers: []string{"127.0.0.1:1"}, Topic: "t", Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	if s2, err := New(Config{Brokers: []string{"127.0.0.1:1"}, Topic: "t", Registerer: reg}); err == nil {
		s2.Close(context.Background())
		t.Fatal("a second sink registered the same metrics")
	}
}

// freePort returns the port of a cluster's only broker.
func portOf(t *testing.T, c *kfake.Cluster) int {
	_, p, err := net.SplitHostPort(c.ListenAddrs()[0])
	if err != nil {
		t.Fatal(err)
	}
	n, _ := strconv.Atoi(p)
	return n
}

func TestProduceNeverBlocksWhileBrokersAreDownAndResumesAfter(t *testing.T) {
	tests := []struct {
		name    string
		persist bool // the restarted broker keeps its log and topic IDs
	}{
		{name: "broker restarted with its data", persist: true},
		{name: "cluster replaced, topic recreated", persist: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var opts []kfake.Opt
			if tt.persist {
				opts = append(opts, kfake.DataDir(t.TempDir()))
			}
			testDownThenBack(t, opts)
		})
	}
}

func testDownThenBack(t *testing.T, opts []kfake.Opt) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	c1 := startCluster(t, 3, append(opts, kfake.NumBrokers(1))...)
	addr, port := c1.ListenAddrs()[0], portOf(t, c1)
	const bound = 200
	reg := prometheus.NewPedanticRegistry()
	s, err := New(Config{Brokers: []string{addr}, Topic: testTopic, Registerer: reg, MaxBufferedRecords: bound,
		DeliveryTimeout: -1, Logger: quiet, opts: fastRetries})
	if err != nil {
		t.Fatal(err)
	}
	closeCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	defer s.Close(closeCtx)

	// Up: delivered.
	produceKeyed(t, s, 50, 5)
	waitFor(t, "first events delivered", func() bool { return s.Produced() == 50 })

	// Down: every call returns at once, the buffer stays at its bound and
	// the rest is dropped as buffer_full.
	c1.Close()
	const down = 20000
	value := eventJSON(t, keyOf(0), 0)
	var slowest time.Duration
	for i := range down {
		start := time.Now()
		s.Produce(keyOf(i%64), value)
		slowest = max(slowest, time.Since(start))
		if b := s.Buffered(); b > bound {
			t.Fatalf("buffered %d records, bound %d", b, bound)
		}
	}
	// A Produce that waited for room would wait for the brokers, which stay
	// down until this loop ends; a second only absorbs scheduler and GC pauses.
	if slowest > time.Second {
		t.Errorf("slowest Produce took %v while brokers were down", slowest)
	}
	full := testutil.ToFloat64(s.m.dropped.WithLabelValues(DropBufferFull))
	if full < down-bound {
		t.Errorf("dropped{buffer_full} = %v, want at least %d", full, down-bound)
	}
	if got := s.cl.BufferedProduceRecords(); got > bound {
		t.Errorf("client buffers %d records, bound %d", got, bound)
	}

	// Back on the same address: the buffer empties and new events are
	// delivered without any call from us.
	c2 := startCluster(t, 3, append(opts, kfake.Ports(port))...)
	defer c2.Close()
	waitFor(t, "buffer emptied after restart", func() bool { return s.Buffered() == 0 })
	before := s.Produced()
	produceKeyed(t, s, 100, 7)
	waitFor(t, "new events delivered after restart", func() bool { return s.Produced() >= before+100 })
	if err := s.Close(closeCtx); err != nil {
		t.Fatal(err)
	}
	if s.Produced()+s.Dropped() != 50+down+100 {
		t.Errorf("produced %d + dropped %d != %d produced calls", s.Produced(), s.Dropped(), 50+down+100)
	}
	t.Logf("down: slowest Produce %v, dropped buffer_full %v; after restart produced %d (%d of them buffered during the outage), delivery drops %v",
		slowest, full, s.Produced()-50, before-50, testutil.ToFloat64(s.m.dropped.WithLabelValues(DropDelivery)))
}

// waitFor polls cond for up to 30s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting: %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestCloseReturnsWhenBrokersNeverAnswer(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	s, err := New(Config{Brokers: []string{addr}, Topic: testTopic, DeliveryTimeout: -1, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		s.Produce(keyOf(i), []byte(fmt.Sprint(i)))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	if err := s.Close(ctx); err == nil {
		t.Error("Close reported a complete flush with no broker")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Close took %v", d)
	}
	if s.Dropped() != 10 || s.Buffered() != 0 {
		t.Errorf("after Close: dropped %d, buffered %d; want 10, 0", s.Dropped(), s.Buffered())
	}
}

func TestRecordsUndeliveredWithinDeliveryTimeoutAreDropped(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	s, err := New(Config{Brokers: []string{addr}, Topic: testTopic, DeliveryTimeout: time.Second, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	for i := range 10 {
		s.Produce(keyOf(i), []byte(fmt.Sprint(i)))
	}
	waitFor(t, "records timed out", func() bool { return s.Dropped() == 10 })
	if got := testutil.ToFloat64(s.m.errors.WithLabelValues("timeout")); got != 10 {
		t.Errorf("delivery_errors{reason=timeout} = %v, want 10", got)
	}
	if got := testutil.ToFloat64(s.m.dropped.WithLabelValues(DropDelivery)); got != 10 {
		t.Errorf("dropped{reason=delivery} = %v, want 10", got)
	}
	if s.Buffered() != 0 {
		t.Errorf("buffered %d after the timeouts", s.Buffered())
	}
}
