package pop

import (
	"testing"
	"time"
)

// TestSocketTimeout: the store's socket timeout is the longest deadline a
// decision can get: Fixed when set (below the ceiling too), else the
// ceiling, never below the floor.
func TestSocketTimeout(t *testing.T) {
	ms := time.Millisecond
	for _, tc := range []struct {
		name string
		cfg  DeadlineConfig
		want time.Duration
	}{
		{"zero: the default ceiling", DeadlineConfig{}, time.Second},
		{"fixed below the ceiling", DeadlineConfig{Fixed: 300 * ms, Ceiling: time.Second}, 300 * ms},
		{"fixed below the floor", DeadlineConfig{Fixed: 100 * ms, Floor: 250 * ms}, 100 * ms},
		{"fixed above the ceiling", DeadlineConfig{Fixed: 2 * time.Second}, 2 * time.Second},
		{"the daemons' flag defaults", DeadlineConfig{Floor: 250 * ms, Ceiling: time.Second}, time.Second},
		{"ceiling set", DeadlineConfig{Ceiling: 500 * ms}, 500 * ms},
		{"floor above the default ceiling", DeadlineConfig{Floor: 2 * time.Second}, 2 * time.Second},
		{"floor above the ceiling", DeadlineConfig{Floor: 2 * time.Second, Ceiling: time.Second}, 2 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.cfg.SocketTimeout(); got != tc.want {
				t.Errorf("%+v.SocketTimeout() = %v, want %v", tc.cfg, got, tc.want)
			}
		})
	}
}

// TestSocketTimeoutCoversEveryDeadline: no deadline the adaptive rule can
// give exceeds the socket timeout.
func TestSocketTimeoutCoversEveryDeadline(t *testing.T) {
	for _, cfg := range []DeadlineConfig{{}, {Floor: 10 * time.Millisecond, Ceiling: 50 * time.Millisecond}, {Fixed: 300 * time.Millisecond}} {
		d := newDeadline(cfg, nil)
		now := time.Unix(0, 0)
		for i := range 1000 {
			d.Observe(now.Add(time.Duration(i)*time.Millisecond), 10*time.Second)
		}
		d.Observe(now.Add(10*time.Second), time.Millisecond)
		if got, limit := d.Current(), cfg.SocketTimeout(); got > limit {
			t.Errorf("%+v: deadline %v above the socket timeout %v", cfg, got, limit)
		}
	}
}
