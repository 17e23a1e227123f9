package pop

import (
	"context"
	"errors"
	"fmt"
	"net"
	"syscall"
	"testing"
	"time"
)

// TestBreakerOpensOnEvidenceOfDeath: step tables of outcomes; the breaker
// opens on hard failures in a row or on failures with no success for the
// window, never on timeouts while other calls succeed.
func TestBreakerOpensOnEvidenceOfDeath(t *testing.T) {
	timeout := fmt.Errorf("store: %w", context.DeadlineExceeded)
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	reset := fmt.Errorf("counter: memcached incr: %w", syscall.ECONNRESET)
	type step struct {
		at        time.Duration
		err       error
		wantState BreakerState
	}
	ms := time.Millisecond
	tests := []struct {
		name  string
		steps []step
	}{
		{"timeouts with recent successes stay closed", []step{
			{0, nil, BreakerClosed},
			{1 * ms, timeout, BreakerClosed}, {2 * ms, timeout, BreakerClosed}, {3 * ms, timeout, BreakerClosed},
			{4 * ms, timeout, BreakerClosed}, {5 * ms, timeout, BreakerClosed}, {6 * ms, timeout, BreakerClosed},
			{7 * ms, nil, BreakerClosed},
			{8 * ms, timeout, BreakerClosed}, {900 * ms, timeout, BreakerClosed},
			{950 * ms, nil, BreakerClosed}, // a success in the window: alive
			{1900 * ms, timeout, BreakerClosed},
		}},
		{"refused in a row opens", []step{
			{0, nil, BreakerClosed},
			{1 * ms, refused, BreakerClosed}, {2 * ms, reset, BreakerClosed}, {3 * ms, refused, BreakerClosed},
			{4 * ms, refused, BreakerClosed}, {5 * ms, refused, BreakerOpen},
		}},
		{"a success breaks the run of hard failures", []step{
			{1 * ms, refused, BreakerClosed}, {2 * ms, refused, BreakerClosed}, {3 * ms, refused, BreakerClosed},
			{4 * ms, refused, BreakerClosed}, {5 * ms, nil, BreakerClosed}, {6 * ms, refused, BreakerClosed},
		}},
		{"timeouts do not extend a run of hard failures", []step{
			{1 * ms, refused, BreakerClosed}, {2 * ms, timeout, BreakerClosed}, {3 * ms, timeout, BreakerClosed},
			{4 * ms, timeout, BreakerClosed}, {5 * ms, timeout, BreakerClosed}, {6 * ms, timeout, BreakerClosed},
		}},
		{"timeouts with no success in the window open", []step{
			{0, nil, BreakerClosed},
			{100 * ms, timeout, BreakerClosed}, {600 * ms, timeout, BreakerClosed},
			{1099 * ms, timeout, BreakerClosed}, // last success 1.099 s ago, failing for 0.999 s
			{1100 * ms, timeout, BreakerOpen},
		}},
		{"a store never seen alive opens after the window", []step{
			{0, timeout, BreakerClosed}, {500 * ms, timeout, BreakerClosed}, {1000 * ms, timeout, BreakerOpen},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := NewBreaker(BreakerConfig{Window: time.Second}, nil) // 5 hard (default), 1 s window
			for i, s := range tc.steps {
				now := t0.Add(s.at)
				if !b.Allow(now) {
					t.Fatalf("step %d at %v: not allowed while %v", i, s.at, b.State())
				}
				b.Observe(now, s.err)
				if st := b.State(); st != s.wantState {
					t.Fatalf("step %d at %v (%v): state %v, want %v", i, s.at, s.err, st, s.wantState)
				}
			}
		})
	}
}

// TestBreakerDefaultWindow: the default window of no success is twice the
// default deadline ceiling, so one wave of calls timing out at the
// ceiling cannot open the breaker by itself.
func TestBreakerDefaultWindow(t *testing.T) {
	if w, c := (BreakerConfig{}).window(), (DeadlineConfig{}).ceiling(); w != 2*time.Second || w < 2*c {
		t.Fatalf("default window %v, deadline ceiling %v: want 2s and at least twice the ceiling", w, c)
	}
}

func TestIsTimeout(t *testing.T) {
	tests := []struct {
		err  error
		want bool
	}{
		{context.DeadlineExceeded, true},
		{fmt.Errorf("x: %w", context.DeadlineExceeded), true},
		{&net.OpError{Op: "read", Err: timeoutErr{}}, true},
		{&net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}, false},
		{syscall.ECONNRESET, false},
		{errors.New("counter: memcached protocol error"), false},
	}
	for _, tc := range tests {
		if got := IsTimeout(tc.err); got != tc.want {
			t.Errorf("IsTimeout(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }

// TestDeadlineAdapts: the deadline starts at the ceiling, follows 4× the
// p99 of recent latencies within [floor, ceiling], and a fixed deadline
// never moves.
func TestDeadlineAdapts(t *testing.T) {
	cfg := DeadlineConfig{Floor: 10 * time.Millisecond, Ceiling: 400 * time.Millisecond}
	var seen []time.Duration
	d := newDeadline(cfg, func(x time.Duration) { seen = append(seen, x) })
	if d.Current() != 400*time.Millisecond {
		t.Fatalf("start %v, want the ceiling", d.Current())
	}
	at := t0
	feed := func(lat time.Duration, n int) {
		for i := 0; i < n; i++ {
			at = at.Add(time.Millisecond)
			d.Observe(at, lat)
		}
	}
	feed(200*time.Microsecond, 3000) // 3 s of fast calls
	if got := d.Current(); got != 10*time.Millisecond {
		t.Fatalf("fast store: %v, want the floor", got)
	}
	feed(20*time.Millisecond, 3000) // a slow store
	if got := d.Current(); got < 80*time.Millisecond || got > 100*time.Millisecond {
		t.Fatalf("20ms store: %v, want ~4×20ms", got)
	}
	feed(time.Second, 3000)
	if got := d.Current(); got != 400*time.Millisecond {
		t.Fatalf("1s store: %v, want the ceiling", got)
	}
	if len(seen) < 3 {
		t.Fatalf("onChange saw %v", seen)
	}
	f := newDeadline(DeadlineConfig{Fixed: 30 * time.Millisecond}, nil)
	for i := 0; i < 3000; i++ {
		f.Observe(t0.Add(time.Duration(i)*time.Millisecond), time.Second)
	}
	if f.Current() != 30*time.Millisecond {
		t.Fatalf("fixed deadline moved to %v", f.Current())
	}
}
