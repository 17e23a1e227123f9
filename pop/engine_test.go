package pop

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/poplimit/poplimit/counter"
	"github.com/poplimit/poplimit/counter/memstore"
	"github.com/poplimit/poplimit/pop/policy"
)

func fixedSpec(name string, q int64, fm policy.FailMode) RuleSpec {
	return RuleSpec{Name: name, FailMode: fm, Limits: []policy.LimitSpec{{Limit: counter.Limit{Name: "l", Algorithm: counter.FixedWindow, Quantity: q, Window: time.Minute}}}}
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
	l, rs := newEngine(t, memstore.New(), fixedSpec("a", 3, policy.FailOpen))
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

// TestDecideAllSameIdentityInBatchOrder: checks of one identity in one
// batch are decided in batch order, each seeing the counts after those
// before it (checks of zero hits included), in small batches and in
// batches large enough to find them by map.
func TestDecideAllSameIdentityInBatchOrder(t *testing.T) {
	l, rs := newEngine(t, memstore.New(), fixedSpec("a", 3, policy.FailOpen), fixedSpec("b", 3, policy.FailOpen))
	a, b := rs.Rule("a"), rs.Rule("b")
	now := t0.Add(time.Second)
	for _, filler := range []int{0, 20} { // 20: above maxScanned
		t.Run(fmt.Sprintf("filler %d", filler), func(t *testing.T) {
			id := []string{"d", "k", fmt.Sprint(filler)}
			var checks []Check
			var want []int64 // remaining; -1: refused
			for i, hits := range []int64{0, 2, 0, 1, 1, 0} {
				checks = append(checks, Check{Rule: a, Parts: id, Hits: hits})
				want = append(want, []int64{3, 1, 1, 0, -1, -1}[i])
				// Another rule's check of the same parts between: its own count.
				checks = append(checks, Check{Rule: b, Parts: id, Hits: 1})
				want = append(want, []int64{2, 1, 0, -1, -1, -1}[i])
			}
			for i := range filler {
				checks = append(checks, Check{Rule: a, Parts: []string{"d", "k", fmt.Sprint("other", filler, i)}, Hits: 1})
				want = append(want, 2)
			}
			out := make([]Decision, len(checks))
			l.DecideAll(context.Background(), checks, now, out)
			for i, d := range out {
				got := d.Binding.Result.Remaining
				if !d.Allowed {
					got = -1
				}
				if got != want[i] {
					t.Errorf("check %d (rule %s, hits %d): remaining %d (allowed %v), want %d", i, checks[i].Rule.Spec().Name, checks[i].Hits, d.Binding.Result.Remaining, d.Allowed, want[i])
				}
			}
		})
	}
}

// TestDecideAllDryRunRule: a rule of dry-run limits admits, reports each
// result in ShadowBinding (a check of zero hits too) and names the limit
// that would have rejected, for requests of one hit and of several.
func TestDecideAllDryRunRule(t *testing.T) {
	spec := fixedSpec("s", 3, policy.FailOpen)
	spec.Limits[0].Shadow = true
	l, rs := newEngine(t, memstore.New(), spec)
	r := rs.Rule("s")
	now := t0.Add(time.Second)
	for i, s := range []struct {
		hits       int64
		wouldAdmit bool
		remaining  int64
	}{
		{2, true, 1}, {0, true, 1}, {1, true, 0}, {2, false, 0}, {0, false, 0}, {1, false, 0},
	} {
		d := decideOne(l, Check{Rule: r, Parts: []string{"d", "k", "v"}, Hits: s.hits}, now)
		sb := d.ShadowBinding.Result
		if !d.Allowed || (d.Shadow == "") != s.wouldAdmit || sb.Allowed != s.wouldAdmit || sb.Remaining != s.remaining || d.ShadowBinding.Limit.Quantity != 3 {
			t.Errorf("step %d (hits %d): allowed %v shadow %q binding %+v, want admitted, would admit %v, remaining %d",
				i, s.hits, d.Allowed, d.Shadow, d.ShadowBinding, s.wouldAdmit, s.remaining)
		}
	}
}

func TestDecideAllBatchAndFailModes(t *testing.T) {
	clock := newTestClock(t0)
	store := newFlakyStore(clock.Now)
	l, rs := newEngine(t, store, fixedSpec("open", 1, policy.FailOpen), fixedSpec("closed", 1, policy.FailClosed), fixedSpec("local", 1, policy.FailLocal))
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
	l, rs := newEngine(t, memstore.New(), fixedSpec("a", 3, policy.FailOpen), fixedSpec("b", 3, policy.FailOpen))
	next, err := l.CompileRules([]RuleSpec{fixedSpec("a", 3, policy.FailOpen), fixedSpec("b", 4, policy.FailOpen)}, rs)
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
		{fixedSpec("a", 1, policy.FailOpen), fixedSpec("a", 2, policy.FailOpen)},
		{fixedSpec("a", -1, policy.FailOpen)},
	} {
		if _, err := l.CompileRules(bad, rs); !errors.Is(err, ErrConfig) {
			t.Fatalf("%+v: err %v, want ErrConfig", bad, err)
		}
	}
}
