package pop

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/poplimit/poplimit/pop/policy"
)

// flakySink fails its first `fail` writes (every write when fail < 0).
type flakySink struct {
	fail int
	buf  bytes.Buffer
}

func (s *flakySink) Write(p []byte) (int, error) {
	if s.fail != 0 {
		if s.fail > 0 {
			s.fail--
		}
		return 0, errors.New("test: sink down")
	}
	return s.buf.Write(p)
}

func TestEventsSinkErrorsCounted(t *testing.T) {
	const n = 100 // ~15 KB of JSON: several buffer flushes
	for _, tc := range []struct {
		name string
		fail int
		// wantDropped: -1 for "some, not all"
		wantDropped int
		wantLogs    int
	}{
		{"sink ok", 0, 0, 0},
		{"sink always fails", -1, n, 1},
		{"sink fails once then recovers", 1, -1, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sink := &flakySink{fail: tc.fail}
			var logs bytes.Buffer
			e := NewEvents(sink, EventsConfig{Queue: n, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			m, err := NewMetrics(prometheus.NewRegistry())
			if err != nil {
				t.Fatal(err)
			}
			e.metrics = m
			for i := range n {
				e.Emit(Event{Time: t0.Add(time.Duration(i)), Policy: "some-policy", Tier: "free", Reason: ReasonMitigated, Status: 429, Limit: "burst", IP: "192.0.2.1", Route: "GET /api/{resource}"})
			}
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			_ = e.Run(ctx) // drains and flushes
			dropped, written := e.Dropped(), e.Written()
			if dropped+written != n {
				t.Errorf("dropped %d + written %d != %d emitted", dropped, written, n)
			}
			if d, w := testutil.ToFloat64(m.eventsDrop.WithLabelValues(dropWriteError)), testutil.ToFloat64(m.eventsOut); d != float64(dropped) || w != float64(written) {
				t.Errorf("metrics dropped %v written %v, want %d %d", d, w, dropped, written)
			}
			if lines := uint64(strings.Count(sink.buf.String(), "\n")); lines != written {
				t.Errorf("written %d, but %d lines reached the sink", written, lines)
			}
			switch {
			case tc.wantDropped >= 0 && dropped != uint64(tc.wantDropped):
				t.Errorf("dropped %d, want %d", dropped, tc.wantDropped)
			case tc.wantDropped < 0 && (dropped == 0 || written == 0):
				t.Errorf("dropped %d written %d, want some of each (recovery after a failure)", dropped, written)
			}
			if got := strings.Count(logs.String(), "\n"); got != tc.wantLogs {
				t.Errorf("%d log lines, want %d:\n%s", got, tc.wantLogs, logs.String())
			}
		})
	}
}

// recordSink is an EventSink keeping every record.
type recordSink struct {
	mu   sync.Mutex
	keys []string
	vals [][]byte
}

func (s *recordSink) Produce(key, value []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.keys, s.vals = append(s.keys, string(key)), append(s.vals, value)
}

func TestEventSchemaV1FromRefusals(t *testing.T) {
	clk := newTestClock(t0)
	cfg := storeConfig(newFlakyStore(clk.Now))
	cfg.Clock = clk.Now
	sink := &recordSink{}
	cfg.Events = NewEventsTo(sink, EventsConfig{Queue: 100, PoP: "fra1", Worker: "edge-3"})
	l := newTestLimiter(t, cfg, policyDoc("open"))
	h := l.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	for range 12 { // the free tier admits 10 a second
		h.ServeHTTP(httptest.NewRecorder(), req("GET", "/api/x", "X-API-Key", "secret-free-key"))
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := cfg.Events.Run(ctx); err != nil {
		t.Fatal(err)
	}
	if len(sink.vals) != 2 || cfg.Events.Written() != 2 {
		t.Fatalf("%d records, Written %d; want 2", len(sink.vals), cfg.Events.Written())
	}
	for i, v := range sink.vals {
		if strings.Contains(string(v), "secret") {
			t.Fatalf("record carries the key in clear: %s", v)
		}
		var got map[string]any
		if err := json.Unmarshal(v, &got); err != nil {
			t.Fatal(err)
		}
		want := map[string]any{
			"v": 1.0, "seq": float64(i + 1), "pop": "fra1", "worker": "edge-3", "policy": "api", "tier": "free",
			"limit": "second", "identity_kind": "api_key", "identity": policy.KeyID("secret-free-key"),
			"key_id": policy.KeyID("secret-free-key"), "ip": "192.0.2.1", "client_net": "192.0.2.1/32",
			"route": "GET /api/{x}", "tenant": "acme", "decision": "refused", "status": 429.0, "remaining": 0.0,
			"time": t0.Format(time.RFC3339Nano),
		}
		for k, w := range want {
			if got[k] != w {
				t.Errorf("record %d: %s = %v, want %v\n%s", i, k, got[k], w, v)
			}
		}
		if got["reason"] == "" || got["retry_after_s"] == nil {
			t.Errorf("record %d: no reason or retry_after_s: %s", i, v)
		}
		if sink.keys[i] != policy.KeyID("secret-free-key") {
			t.Errorf("record %d keyed %q, want the identity digest", i, sink.keys[i])
		}
	}
}

func TestEventIdentityDerivedOffTheRequestPath(t *testing.T) {
	for _, tc := range []struct {
		name     string
		ev       Event
		wantKind string
		wantID   string
	}{
		{"api key", Event{KeyID: "k1", ClientNet: netip.MustParsePrefix("192.0.2.0/24")}, IdentityAPIKey, "k1"},
		{"client network", Event{ClientNet: netip.MustParsePrefix("2001:db8::/64")}, IdentityIP, policy.KeyID("2001:db8::/64")},
		{"rls descriptor", Event{IdentityParts: []string{"dom", "remote_address", "10.0.0.1"}}, IdentityDescriptor, policy.KeyID("dom\x00remote_address\x0010.0.0.1")},
		{"set by the caller", Event{Identity: "x", IdentityKind: "custom", KeyID: "k1"}, "custom", "x"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := NewEventsTo(&recordSink{}, EventsConfig{})
			got := e.stamp(tc.ev)
			if got.IdentityKind != tc.wantKind || got.Identity != tc.wantID || got.V != EventSchemaVersion || got.Seq != 1 {
				t.Errorf("stamped %+v, want kind %q identity %q v1 seq 1", got, tc.wantKind, tc.wantID)
			}
		})
	}
}

func TestEventsQueueFullDropsCountedByReason(t *testing.T) {
	m, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	e := NewEventsTo(&recordSink{}, EventsConfig{Queue: 3, Metrics: m})
	for range 5 {
		e.Emit(Event{Policy: "p"})
	}
	if e.Dropped() != 2 {
		t.Errorf("Dropped %d, want 2", e.Dropped())
	}
	for reason, want := range map[string]float64{dropQueueFull: 2, dropWriteError: 0, dropSink: 0} {
		if got := testutil.ToFloat64(m.eventsDrop.WithLabelValues(reason)); got != want {
			t.Errorf("dropped{reason=%q} = %v, want %v", reason, got, want)
		}
	}
	m.EventsDropped().Inc()
	if got := testutil.ToFloat64(m.eventsDrop.WithLabelValues(dropSink)); got != 1 {
		t.Errorf("EventsDropped does not count reason sink: %v", got)
	}
}
