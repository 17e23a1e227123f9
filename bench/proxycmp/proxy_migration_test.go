package proxycmp

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/poplimit/poplimit/bench/fixture"
	"github.com/poplimit/poplimit/bench/fixture/procs"
)

// TestTwemproxyMigration is issue 5's drop-in test: keys written through
// Debian's nutcracker are all read back through mcproxy started with the
// same nutcracker.yml (only the listen address changed), so a pool moves
// from Twemproxy to mcproxy with no cold cache.
func TestTwemproxyMigration(t *testing.T) {
	shards := fixture.Memcached(t, 3)
	fixture.RequireNutcracker(t)
	bin := fixture.Binary(t, "mcproxy")
	tests := []struct {
		name    string
		hash    string
		hashTag string
		entry   func(i int, addr string) string
	}{
		{"fnv1a_64 named weighted hash_tag", "fnv1a_64", "{}",
			func(i int, addr string) string { return fmt.Sprintf("%s:%d mc-%c", addr, i+1, 'a'+i) }},
		{"md5 plain", "md5", "",
			func(i int, addr string) string { return addr + ":1" }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pool := procs.TwemproxyPool{Hash: tc.hash, HashTag: tc.hashTag, Distribution: "ketama", TimeoutMS: 2000}
			for i, m := range shards {
				pool.Servers = append(pool.Servers, tc.entry(i, m.Addr))
				fixture.Flush(t, m.Addr)
			}
			nc := fixture.Nutcracker(t, pool)

			keys := fixture.MigrationKeys(10000)
			fixture.SetValues(t, nc.Addr, keys)

			dir := t.TempDir()
			pool.Listen = fixture.FreeAddr(t)
			cfgPath := filepath.Join(dir, "nutcracker.yml")
			if err := os.WriteFile(cfgPath, []byte(pool.YAML()), 0o644); err != nil {
				t.Fatal(err)
			}
			mc, err := procs.StartProc("mcproxy", bin, []string{"--config", cfgPath,
				"--admin", fixture.FreeAddr(t)}, filepath.Join(dir, "mcproxy.log"))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { mc.Stop(2 * time.Second) })
			if err := mc.WaitReady(context.Background(), 5*time.Second, func() error {
				return procs.Ping(pool.Listen, 200*time.Millisecond)
			}); err != nil {
				t.Fatal(err)
			}

			hits, wrong := fixture.GetValues(t, pool.Listen, keys)
			t.Logf("%s: %d/%d hits through mcproxy, %d wrong values", tc.name, hits, len(keys), wrong)
			if hits != len(keys) || wrong != 0 {
				log, _ := os.ReadFile(filepath.Join(dir, "mcproxy.log"))
				t.Fatalf("%d/%d keys written via nutcracker found via mcproxy (%d wrong values), want all; mcproxy log: %s",
					hits, len(keys), wrong, procs.LastLines(string(log), 5))
			}
		})
	}
}
