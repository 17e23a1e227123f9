package proxy_test

import (
	"fmt"
	"math"
	"strconv"
	"testing"

	"github.com/poplimit/poplimit/bench/fixture"
	"github.com/poplimit/poplimit/bench/fixture/procs"
	"github.com/poplimit/poplimit/proxy"
	"github.com/poplimit/poplimit/shard"
)

// migServeYAML serves the one pool of a nutcracker.yml through an
// in-process mcproxy Router on a free loopback port, exactly as mcproxy
// --config would route it, and returns the address.
func migServeYAML(t *testing.T, yml string) string {
	t.Helper()
	pools, err := proxy.ParseConfig([]byte(yml), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(pools) != 1 {
		t.Fatalf("%d pools", len(pools))
	}
	rt, err := proxy.NewRouter(pools[0].RouterConfig())
	if err != nil {
		t.Fatal(err)
	}
	_, addr := proxy.ServeForTest(t, rt, nil)
	return addr
}

// TestModulaReadsNutcrackerKeys: 10,000 keys written through Debian's
// nutcracker with distribution modula (3 real memcached shards, weights
// 1,2,1, named) are all read back through mcproxy parsing the same
// nutcracker.yml (only the listen address changed). As a control, the same
// keys read through a ketama pool over the same shards mostly miss.
func TestModulaReadsNutcrackerKeys(t *testing.T) {
	shards := fixture.Memcached(t, 3)
	fixture.RequireNutcracker(t)
	tests := []struct {
		name    string
		hash    string
		hashTag string
	}{
		{"fnv1a_64", "fnv1a_64", ""},
		{"md5 hash_tag", "md5", "{}"},
	}
	weights := []int{1, 2, 1}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pool := procs.TwemproxyPool{Hash: tc.hash, HashTag: tc.hashTag, Distribution: shard.DistModula, TimeoutMS: 2000}
			for i, m := range shards {
				pool.Servers = append(pool.Servers, fmt.Sprintf("%s:%d mc-%c", m.Addr, weights[i], 'a'+i))
				fixture.Flush(t, m.Addr)
			}
			nc := fixture.Nutcracker(t, pool)
			keys := fixture.MigrationKeys(10000)
			fixture.SetValues(t, nc.Addr, keys)

			// Every shard holds its weight's share (a quarter, a half, a
			// quarter), so a wrong placement could not go unnoticed.
			for i, m := range shards {
				got, _ := fixture.GetValues(t, m.Addr, keys)
				want := float64(len(keys)*weights[i]) / 4
				if math.Abs(float64(got)-want) > 0.15*want {
					t.Errorf("shard %d (weight %d) holds %d keys, want about %.0f", i, weights[i], got, want)
				}
			}

			pool.Listen = fixture.FreeAddr(t)
			hits, wrong := fixture.GetValues(t, migServeYAML(t, pool.YAML()), keys)
			t.Logf("%s: %d/%d hits through mcproxy (modula), %d wrong values", tc.name, hits, len(keys), wrong)
			if hits != len(keys) || wrong != 0 {
				t.Fatalf("%d/%d keys written via nutcracker found via mcproxy (%d wrong values), want all", hits, len(keys), wrong)
			}

			ketama := pool
			ketama.Distribution, ketama.Listen = shard.DistKetama, fixture.FreeAddr(t)
			hits, _ = fixture.GetValues(t, migServeYAML(t, ketama.YAML()), keys)
			t.Logf("%s: control: %d/%d hits through a ketama pool", tc.name, hits, len(keys))
			if hits > len(keys)*3/4 {
				t.Errorf("a ketama pool found %d/%d modula-placed keys: the test cannot tell placements apart", hits, len(keys))
			}
		})
	}
}

// TestRandomSpreadLikeNutcracker: with distribution random, Twemproxy
// ignores weights and keys, spreading sets evenly over the live shards;
// mcproxy parsing the same YAML spreads them the same way (weights 1,2,1,
// 3,000 sets each, a loose ±20% bound per shard).
func TestRandomSpreadLikeNutcracker(t *testing.T) {
	shards := fixture.Memcached(t, 3)
	fixture.RequireNutcracker(t)
	pool := procs.TwemproxyPool{Hash: "fnv1a_64", Distribution: shard.DistRandom, TimeoutMS: 2000}
	for i, m := range shards {
		pool.Servers = append(pool.Servers, fmt.Sprintf("%s:%d mc-%c", m.Addr, []int{1, 2, 1}[i], 'a'+i))
	}
	const n = 3000
	spread := func(via, prefix string) []int {
		keys := make([]string, n)
		for i := range keys {
			keys[i] = prefix + strconv.Itoa(i)
		}
		fixture.SetValues(t, via, keys)
		got := make([]int, len(shards))
		total := 0
		for i, m := range shards {
			got[i], _ = fixture.GetValues(t, m.Addr, keys)
			total += got[i]
		}
		if total != n {
			t.Fatalf("%d keys stored in all, want %d (each set on one shard)", total, n)
		}
		return got
	}
	nc := fixture.Nutcracker(t, pool)
	ncSpread := spread(nc.Addr, "rnd:nc:")
	pool.Listen = fixture.FreeAddr(t)
	mcSpread := spread(migServeYAML(t, pool.YAML()), "rnd:mc:")
	t.Logf("keys per shard (weights 1,2,1): nutcracker %v, mcproxy %v", ncSpread, mcSpread)
	for name, got := range map[string][]int{"nutcracker": ncSpread, "mcproxy": mcSpread} {
		for i, c := range got {
			if math.Abs(float64(c)-n/3.0) > 0.2*n/3.0 {
				t.Errorf("%s: shard %d got %d of %d sets, want about %d", name, i, c, n, n/3)
			}
		}
	}
}
