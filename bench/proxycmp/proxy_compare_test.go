package proxycmp

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/poplimit/poplimit/bench/fixture"
)

// TestRunProxyCompareTiny runs the whole comparison with tiny durations:
// three shards, nutcracker, and mcproxy when ./cmd/mcproxy builds.
func TestRunProxyCompareTiny(t *testing.T) {
	fixture.RequireMemcached(t)
	fixture.RequireNutcracker(t)
	var progress bytes.Buffer
	rep, err := runProxyCompare(context.Background(), ProxyCompareConfig{
		Conns: 4, Duration: 150 * time.Millisecond, Rounds: 2, Keys: 200,
		Dir: t.TempDir(), Progress: &progress,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("systems %d notes %q", len(rep.Systems), rep.Notes)
	if len(rep.Systems) < 2 || rep.Systems[0].Name != systemMemcached || rep.Systems[1].Name != systemNutcracker {
		t.Fatalf("systems %+v", rep.Systems)
	}
	if len(rep.Systems) == 2 && len(rep.Notes) == 0 {
		t.Error("mcproxy missing without a note")
	}
	if want := 3 * 2 * len(rep.Systems); len(rep.Runs) != want {
		t.Fatalf("%d runs, want %d", len(rep.Runs), want)
	}
	// Interleaved: within a mix, systems alternate round by round.
	for i, r := range rep.Runs[:2*len(rep.Systems)] {
		if r.System != rep.Systems[i%len(rep.Systems)].Name || r.Round != 1+i/len(rep.Systems) {
			t.Errorf("run %d is %s round %d", i, r.System, r.Round)
		}
	}
	for _, r := range rep.Runs {
		if r.Ops == 0 || r.Errors != 0 {
			t.Errorf("%s %s round %d: ops %d errors %d (%s)", r.Mix, r.System, r.Round, r.Ops, r.Errors, r.FirstError)
		}
		// CPU of the system, then of every shard it is not.
		want := 4
		if r.System == systemMemcached {
			want = 3
		}
		if len(r.CPUSeconds) != want {
			t.Errorf("%s %s: CPU of %d processes", r.Mix, r.System, len(r.CPUSeconds))
		}
		if r.Mix != mixIncr && r.Misses != 0 {
			t.Errorf("%s %s: %d misses after preload", r.Mix, r.System, r.Misses)
		}
	}
	if len(rep.Summary) != 3 {
		t.Fatalf("summary %+v", rep.Summary)
	}
	for _, ms := range rep.Summary {
		if ms.NutcrackerOverMemcached <= 0 || len(ms.Systems) != len(rep.Systems) {
			t.Errorf("%s summary %+v", ms.Mix, ms)
		}
		for _, ss := range ms.Systems {
			path := ss.ClientCPUPerMillion + ss.ShardsCPUPerMillion
			if ss.System != systemMemcached {
				path += ss.CPUPerMillion
			} else if ss.ShardsCPUPerMillion < ss.CPUPerMillion {
				t.Errorf("%s memcached: shards CPU %v below the shard's own %v", ms.Mix, ss.ShardsCPUPerMillion, ss.CPUPerMillion)
			}
			if d := ss.PathCPUPerMillion - path; d > 1e-9 || d < -1e-9 {
				t.Errorf("%s %s: path CPU %v, want client+proxy+shards %v", ms.Mix, ss.System, ss.PathCPUPerMillion, path)
			}
		}
		if (len(rep.Systems) == 3) != (ms.McproxyOverNutcracker > 0) {
			t.Errorf("%s: mcproxy/nutcracker ratio %v with %d systems", ms.Mix, ms.McproxyOverNutcracker, len(rep.Systems))
		}
	}
	var table bytes.Buffer
	if err := rep.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"side by side", "nutcracker/memcached", "mcproxy/nutcracker", "getset", "mget", "cpu s/Mop", "path cpu s/Mop"} {
		if !strings.Contains(table.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, table.String())
		}
	}
	if strings.Count(progress.String(), "\n") != len(rep.Runs) {
		t.Errorf("progress has %d lines for %d runs", strings.Count(progress.String(), "\n"), len(rep.Runs))
	}
}
