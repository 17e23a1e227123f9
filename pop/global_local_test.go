package pop_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/poplimit/poplimit/counter"
	"github.com/poplimit/poplimit/pop"
	"github.com/poplimit/poplimit/pop/policy"
)

// downAllower is a global limit whose store always fails.
type downAllower struct{ l counter.Limit }

func (d downAllower) Limit() counter.Limit { return d.l }
func (d downAllower) AllowN(context.Context, string, time.Time, int64) (counter.Result, error) {
	return counter.Result{}, errors.New("home store down")
}
func (d downAllower) Undo(context.Context, string, time.Time, int64) error { return nil }

// TestGlobalLocalBudgetIsAShareOfEveryPoP: with its store failing, a global
// limit of 40 shared by 4 PoPs of 2 workers falls back to 40 ÷ 8 = 5 per
// worker; a per-PoP share (40 ÷ 2 = 20 on every worker of every PoP)
// would let the PoPs admit 4 × the limit together.
func TestGlobalLocalBudgetIsAShareOfEveryPoP(t *testing.T) {
	l, err := pop.New(pop.Config{
		WorkersPerPoP: 2, PoPs: 4,
		NewGlobal: func(lim counter.Limit, _ policy.FailMode) (counter.Allower, error) { return downAllower{lim}, nil },
		Logger:    slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	const policy = `version: 1
tiers:
  t:
    limits:
      - {name: planet, algorithm: fixed_window, quantity: 40, window: 1m, scope: global}
policies:
  - {name: api, routes: ["GET /"], identity: [ip], tier: t, fail_mode: local}
`
	if err := l.LoadBytes("g.yml", []byte(policy)); err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1_700_000_000, 0)
	admitted := 0
	for i := range 50 {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = "192.0.2.1:1234"
		d := l.Decide(context.Background(), r, now.Add(time.Duration(i)*time.Millisecond))
		if d.Allowed {
			admitted++
		}
	}
	if admitted != 5 {
		t.Fatalf("admitted %d of 50 with the global store down, want 40 ÷ (2 workers × 4 PoPs) = 5", admitted)
	}
}
