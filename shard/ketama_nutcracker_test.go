package shard_test

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/poplimit/poplimit/bench/fixture"
	"github.com/poplimit/poplimit/bench/fixture/procs"
	"github.com/poplimit/poplimit/shard"
)

var updateGolden = flag.Bool("update-golden", false,
	"rewrite testdata/nutcracker/ketama_golden.txt from real nutcracker")

// nutcrackerCase is one pool layout checked against real nutcracker.
type nutcrackerCase struct {
	name    string
	hash    string
	hashTag string
	weights []int    // per shard
	names   []string // per shard; "" for none
	keys    int
}

func nutcrackerCases() []nutcrackerCase {
	plain := []int{1, 1, 1}
	weighted := []int{1, 2, 3}
	named := []string{"alpha", "beta", "gamma"}
	cases := []nutcrackerCase{
		{name: "fnv1a_64", hash: "fnv1a_64", weights: plain, keys: 10000},
		{name: "md5", hash: "md5", weights: plain, keys: 10000},
		{name: "fnv1a_64-named-weighted-tag", hash: "fnv1a_64", hashTag: "{}", weights: weighted, names: named, keys: 10000},
		{name: "md5-named-weighted-tag", hash: "md5", hashTag: "{}", weights: weighted, names: named, keys: 10000},
	}
	for _, h := range []string{"fnv1_64", "fnv1_32", "fnv1a_32", "one_at_a_time", "crc16", "crc32", "crc32a", "hsieh", "murmur", "jenkins"} {
		cases = append(cases, nutcrackerCase{name: h, hash: h, hashTag: "{}", weights: []int{2, 1, 1}, names: named, keys: 2000})
	}
	return cases
}

// testKeys are deterministic keys: plain, hash-tagged (including an empty
// tag and an unclosed one), long (the hashes' block loops) and with bytes
// >= 0x80 (sign extension).
func testKeys(n int) []string {
	keys := make([]string, 0, n)
	for i := 0; len(keys) < n; i++ {
		switch i % 6 {
		case 0, 1:
			keys = append(keys, "k:"+strconv.Itoa(i))
		case 2:
			keys = append(keys, fmt.Sprintf("rl:{user%d}:w%d", i/6, i%17))
		case 3:
			keys = append(keys, fmt.Sprintf("x{}%d:a-longer-key-for-the-block-loops-of-the-hashes", i))
		case 4:
			keys = append(keys, fmt.Sprintf("\xc3\xa9t\xe9\xff:%d", i))
		default:
			keys = append(keys, fmt.Sprintf("open{%d", i))
		}
	}
	return keys
}

// TestKetamaMatchesNutcracker writes keys through Debian's nutcracker and
// checks that each memcached shard holds exactly the keys Ketama assigns it.
func TestKetamaMatchesNutcracker(t *testing.T) {
	shards := fixture.Memcached(t, 3)
	var golden bytes.Buffer
	for _, tc := range nutcrackerCases() {
		t.Run(tc.name, func(t *testing.T) {
			servers := make([]shard.Server, len(shards))
			entries := make([]string, len(shards))
			for i, m := range shards {
				servers[i] = shard.Server{Addr: m.Addr, Weight: tc.weights[i]}
				entries[i] = fmt.Sprintf("%s:%d", m.Addr, tc.weights[i])
				if tc.names != nil {
					servers[i].Name = tc.names[i]
					entries[i] += " " + tc.names[i]
				}
				fixture.Flush(t, m.Addr)
			}
			k, err := shard.NewKetama(servers, nil, tc.hash)
			if err != nil {
				t.Fatal(err)
			}
			tag, err := shard.ParseHashTag(tc.hashTag)
			if err != nil {
				t.Fatal(err)
			}
			nc := fixture.Nutcracker(t, procs.TwemproxyPool{
				Hash: tc.hash, HashTag: tc.hashTag, Distribution: "ketama",
				TimeoutMS: 2000, Servers: entries,
			})
			keys := testKeys(tc.keys)
			fixture.SetValues(t, nc.Addr, keys)
			held := make([]map[string]bool, len(shards))
			for i, m := range shards {
				held[i] = presentKeys(t, m.Addr, keys)
			}
			agree, wrong := 0, 0
			for _, key := range keys {
				want := k.Locate(tag.Extract([]byte(key)))
				got := -1
				for i := range shards {
					if held[i][key] {
						if got >= 0 {
							t.Fatalf("key %q on shards %d and %d", key, got, i)
						}
						got = i
					}
				}
				if got != want {
					if wrong++; wrong <= 5 {
						t.Errorf("key %q: nutcracker put it on shard %d, Ketama says %d", key, got, want)
					}
					continue
				}
				agree++
				if tc.names != nil && agree%47 == 1 { // 47: prime, so every key kind is sampled
					fmt.Fprintf(&golden, "%s %q %s %q %d\n", tc.hash, tc.hashTag,
						strings.Trim(strings.Join(strings.Fields(fmt.Sprint(tc.weights)), ","), "[]"), key, got)
				}
			}
			t.Logf("%s: %d/%d keys agree with nutcracker", tc.name, agree, len(keys))
			if agree != len(keys) {
				t.Fatalf("%d/%d keys agree with nutcracker, want all", agree, len(keys))
			}
		})
	}
	if *updateGolden && !t.Failed() {
		path := filepath.Join("..", "testdata", "nutcracker", "ketama_golden.txt")
		hdr := "# Keys as Debian nutcracker 0.5.0 (distribution: ketama) placed them on three servers\n" +
			"# \"<host:port>:<weight> <name>\" named alpha, beta, gamma (names fix the ring, not addresses).\n" +
			"# Regenerate: go test ./shard -run TestKetamaMatchesNutcracker -update-golden\n" +
			"# hash hash_tag weights key server_index\n"
		if err := os.WriteFile(path, append([]byte(hdr), golden.Bytes()...), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestKetamaEjectedMatchesNutcracker: with auto_eject_hosts, nutcracker
// rebuilds its continuum without a failed server (and rescales the others'
// points); Ketama with that server not live must place keys the same way.
func TestKetamaEjectedMatchesNutcracker(t *testing.T) {
	shards := fixture.Memcached(t, 3)
	weights, names := []int{1, 2, 3}, []string{"alpha", "beta", "gamma"}
	servers := make([]shard.Server, len(shards))
	var entries []string
	for i, m := range shards {
		servers[i] = shard.Server{Addr: m.Addr, Weight: weights[i], Name: names[i]}
		entries = append(entries, fmt.Sprintf("%s:%d %s", m.Addr, weights[i], names[i]))
	}
	nc := fixture.Nutcracker(t, procs.TwemproxyPool{
		Hash: "fnv1a_64", Distribution: "ketama", TimeoutMS: 1000, AutoEjectHosts: true,
		ServerFailureLimit: 1, ServerRetryTimeoutMS: 60000, Servers: entries,
	})
	shards[0].Stop()
	// Write until a request fails on the dead server: that ejects it.
	failed := false
	for i := 0; i < 500 && !failed; i++ {
		rw := fixture.Dial(t, nc.Addr)
		fmt.Fprintf(rw, "set trigger:%d 0 0 1\r\n1\r\n", i)
		rw.Flush()
		line, err := rw.ReadString('\n')
		failed = err != nil || line != "STORED\r\n"
	}
	if !failed {
		t.Fatal("no request failed on the stopped server")
	}
	for _, m := range shards[1:] {
		fixture.Flush(t, m.Addr)
	}
	k, err := shard.NewKetama(servers, []bool{false, true, true}, "fnv1a_64")
	if err != nil {
		t.Fatal(err)
	}
	keys := testKeys(3000)
	fixture.SetValues(t, nc.Addr, keys)
	held := []map[string]bool{nil, presentKeys(t, shards[1].Addr, keys), presentKeys(t, shards[2].Addr, keys)}
	wrong := 0
	for _, key := range keys {
		want := k.Locate([]byte(key))
		if want < 1 || !held[want][key] {
			if wrong++; wrong <= 5 {
				t.Errorf("key %q: Ketama says shard %d, not found there", key, want)
			}
		}
	}
	if wrong > 0 {
		t.Fatalf("%d/%d keys misplaced after ejection", wrong, len(keys))
	}
}

// presentKeys returns which of keys the memcached at addr holds.
func presentKeys(t *testing.T, addr string, keys []string) map[string]bool {
	t.Helper()
	rw := fixture.Dial(t, addr)
	held := make(map[string]bool)
	if err := procs.MultiGet(rw, keys, 100, func(key string, _ []byte) { held[key] = true }); err != nil {
		t.Fatalf("get on %s: %v", addr, err)
	}
	return held
}
