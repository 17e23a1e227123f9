package bench

// End-to-end tests of every popbench scenario in a short mode: real
// processes (memcached when installed, else mcproxy's embedded shards;
// mcproxy; edge workers) on loopback, bounded seconds each, and the JSON
// each scenario prints checked for sane values.

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/poplimit/poplimit/bench/fixture"
	"github.com/poplimit/poplimit/counter"
)

func TestMain(m *testing.M) { os.Exit(fixture.Main(m)) }

// testBins are mcproxy and edge, built once for every end-to-end test.
func testBins(t *testing.T) *Binaries {
	return &Binaries{MCProxy: fixture.Binary(t, "mcproxy"), Edge: fixture.Binary(t, "edge")}
}

func newTestEnv(t *testing.T, edge bool) *Env {
	t.Helper()
	if testing.Short() {
		t.Skip("end-to-end scenario: skipped with -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	env, err := NewEnv(ctx, EnvConfig{Edge: edge, Dir: t.TempDir(), Bins: testBins(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(env.Close)
	if env.ProxyErr != nil {
		t.Fatalf("mcproxy does not build: %v", env.ProxyErr)
	}
	if edge && env.EdgeErr != nil {
		t.Fatalf("edge does not build: %v", env.EdgeErr)
	}
	return env
}

// jsonOf marshals v and decodes it generically, as a consumer of --json
// would see it.
func jsonOf(t *testing.T, v any) map[string]any {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func num(t *testing.T, m map[string]any, key string) float64 {
	t.Helper()
	v, ok := m[key].(float64)
	if !ok {
		t.Fatalf("JSON field %q missing or not a number in %v", key, m)
	}
	return v
}

func TestDemoEndToEnd(t *testing.T) {
	env := newTestEnv(t, true)
	out := t.TempDir()
	res, err := runDemo(context.Background(), env, DemoConfig{Duration: 4 * time.Second, OutDir: out})
	if err != nil {
		t.Fatal(err)
	}
	j := jsonOf(t, res)
	if num(t, j, "requests") < 500 || num(t, j, "throughput_per_s") <= 0 {
		t.Fatalf("too little traffic: %v", j)
	}
	if rt := num(t, j, "store_roundtrips_per_decision"); rt <= 0 || rt > 3 {
		t.Errorf("store round trips per decision %v", rt)
	}
	if p50 := num(t, j["latency"].(map[string]any), "p50_ms"); p50 <= 0 || p50 > 1000 {
		t.Errorf("p50 %vms", p50)
	}
	for _, c := range res.Clients {
		switch c.Kind {
		case Legit:
			if c.Rejected != 0 {
				t.Errorf("legitimate %s rejected %d times", c.ID, c.Rejected)
			}
		case Abusive:
			// Refund mode: held near the limit (the sliding window is an
			// estimate; a loose bound), most of the excess rejected —
			// unless the store was too slow and the route failed open or
			// the local budget decided, which the result must then show.
			if c.Rejected == 0 || c.Admitted >= c.Offered {
				t.Errorf("abusive %s: admitted %d of %d", c.ID, c.Admitted, c.Offered)
			}
			if c.AdmittedRate > 1.5*c.Limit && res.FailOpen == 0 && res.StoreSlow == 0 {
				t.Errorf("abusive %s: admitted %.1f/s for a limit of %.0f/s with no fail-open or local-budget decision", c.ID, c.AdmittedRate, c.Limit)
			}
		case credentialStuffer:
			if c.Rejected == 0 || c.AdmittedRate > c.Limit {
				t.Errorf("stuffer %s: admitted %.1f/s, rejected %d", c.ID, c.AdmittedRate, c.Rejected)
			}
		}
	}
	if res.UpstreamHits < res.Outcomes["admitted"]*9/10 {
		t.Errorf("upstream saw %d of %d admitted requests", res.UpstreamHits, res.Outcomes["admitted"])
	}
	for _, f := range append([]string{res.Report}, res.Charts...) {
		if st, err := os.Stat(f); err != nil || st.Size() == 0 {
			t.Errorf("report file %s: %v", f, err)
		}
	}
	md, _ := os.ReadFile(res.Report)
	for _, c := range res.Charts {
		if !containsStr(string(md), filepath.Base(c)) {
			t.Errorf("report does not link %s", filepath.Base(c))
		}
	}
}

func containsStr(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}

func TestLoadEndToEnd(t *testing.T) {
	env := newTestEnv(t, true)
	res, err := runLoad(context.Background(), env, LoadConfig{Duration: time.Second, Conns: 8, Keys: 1000})
	if err != nil {
		t.Fatal(err)
	}
	j := jsonOf(t, res)
	sums := j["per_algorithm"].([]any)
	if len(sums) != 3 {
		t.Fatalf("%d algorithms", len(sums))
	}
	for _, s := range sums {
		m := s.(map[string]any)
		d := num(t, m, "decisions")
		if d < 100 || num(t, m, "decisions_per_s") <= 0 {
			t.Errorf("%v: too few decisions", m)
		}
		if e := num(t, m, "errors"); e > d/100 {
			t.Errorf("%v: %v errors", m["algorithm"], e)
		}
		if rt := num(t, m, "store_ops_per_decision"); rt < 0.9 || rt > 4 {
			t.Errorf("%v: %v store ops per decision", m["algorithm"], rt)
		}
		if cpu := num(t, m, "pop_cpu_s_per_million"); cpu <= 0 {
			t.Errorf("%v: PoP CPU %v s per million decisions", m["algorithm"], cpu)
		}
	}
}

func TestPopsEndToEnd(t *testing.T) {
	env := newTestEnv(t, true)
	rep, err := runPops(context.Background(), env, PopsConfig{PoPs: 2, Shards: 1, Duration: 2 * time.Second,
		Algorithm: counter.FixedWindow})
	if err != nil {
		t.Fatal(err)
	}
	j := jsonOf(t, rep)
	if j["independent"] != true {
		t.Fatalf("PoPs not independent: %v", j)
	}
	for _, p := range rep.PoPs {
		if p.Admitted == 0 || p.Rejected == 0 || p.Errors != 0 {
			t.Errorf("%+v: each PoP must admit up to its limit and reject the rest", p)
		}
	}
	if num(t, j, "admitted_per_s") <= num(t, j, "limit_per_s") {
		t.Errorf("together the PoPs admitted no more than one limit: %v", j)
	}
}

func TestCentralEndToEnd(t *testing.T) {
	env := newTestEnv(t, false)
	rep, err := runCentral(context.Background(), env, CentralConfig{RTT: 20 * time.Millisecond, Duration: time.Second,
		Rounds: 2, InProcess: true, Users: 10})
	if err != nil {
		t.Fatal(err)
	}
	j := jsonOf(t, rep)
	if len(rep.Runs) != 4 || rep.Runs[0].Store == rep.Runs[1].Store {
		t.Fatalf("runs not interleaved: %+v", rep.Runs)
	}
	if r := num(t, j, "ratio_p50"); r <= 1 {
		t.Errorf("central/per-PoP p50 ratio %v with a 20ms round trip injected", r)
	}
	// The injected delay is a floor on the central store's median.
	if p50 := num(t, j["central"].(map[string]any), "p50_ms"); p50 < 20 {
		t.Errorf("central p50 %vms below the injected 20ms", p50)
	}
	for _, r := range rep.Runs {
		if r.Requests == 0 || r.Errors*20 > int64(r.Requests) {
			t.Errorf("%+v", r)
		}
	}
}
