package differential

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/poplimit/poplimit/bench"
	"github.com/poplimit/poplimit/bench/fixture"
)

func TestMain(m *testing.M) { os.Exit(fixture.Main(m)) }

// TestRLSAnswersAsThePeerOnRandomScripts is the short form of `popbench
// rls --differential`: fixed seeds, each replayed against rls over
// mcproxy + memcached and over a Redis Cluster, lockstep with
// envoyproxy/ratelimit over Redis; every unexpected difference fails.
func TestRLSAnswersAsThePeerOnRandomScripts(t *testing.T) {
	peer := fixture.Ratelimit(t)
	fixture.RequireMemcached(t)
	fixture.RequireRedis(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	start := time.Now()
	results, err := runSeeds(ctx, Config{
		Seeds: []uint64{1, 2, 3}, Requests: 200, Stores: []bench.StoreKind{bench.StoreMemcached, bench.StoreRedis},
		RLSBin: fixture.Binary(t, "rls"), MCProxyBin: fixture.Binary(t, "mcproxy"), PeerBin: peer, Dir: t.TempDir(),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d replays in %s", len(results), time.Since(start).Round(time.Millisecond))
	for _, r := range results {
		t.Logf("seed %d %-9s requests %d compared %d unexpected %d deliberate %d %v skipped %d", r.Seed, r.Store, r.Requests,
			r.Compared, r.Unexpected, r.Deliberate, r.ByDeliberate, r.Skipped)
		if r.Requests != r.Compared+r.Skipped || r.Compared != r.Equal+r.Deliberate+r.Unexpected {
			t.Errorf("seed %d %s: the counts do not add up: %+v", r.Seed, r.Store, r)
		}
		if r.Unexpected > 0 {
			t.Errorf("seed %d %s: %d unexpected differences, by class %v", r.Seed, r.Store, r.Unexpected, r.Classes)
		}
		for i, d := range r.Differences {
			if i == 5 {
				t.Logf("... %d more", len(r.Differences)-i)
				break
			}
			t.Log(d)
		}
	}
}
