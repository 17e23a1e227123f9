package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
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
				flushShard(t, m.Addr)
			}
			nc := NutcrackerForTest(t, pool)

			keys := make([]string, 10000)
			for i := range keys {
				if i%3 == 0 {
					keys[i] = fmt.Sprintf("rl:{user%d}:w%d", i/3, i%7)
				} else {
					keys[i] = "mig:" + strconv.Itoa(i)
				}
			}
			writeValues(t, nc.Addr, keys)

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

			hits, wrong := readValues(t, pool.Listen, keys)
			t.Logf("%s: %d/%d hits through mcproxy, %d wrong values", tc.name, hits, len(keys), wrong)
			if hits != len(keys) || wrong != 0 {
				log, _ := os.ReadFile(filepath.Join(dir, "mcproxy.log"))
				t.Fatalf("%d/%d keys written via nutcracker found via mcproxy (%d wrong values), want all; mcproxy log: %s",
					hits, len(keys), wrong, lastLines(string(log), 5))
			}
		})
	}
}

func flushShard(t *testing.T, addr string) {
	t.Helper()
	rw := DialForTest(t, addr)
	rw.WriteString("flush_all\r\n")
	if err := rw.Flush(); err != nil {
		t.Fatal(err)
	}
	if line, err := rw.ReadString('\n'); err != nil || line != "OK\r\n" {
		t.Fatalf("flush_all %s: %q %v", addr, line, err)
	}
}

// writeValues sets keys[i] to "v<i>", 100 pipelined sets at a time.
func writeValues(t *testing.T, addr string, keys []string) {
	t.Helper()
	rw := DialForTest(t, addr)
	for lo := 0; lo < len(keys); lo += 100 {
		hi := min(lo+100, len(keys))
		for i := lo; i < hi; i++ {
			v := "v" + strconv.Itoa(i)
			fmt.Fprintf(rw, "set %s 0 0 %d\r\n%s\r\n", keys[i], len(v), v)
		}
		if err := rw.Flush(); err != nil {
			t.Fatal(err)
		}
		for i := lo; i < hi; i++ {
			if line, err := rw.ReadString('\n'); err != nil || line != "STORED\r\n" {
				t.Fatalf("set %q via %s: %q %v", keys[i], addr, line, err)
			}
		}
	}
}

// readValues gets keys in 100-key multi-gets and counts the keys found and
// those found with a value other than "v<i>".
func readValues(t *testing.T, addr string, keys []string) (hits, wrong int) {
	t.Helper()
	index := make(map[string]int, len(keys))
	for i, k := range keys {
		index[k] = i
	}
	err := MultiGet(DialForTest(t, addr), keys, 100, func(key string, data []byte) {
		hits++
		if i, ok := index[key]; !ok || string(data) != "v"+strconv.Itoa(i) {
			wrong++
		}
	})
	if err != nil {
		t.Fatalf("get via %s: %v", addr, err)
	}
	return hits, wrong
}
