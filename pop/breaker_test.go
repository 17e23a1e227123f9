package pop

import (
	"errors"
	"testing"
	"time"
)

func TestBreakerSteps(t *testing.T) {
	fail := errors.New("boom")
	type step struct {
		at        time.Duration
		call      bool  // call Allow (and, if allowed, Observe(err))
		err       error // outcome observed
		wantAllow bool
		wantState BreakerState
	}
	steps := []step{
		{0, true, fail, true, BreakerClosed},
		{1 * time.Millisecond, true, nil, true, BreakerClosed}, // success resets the run
		{2 * time.Millisecond, true, fail, true, BreakerClosed},
		{3 * time.Millisecond, true, fail, true, BreakerClosed},
		{4 * time.Millisecond, true, fail, true, BreakerOpen}, // 3 in a row
		{5 * time.Millisecond, true, nil, false, BreakerOpen},
		{99 * time.Millisecond, true, nil, false, BreakerOpen},
		{104 * time.Millisecond, true, fail, true, BreakerOpen}, // probe fails: reopen
		{150 * time.Millisecond, true, nil, false, BreakerOpen},
		{204 * time.Millisecond, true, nil, true, BreakerClosed}, // probe succeeds
		{205 * time.Millisecond, true, nil, true, BreakerClosed},
	}
	var changes []BreakerState
	b := NewBreaker(BreakerConfig{Failures: 3, OpenFor: 100 * time.Millisecond}, func(s BreakerState) { changes = append(changes, s) })
	for i, s := range steps {
		now := t0.Add(s.at)
		got := b.Allow(now)
		if got != s.wantAllow {
			t.Fatalf("step %d at %v: Allow = %v, want %v", i, s.at, got, s.wantAllow)
		}
		if got {
			b.Observe(now, s.err)
		}
		if st := b.State(); st != s.wantState {
			t.Fatalf("step %d at %v: state %v, want %v", i, s.at, st, s.wantState)
		}
	}
	want := []BreakerState{BreakerOpen, BreakerHalfOpen, BreakerOpen, BreakerHalfOpen, BreakerClosed}
	if len(changes) != len(want) {
		t.Fatalf("changes %v, want %v", changes, want)
	}
	for i := range want {
		if changes[i] != want[i] {
			t.Fatalf("changes %v, want %v", changes, want)
		}
	}
}

func TestBreakerHalfOpenLimitsProbes(t *testing.T) {
	b := NewBreaker(BreakerConfig{Failures: 1, OpenFor: time.Second, Probes: 2}, nil)
	b.Allow(t0)
	b.Observe(t0, errors.New("x"))
	at := t0.Add(time.Second)
	first, second, third := b.Allow(at), b.Allow(at), b.Allow(at)
	if !first || !second || third {
		t.Fatal("half-open must let exactly 2 probes through")
	}
	b.Observe(at, nil)
	if b.State() != BreakerClosed || !b.Allow(at) {
		t.Fatal("a successful probe must close the breaker")
	}
}
