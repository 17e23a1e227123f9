package pop

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
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
			if d, w := testutil.ToFloat64(m.eventsDrop), testutil.ToFloat64(m.eventsOut); d != float64(dropped) || w != float64(written) {
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
