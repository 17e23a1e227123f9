package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// buildMcproxyForTest builds ./cmd/mcproxy; a checkout where it does not
// build skips the test, or fails it under make test (RequireMemcachedEnv).
func buildMcproxyForTest(t *testing.T) string {
	t.Helper()
	bins, err := Build(context.Background(), t.TempDir(), "mcproxy")
	if errors.Is(err, ErrNotBuilt) && os.Getenv(RequireMemcachedEnv) == "" {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	return bins["mcproxy"]
}

// TestTwemproxyMigration is issue 5's drop-in test: keys written through
// Debian's nutcracker are all read back through mcproxy started with the
// same nutcracker.yml (only the listen address changed), so a pool moves
// from Twemproxy to mcproxy with no cold cache.
func TestTwemproxyMigration(t *testing.T) {
	shards := MemcachedForTest(t, 3)
	if !NutcrackerInstalled() && os.Getenv(RequireMemcachedEnv) == "" {
		t.Skip(ErrNoNutcracker)
	}
	bin := buildMcproxyForTest(t)
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
			pool := TwemproxyPool{Hash: tc.hash, HashTag: tc.hashTag, Distribution: "ketama", TimeoutMS: 2000}
			for i, m := range shards {
				pool.Servers = append(pool.Servers, tc.entry(i, m.Addr))
				FlushForTest(t, m.Addr)
			}
			nc := NutcrackerForTest(t, pool)

			keys := MigrationKeys(10000)
			SetValuesForTest(t, nc.Addr, keys)

			dir := t.TempDir()
			pool.Listen = FreeAddrForTest(t)
			cfgPath := filepath.Join(dir, "nutcracker.yml")
			if err := os.WriteFile(cfgPath, []byte(pool.YAML()), 0o644); err != nil {
				t.Fatal(err)
			}
			mc, err := StartProc("mcproxy", bin, []string{"--config", cfgPath,
				"--admin", FreeAddrForTest(t)}, filepath.Join(dir, "mcproxy.log"))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { mc.Stop(2 * time.Second) })
			if err := mc.WaitReady(context.Background(), 5*time.Second, func() error {
				return Ping(pool.Listen, 200*time.Millisecond)
			}); err != nil {
				t.Fatal(err)
			}

			hits, wrong := GetValuesForTest(t, pool.Listen, keys)
			t.Logf("%s: %d/%d hits through mcproxy, %d wrong values", tc.name, hits, len(keys), wrong)
			if hits != len(keys) || wrong != 0 {
				log, _ := os.ReadFile(filepath.Join(dir, "mcproxy.log"))
				t.Fatalf("%d/%d keys written via nutcracker found via mcproxy (%d wrong values), want all; mcproxy log: %s",
					hits, len(keys), wrong, lastLines(string(log), 5))
			}
		})
	}
}
