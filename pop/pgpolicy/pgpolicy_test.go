package pgpolicy_test

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/poplimit/poplimit/bench/fixture"
	"github.com/poplimit/poplimit/counter"
	"github.com/poplimit/poplimit/counter/memstore"
	"github.com/poplimit/poplimit/pop"
	"github.com/poplimit/poplimit/pop/pgpolicy"
)

var outage = flag.Duration("pg-outage", 3*time.Second, "how long TestOutage keeps PostgreSQL down (the issue's 30s: -pg-outage=30s -timeout 2m)")

// worker is one Limiter kept current by its own Source.
type worker struct {
	lim     *pop.Limiter
	src     *pgpolicy.Source
	metrics *pgpolicy.Metrics
	cache   string
}

type env struct {
	t       *testing.T
	pool    *pgxpool.Pool
	workers []*worker
	store   counter.Store
	dsn     string
	stopPG  func()
	upPG    func() error
}

func newWorker(t *testing.T, e *env, cache string) *worker {
	w := &worker{cache: cache}
	var err error
	w.lim, err = pop.New(pop.Config{
		NewShared: func(l counter.Limit) (counter.Allower, error) { return counter.New(e.store, l) },
		Logger:    slog.New(slog.DiscardHandler),
		HealthReasons: func() []string {
			if w.src == nil {
				return nil
			}
			return w.src.HealthReasons()
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if w.metrics, err = pgpolicy.NewMetrics(prometheus.NewRegistry()); err != nil {
		t.Fatal(err)
	}
	w.src, err = pgpolicy.New(pgpolicy.Config{DSN: e.dsn, Install: w.lim.LoadPolicy, CachePath: cache, Metrics: w.metrics,
		MinBackoff: 50 * time.Millisecond, MaxBackoff: 400 * time.Millisecond, ConnectTimeout: time.Second, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func (w *worker) run(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); w.src.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}

// setup starts PostgreSQL, migrates (twice: idempotent), writes tiers free
// (anonymous, 3/min) and pro (10000/min) and key k1 on free, and starts
// four workers.
func setup(t *testing.T) *env {
	pg := fixture.Postgres(t)
	e := &env{t: t, store: memstore.New(), dsn: pg.DSN, stopPG: pg.Down}
	e.upPG = func() error {
		err := pg.Up(context.Background())
		// The test's own pool still holds connections the stopped server
		// closed: the next admin call would fail on one (57P01).
		e.pool.Reset()
		return err
	}
	ctx := context.Background()
	var err error
	if e.pool, err = pgxpool.New(ctx, pg.DSN); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.pool.Close)
	if got, err := pgpolicy.Migrate(ctx, e.pool); err != nil || len(got) != 3 {
		t.Fatalf("migrate: %v %v", got, err)
	}
	if got, err := pgpolicy.Migrate(ctx, e.pool); err != nil || len(got) != 0 {
		t.Fatalf("second migrate applied %v, %v: want nothing", got, err)
	}
	for _, tr := range []pgpolicy.TierRow{
		{TierName: "free", RoutePattern: "GET /api/", WindowSeconds: 60, MaxRequests: 3, FailMode: "open", IsAnonymous: true},
		{TierName: "pro", RoutePattern: "GET /api/", WindowSeconds: 60, MaxRequests: 10000000, FailMode: "open"},
	} {
		if err := pgpolicy.SetTier(ctx, e.pool, tr); err != nil {
			t.Fatal(err)
		}
	}
	if err := pgpolicy.IssueKey(ctx, e.pool, "k1", "", "free"); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for i := range 4 {
		w := newWorker(t, e, filepath.Join(dir, fmt.Sprintf("cache-%d.json", i)))
		w.run(t)
		e.workers = append(e.workers, w)
	}
	for _, w := range e.workers {
		waitFor(t, 10*time.Second, func() bool { return decide(w.lim, "k1").Tier == "free" })
	}
	return e
}

func decide(l *pop.Limiter, key string) pop.Decision {
	r := httptest.NewRequest("GET", "/api/x", nil)
	r.RemoteAddr = "192.0.2.1:1"
	r.Header.Set("X-API-Key", key)
	return l.Decide(context.Background(), r, time.Now())
}

func waitFor(t *testing.T, limit time.Duration, ok func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !ok() {
		if time.Since(start) > limit {
			t.Fatalf("not reached after %v", limit)
		}
		time.Sleep(2 * time.Millisecond)
	}
	return time.Since(start)
}

// load decides requests with key on every worker until stop, counting
// failures: a 5xx, or a status the test does not expect (want).
type load struct {
	stop     chan struct{}
	wg       sync.WaitGroup
	n, fails atomic.Int64
	last     atomic.Value
}

func startLoad(e *env, key string, want func(pop.Decision) bool) *load {
	ld := &load{stop: make(chan struct{})}
	for _, w := range e.workers {
		ld.wg.Add(1)
		go func() {
			defer ld.wg.Done()
			for {
				select {
				case <-ld.stop:
					return
				default:
				}
				d := decide(w.lim, key)
				ld.n.Add(1)
				if d.Status >= 500 || !want(d) {
					ld.fails.Add(1)
					ld.last.Store(fmt.Sprintf("%+v", d))
				}
				time.Sleep(time.Millisecond)
			}
		}()
	}
	return ld
}

func (ld *load) end(t *testing.T) {
	close(ld.stop)
	ld.wg.Wait()
	if f := ld.fails.Load(); f > 0 {
		t.Fatalf("%d of %d requests failed, last %v", f, ld.n.Load(), ld.last.Load())
	}
	t.Logf("%d requests, none failed", ld.n.Load())
}

// allSee waits until every worker's decision for key satisfies ok and
// returns how long that took.
func allSee(t *testing.T, e *env, key string, ok func(pop.Decision) bool) time.Duration {
	start := time.Now()
	for _, w := range e.workers {
		waitFor(t, 10*time.Second, func() bool { return ok(decide(w.lim, key)) })
	}
	return time.Since(start)
}

func isTier(tier string) func(pop.Decision) bool {
	return func(d pop.Decision) bool { return d.Tier == tier }
}

// TestTierUpgradeAndRevocation: under load from four workers, moving k1 to
// pro reaches all four (measured; the issue wants under 1 s) with no
// request failed, and revoking it answers 403 everywhere.
func TestTierUpgradeAndRevocation(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	ld := startLoad(e, "k1", func(d pop.Decision) bool { return d.Allowed || d.Status == 429 || d.Status == 403 })
	t0 := time.Now()
	if err := pgpolicy.IssueKey(ctx, e.pool, "k1", "", "pro"); err != nil {
		t.Fatal(err)
	}
	allSee(t, e, "k1", isTier("pro"))
	t.Logf("tier upgrade applied by all 4 workers %v after commit", time.Since(t0).Round(time.Millisecond))
	t1 := time.Now()
	if err := pgpolicy.SetKeyActive(ctx, e.pool, "k1", false); err != nil {
		t.Fatal(err)
	}
	allSee(t, e, "k1", func(d pop.Decision) bool { return d.Status == http.StatusForbidden })
	t.Logf("key deactivation enforced (403) by all 4 workers %v after commit", time.Since(t1).Round(time.Millisecond))
	ld.end(t)
	if err := pgpolicy.SetKeyActive(ctx, e.pool, "nope", false); err == nil {
		t.Fatal("revoking an unknown key succeeded")
	}
}

// TestOutage: PostgreSQL restarted, then down for -pg-outage: the four
// workers keep the old snapshot with no failed request and say degraded;
// back up, they catch up with a change made afterwards; a worker
// started while it is down serves its cached snapshot.
func TestOutage(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	if err := pgpolicy.IssueKey(ctx, e.pool, "k1", "", "pro"); err != nil {
		t.Fatal(err)
	}
	allSee(t, e, "k1", isTier("pro"))
	ld := startLoad(e, "k1", isTier("pro"))
	if err := e.upPGAfter(); err != nil {
		t.Fatal(err)
	}
	e.stopPG()
	start := time.Now()
	// Started while PostgreSQL is down: the cache of worker 0.
	late := newWorker(t, e, e.workers[0].cache)
	if err := late.src.LoadCache(); err != nil {
		t.Fatal(err)
	}
	late.run(t)
	if d := decide(late.lim, "k1"); d.Tier != "pro" {
		t.Fatalf("late worker from cache: %+v, want pro", d)
	}
	waitFor(t, 5*time.Second, func() bool { return e.workers[0].lim.Health().Status == pop.HealthDegraded })
	t.Logf("degraded: %v", e.workers[0].lim.Health().Reasons)
	time.Sleep(*outage - time.Since(start))
	if err := e.upPG(); err != nil {
		t.Fatal(err)
	}
	t.Logf("PostgreSQL down %v", time.Since(start).Round(time.Millisecond))
	ld.end(t)
	t1 := time.Now()
	if err := pgpolicy.SetKeyActive(ctx, e.pool, "k1", false); err != nil {
		t.Fatal(err)
	}
	e.workers = append(e.workers, late)
	allSee(t, e, "k1", func(d pop.Decision) bool { return d.Status == http.StatusForbidden })
	t.Logf("after the outage a revocation reached all 5 workers in %v", time.Since(t1).Round(time.Millisecond))
	for _, w := range e.workers {
		waitFor(t, 5*time.Second, func() bool { return w.lim.Health().Status == pop.HealthOK })
	}
}

// upPGAfter restarts PostgreSQL (down and up at once) and waits until
// every worker answers a change made after it.
func (e *env) upPGAfter() error {
	e.stopPG()
	if err := e.upPG(); err != nil {
		return err
	}
	if err := pgpolicy.SetTier(context.Background(), e.pool, pgpolicy.TierRow{TierName: "gold", RoutePattern: "GET /api/", WindowSeconds: 60, MaxRequests: 5}); err != nil {
		return err
	}
	if err := pgpolicy.IssueKey(context.Background(), e.pool, "k2", "", "gold"); err != nil {
		return err
	}
	allSee(e.t, e, "k2", isTier("gold"))
	return nil
}

// TestBadInput: rows that do not validate are skipped (metric, snapshot
// kept for the rest), a malformed NOTIFY payload causes a full re-read,
// and a key given as SQL text is only ever a parameter.
func TestBadInput(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	w := e.workers[0]
	for _, q := range []string{
		`INSERT INTO rate_limit_policies (policy_id, tier_name, route_pattern, window_seconds, max_requests, fail_mode) VALUES (gen_random_uuid(), 'neg', 'GET /neg/', 60, -5, 'open')`,
		`INSERT INTO rate_limit_policies (policy_id, tier_name, route_pattern, window_seconds, max_requests, fail_mode) VALUES (gen_random_uuid(), 'fm', 'GET /fm/', 60, 5, 'sideways')`,
		`INSERT INTO rate_limit_policies (policy_id, tier_name, route_pattern, window_seconds, max_requests, fail_mode) VALUES (gen_random_uuid(), 'rt', 'GET /{bad', 60, 5, 'open')`,
		`INSERT INTO client_api_keys (api_key, is_active) VALUES ('not-a-digest', true)`,
	} {
		if _, err := e.pool.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 5*time.Second, func() bool {
		return testutil.ToFloat64(w.metrics.SkippedRows("rate_limit_policies")) >= 3 && testutil.ToFloat64(w.metrics.SkippedRows("client_api_keys")) >= 1
	})
	if d := decide(w.lim, "k1"); d.Tier != "free" {
		t.Fatalf("after bad rows: %+v, want k1 still free", d)
	}
	full := testutil.ToFloat64(w.metrics.Loads("full", "ok"))
	if _, err := e.pool.Exec(ctx, `SELECT pg_notify($1, $2)`, pgpolicy.Channel, "{not json"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, func() bool {
		return testutil.ToFloat64(w.metrics.Notifications("malformed")) == 1 && testutil.ToFloat64(w.metrics.Loads("full", "ok")) > full
	})
	evil := "x'); DROP TABLE client_api_keys; --"
	if err := pgpolicy.IssueKey(ctx, e.pool, evil, "", "pro"); err != nil {
		t.Fatal(err)
	}
	allSee(t, e, evil, isTier("pro"))
}
