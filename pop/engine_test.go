package pop

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/poplimit/poplimit/counter"
)

func fixedSpec(name string, q int64, fm FailMode) RuleSpec {
	return RuleSpec{Name: name, FailMode: fm, Limits: []LimitSpec{{Limit: counter.Limit{Name: "l", Algorithm: counter.FixedWindow, Quantity: q, Window: time.Minute}}}}
}

func newEngine(t *testing.T, store counter.Store, specs ...RuleSpec) (*Limiter, *RuleSet) {
	t.Helper()
	l, err := New(storeConfig(store))
	if err != nil {
		t.Fatal(err)
	}
	rs, err := l.CompileRules(specs, nil)
	if err != nil {
		t.Fatal(err)
	}
	return l, rs
}

// decideOne is DecideAll of one check.
func decideOne(l *Limiter, c Check, now time.Time) Decision {
	out := make([]Decision, 1)
	l.DecideAll(context.Background(), []Check{c}, now, out)
	return out[0]
}

func TestDecideAllCountsHitsAndPeeks(t *testing.T) {
	l, rs := newEngine(t, counter.NewMemoryStore(), fixedSpec("a", 3, FailOpen))
	r := rs.Rule("a")
	now := t0.Add(time.Second)
	parts := []string{"d", "k", "v"}
	steps := []struct {
		hits      int64
		allowed   bool
		remaining int64
	}{
		{0, true, 3}, {1, true, 2}, {2, true, 0}, {0, true, 0}, {1, false, 0}, {0, false, 0},
	}
	for i, s := range steps {
		d := decideOne(l, Check{Rule: r, Parts: parts, Hits: s.hits}, now)
		if d.Allowed != s.allowed || d.Binding.Result.Remaining != s.remaining {
			t.Fatalf("step %d (hits %d): allowed %v remaining %d (%s), want %v %d", i, s.hits, d.Allowed, d.Binding.Result.Remaining, d.Reason, s.allowed, s.remaining)
		}
	}
	// Another identity, and the next window, start afresh.
	if d := decideOne(l, Check{Rule: r, Parts: []string{"d", "k", "w"}, Hits: 3}, now); !d.Allowed {
		t.Fatalf("other identity: %+v", d)
	}
	if d := decideOne(l, Check{Rule: r, Parts: parts, Hits: 1}, t0.Add(time.Minute)); !d.Allowed || d.Binding.Result.Remaining != 2 {
		t.Fatalf("next window: %+v", d)
	}
	if d := decideOne(l, Check{Rule: r, Parts: parts, Hits: -1}, now); d.Allowed || d.Reason != ReasonBadInput {
		t.Fatalf("negative hits: %+v", d)
	}
	if d := decideOne(l, Check{Parts: parts, Hits: 1}, now); !d.Allowed || d.Reason != ReasonNoPolicy {
		t.Fatalf("nil rule: %+v", d)
	}
}

func TestDecideAllBatchAndFailModes(t *testing.T) {
	clock := newTestClock(t0)
	store := newFlakyStore(clock.Now)
	l, rs := newEngine(t, store, fixedSpec("open", 1, FailOpen), fixedSpec("closed", 1, FailClosed), fixedSpec("local", 1, FailLocal))
	now := t0.Add(time.Second)
	checks := []Check{
		{Rule: rs.Rule("open"), Parts: []string{"x"}, Hits: 1},
		{Rule: rs.Rule("closed"), Parts: []string{"x"}, Hits: 1},
		{Rule: rs.Rule("local"), Parts: []string{"x"}, Hits: 1},
		{Rule: rs.Rule("open"), Parts: []string{"x"}, Hits: 0},
	}
	out := make([]Decision, len(checks))
	l.DecideAll(context.Background(), checks, now, out)
	for i, d := range out {
		if !d.Allowed || d.Reason != ReasonStore {
			t.Fatalf("healthy store, check %d: %+v", i, d)
		}
	}
	store.down.Store(true)
	l.DecideAll(context.Background(), checks, now, out)
	want := []struct {
		allowed bool
		reason  Reason
	}{{true, ReasonFailOpen}, {false, ReasonFailClosed}, {true, ReasonFailLocal}, {true, ReasonFailOpen}}
	for i, d := range out {
		if d.Allowed != want[i].allowed || d.Reason != want[i].reason {
			t.Fatalf("store down, check %d: allowed %v reason %s, want %v %s", i, d.Allowed, d.Reason, want[i].allowed, want[i].reason)
		}
	}
	if out[1].Status != http.StatusServiceUnavailable {
		t.Fatalf("fail closed status %d", out[1].Status)
	}
}

func TestCompileRulesReusesUnchangedRules(t *testing.T) {
	l, rs := newEngine(t, counter.NewMemoryStore(), fixedSpec("a", 3, FailOpen), fixedSpec("b", 3, FailOpen))
	next, err := l.CompileRules([]RuleSpec{fixedSpec("a", 3, FailOpen), fixedSpec("b", 4, FailOpen)}, rs)
	if err != nil {
		t.Fatal(err)
	}
	if next.Rule("a") != rs.Rule("a") || next.Rule("b") == rs.Rule("b") {
		t.Fatal("want a reused and b rebuilt")
	}
	if got := next.Rule("b").Spec().Limits[0].Limit.Quantity; got != 4 {
		t.Fatalf("b's quantity %d", got)
	}
	for _, bad := range [][]RuleSpec{
		{{Name: ""}},
		{{Name: "x"}},
		{fixedSpec("a", 1, FailOpen), fixedSpec("a", 2, FailOpen)},
		{fixedSpec("a", -1, FailOpen)},
	} {
		if _, err := l.CompileRules(bad, rs); !errors.Is(err, ErrConfig) {
			t.Fatalf("%+v: err %v, want ErrConfig", bad, err)
		}
	}
}
