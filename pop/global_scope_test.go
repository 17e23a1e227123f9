package pop_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/poplimit/poplimit/counter"
	"github.com/poplimit/poplimit/counter/memstore"
	"github.com/poplimit/poplimit/pop"
	"github.com/poplimit/poplimit/pop/global"
	"github.com/poplimit/poplimit/pop/policy"
)

const globalPolicy = `version: 1
tiers:
  t:
    limits:
      - {name: pop, algorithm: fixed_window, quantity: 8, window: 1m}
      - {name: planet, algorithm: fixed_window, quantity: 5, window: 1m, scope: global}
policies:
  - {name: api, routes: ["GET /"], identity: [ip], tier: t}
`

func TestScopeGlobalParses(t *testing.T) {
	for _, tc := range []struct{ name, limit, want string }{
		{"bad scope", "{quantity: 5, window: 1m, algorithm: fixed_window, scope: planet}", "pop or global"},
		{"sliding global", "{quantity: 5, window: 1m, scope: global}", "fixed_window"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := policy.Parse("x.yml", []byte("version: 1\ntiers:\n  t:\n    limits: ["+tc.limit+"]\npolicies:\n  - {name: a, routes: [\"GET /\"], identity: [ip], tier: t}\n"))
			if !errors.Is(err, pop.ErrInvalidPolicy) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "scope") {
				t.Fatalf("err %v, want a scope error mentioning %q", err, tc.want)
			}
		})
	}
	f, err := policy.Parse("x.yml", []byte(globalPolicy))
	if err != nil {
		t.Fatal(err)
	}
	if ls := f.Tiers["t"].Limits; ls[0].Global || !ls[1].Global {
		t.Fatalf("scopes %v %v, want pop then global", ls[0].Global, ls[1].Global)
	}
}

func TestScopeGlobalNeedsAGlobalStore(t *testing.T) {
	l, err := pop.New(pop.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.LoadBytes("g.yml", []byte(globalPolicy)); !errors.Is(err, pop.ErrNoGlobal) {
		t.Fatalf("load without NewGlobal: %v, want ErrNoGlobal", err)
	}
}

// A request hits a per-PoP limit (8) and a global one (5) at once: the
// global limit binds across two PoPs, and its health reaches Health.
func TestScopeGlobalCompound(t *testing.T) {
	home := memstore.New()
	now := time.UnixMilli((time.Now().UnixMilli()/60000)*60000 + 1000)
	var homes []*global.Home
	var pops []*pop.Limiter
	for i := 0; i < 2; i++ {
		local := memstore.New()
		h, err := global.NewHome(global.Config{Local: local, Home: home, PoPs: 2})
		if err != nil {
			t.Fatal(err)
		}
		l, err := pop.New(pop.Config{
			NewShared: func(lim counter.Limit) (counter.Allower, error) { return counter.New(local, lim) },
			NewGlobal: func(lim counter.Limit, _ policy.FailMode) (counter.Allower, error) {
				return h.New(lim, global.FallbackShare)
			},
			HealthReasons: h.HealthReasons,
			Logger:        slog.New(slog.DiscardHandler),
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := l.LoadBytes("g.yml", []byte(globalPolicy)); err != nil {
			t.Fatal(err)
		}
		homes, pops = append(homes, h), append(pops, l)
	}
	admitted := 0
	for i := 0; i < 40; i++ {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = "192.0.2.1:1000"
		d := pops[i%2].Decide(context.Background(), r, now.Add(time.Duration(i)*100*time.Millisecond))
		if d.Allowed {
			admitted++
		}
		homes[i%2].Wait()
	}
	if admitted != 5 {
		t.Fatalf("admitted %d over two PoPs, want the global 5", admitted)
	}
	if h := pops[0].Health(); h.Status != pop.HealthOK {
		t.Errorf("health %+v", h)
	}
}
