package shard_test

import (
	"bufio"
	"crypto/md5"
	"encoding/binary"
	"errors"
	"fmt"
	stdhash "hash"
	"hash/crc32"
	"hash/fnv"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/poplimit/poplimit/shard"
)

// TestKetamaGolden replays key placements recorded from Debian's nutcracker
// 0.5.0 (see TestKetamaMatchesNutcracker), so the table runs anywhere.
func TestKetamaGolden(t *testing.T) {
	f, err := os.Open(filepath.Join("..", "testdata", "nutcracker", "ketama_golden.txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rings := map[string]*shard.Ketama{}
	checked := map[string]int{}
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		if strings.HasPrefix(sc.Text(), "#") {
			continue
		}
		var hash, tag, weights, key string
		var want int
		if _, err := fmt.Sscanf(sc.Text(), "%s %q %s %q %d", &hash, &tag, &weights, &key, &want); err != nil {
			t.Fatalf("line %d: %v", line, err)
		}
		id := hash + " " + weights
		k := rings[id]
		if k == nil {
			var servers []shard.Server
			for i, w := range strings.Split(weights, ",") {
				n, _ := strconv.Atoi(w)
				servers = append(servers, shard.Server{
					Addr: fmt.Sprintf("192.0.2.%d:%d", i+1, 20000+i), Weight: n,
					Name: []string{"alpha", "beta", "gamma"}[i]})
			}
			if k, err = shard.NewKetama(servers, nil, hash); err != nil {
				t.Fatal(err)
			}
			rings[id] = k
		}
		ht, err := shard.ParseHashTag(tag)
		if err != nil {
			t.Fatal(err)
		}
		if got := k.Locate(ht.Extract([]byte(key))); got != want {
			t.Errorf("line %d: %s %q -> %d, nutcracker chose %d", line, hash, key, got, want)
		}
		checked[hash]++
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	for _, h := range []string{"fnv1a_64", "md5", "murmur", "crc16", "hsieh", "jenkins"} {
		if checked[h] < 20 {
			t.Errorf("golden file has %d keys for %s, want >= 20", checked[h], h)
		}
	}
}

// TestKetamaHashKnownAnswers checks the hashes against independent
// implementations (standard library) on ASCII keys, and the documented
// Twemproxy quirks.
func TestKetamaHashKnownAnswers(t *testing.T) {
	std32 := func(newHash func() stdhash.Hash32) func([]byte) uint32 {
		return func(b []byte) uint32 { h := newHash(); h.Write(b); return h.Sum32() }
	}
	oracles := map[string]func([]byte) uint32{
		"fnv1a_32": std32(fnv.New32a),
		"fnv1_32":  std32(fnv.New32),
		"fnv1_64":  func(b []byte) uint32 { h := fnv.New64(); h.Write(b); return uint32(h.Sum64()) },
		"md5":      func(b []byte) uint32 { d := md5.Sum(b); return binary.LittleEndian.Uint32(d[:4]) },
		"crc32a":   crc32.ChecksumIEEE,
		"crc32":    func(b []byte) uint32 { return crc32.ChecksumIEEE(b) >> 16 & 0x7fff },
	}
	keys := []string{"", "a", "foo", "rl:{user42}:w1", "the quick brown fox jumps over the lazy dog"}
	for name, oracle := range oracles {
		h, err := shard.KetamaHash(name)
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range keys {
			if got, want := h([]byte(k)), oracle([]byte(k)); got != want {
				t.Errorf("%s(%q) = %#x, want %#x", name, k, got, want)
			}
		}
	}
	tests := []struct {
		name, hash, key string
		want            uint32
	}{
		// fnv1a_64 is FNV-1a over 32 bits with the 64-bit offset truncated.
		{"fnv1a_64 empty is the truncated offset", "fnv1a_64", "", 0x84222325},
		{"default hash is fnv1a_64", "", "", 0x84222325},
		{"fnv1a_64 one byte", "fnv1a_64", "a", uint32((0x84222325 ^ 0x61) * 0x1b3 & 0xffffffff)},
		// A byte >= 0x80 is sign-extended before mixing (signed char).
		{"fnv1a_32 sign-extends", "fnv1a_32", "\xff", uint32((2166136261 ^ 0xffffffff) * 16777619 & 0xffffffff)},
		{"murmur empty", "murmur", "", 0},
		{"hsieh empty", "hsieh", "", 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h, err := shard.KetamaHash(tc.hash)
			if err != nil {
				t.Fatal(err)
			}
			if got := h([]byte(tc.key)); got != tc.want {
				t.Errorf("%s(%q) = %#x, want %#x", tc.hash, tc.key, got, tc.want)
			}
		})
	}
	if _, err := shard.KetamaHash("sha1"); !errors.Is(err, shard.ErrKetamaHash) {
		t.Errorf("sha1: err = %v, want ErrKetamaHash", err)
	}
}

func TestParseServer(t *testing.T) {
	tests := []struct {
		name, in string
		want     shard.Server
		wantErr  bool
	}{
		{"host port weight", "127.0.0.1:11211:1", shard.Server{Addr: "127.0.0.1:11211", Weight: 1}, false},
		{"with name", "10.0.0.2:11212:3 cache-b", shard.Server{Addr: "10.0.0.2:11212", Weight: 3, Name: "cache-b"}, false},
		{"hostname", "mc1.example:2000:10 one", shard.Server{Addr: "mc1.example:2000", Weight: 10, Name: "one"}, false},
		{"unix socket", "/var/run/mc.sock:2 s", shard.Server{Addr: "/var/run/mc.sock", Weight: 2, Name: "s"}, false},
		{"zero weight", "127.0.0.1:11211:0", shard.Server{}, true},
		{"negative weight", "127.0.0.1:11211:-1", shard.Server{}, true},
		{"no weight", "127.0.0.1:11211", shard.Server{}, true},
		{"bad port", "127.0.0.1:99999:1", shard.Server{}, true},
		{"signed weight", "127.0.0.1:11211:+1", shard.Server{}, true},
		{"signed port", "127.0.0.1:+80:1", shard.Server{}, true},
		{"empty name", "127.0.0.1:11211:1 ", shard.Server{}, true},
		{"empty", "", shard.Server{}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := shard.ParseServer(tc.in)
			if tc.wantErr {
				if !errors.Is(err, shard.ErrKetamaConfig) {
					t.Fatalf("err = %v, want ErrKetamaConfig", err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

func FuzzParseServer(f *testing.F) {
	for _, s := range []string{"127.0.0.1:11211:1", "10.0.0.2:11212:3 cache-b", "/tmp/s:1 x", "a:b:c d e", ":::", " "} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		srv, err := shard.ParseServer(s)
		if err != nil {
			return
		}
		if srv.Weight <= 0 || srv.Addr == "" {
			t.Fatalf("%q parsed to %+v", s, srv)
		}
		again := srv.Addr + ":" + strconv.Itoa(srv.Weight)
		if srv.Name != "" {
			again += " " + srv.Name
		}
		srv2, err := shard.ParseServer(again)
		if err != nil || srv2 != srv {
			t.Fatalf("%q -> %+v -> %q -> %+v, %v", s, srv, again, srv2, err)
		}
		if _, err := shard.NewKetama([]shard.Server{srv, {Addr: "x:1"}}, nil, "md5"); err != nil {
			t.Fatal(err)
		}
	})
}

func TestKetamaPointsAndShares(t *testing.T) {
	tests := []struct {
		name       string
		weights    []int
		wantPoints int
	}{
		{"equal weights", []int{1, 1, 1}, 480},
		{"zero weight means 1", []int{0, 0}, 320},
		{"weighted", []int{1, 2, 3}, 480}, // floor(w/6*40*3)*4: 80+160+240
		{"one server", []int{5}, 160},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var servers []shard.Server
			total := 0
			for i, w := range tc.weights {
				servers = append(servers, shard.Server{Addr: fmt.Sprintf("10.0.0.%d:11211", i+1), Weight: w})
				total += max(w, 1)
			}
			k, err := shard.NewKetama(servers, nil, "fnv1a_64")
			if err != nil {
				t.Fatal(err)
			}
			if k.Points() != tc.wantPoints {
				t.Errorf("points = %d, want %d", k.Points(), tc.wantPoints)
			}
			counts := make([]int, len(servers))
			const n = 30000
			for i := 0; i < n; i++ {
				counts[k.Locate([]byte("key:"+strconv.Itoa(i)))]++
			}
			for i, c := range counts {
				share := float64(c) / n
				want := float64(max(tc.weights[i], 1)) / float64(total)
				if share < want*0.7 || share > want*1.3 {
					t.Errorf("server %d holds %.3f of keys, want about %.3f", i, share, want)
				}
			}
		})
	}
}

// TestKetamaLabels: the ketama label is the name when given, the bare host
// for port 11211, else host:port; so equal labels give equal rings.
func TestKetamaLabels(t *testing.T) {
	same := func(a, b []shard.Server) bool {
		ka, err := shard.NewKetama(a, nil, "md5")
		if err != nil {
			t.Fatal(err)
		}
		kb, err := shard.NewKetama(b, nil, "md5")
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 5000; i++ {
			key := []byte("k" + strconv.Itoa(i))
			if ka.Locate(key) != kb.Locate(key) {
				return false
			}
		}
		return true
	}
	base := []shard.Server{{Addr: "10.0.0.1:11211"}, {Addr: "10.0.0.2:11300"}}
	tests := []struct {
		name  string
		other []shard.Server
		want  bool
	}{
		{"port 11211 is left out of the label", []shard.Server{{Addr: "192.0.2.9:1", Name: "10.0.0.1"}, {Addr: "10.0.0.2:11300"}}, true},
		{"other ports are in the label", []shard.Server{{Addr: "10.0.0.1:11211"}, {Addr: "192.0.2.9:1", Name: "10.0.0.2:11300"}}, true},
		{"a name replaces the address", []shard.Server{{Addr: "10.0.0.1:11211", Name: "a"}, {Addr: "10.0.0.2:11300"}}, false},
		{"an address change moves keys", []shard.Server{{Addr: "10.0.0.3:11211"}, {Addr: "10.0.0.2:11300"}}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := same(base, tc.other); got != tc.want {
				t.Errorf("same ring = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestKetamaEjected(t *testing.T) {
	servers := []shard.Server{{Addr: "10.0.0.1:1"}, {Addr: "10.0.0.2:1"}, {Addr: "10.0.0.3:1"}}
	all, err := shard.NewKetama(servers, nil, "fnv1a_64")
	if err != nil {
		t.Fatal(err)
	}
	some, err := shard.NewKetama(servers, []bool{true, false, true}, "fnv1a_64")
	if err != nil {
		t.Fatal(err)
	}
	if some.Len() != 3 || some.Points() != 320 {
		t.Fatalf("Len %d Points %d, want 3 and 320", some.Len(), some.Points())
	}
	for i := 0; i < 10000; i++ {
		key := []byte("k" + strconv.Itoa(i))
		before, after := all.Locate(key), some.Locate(key)
		if after == 1 {
			t.Fatalf("key %q on ejected server", key)
		}
		if before != 1 && before != after {
			t.Fatalf("key %q moved from live server %d to %d", key, before, after)
		}
	}
	none, err := shard.NewKetama(servers, make([]bool, len(servers)), "fnv1a_64")
	if err != nil {
		t.Fatal(err)
	}
	if got := none.Locate([]byte("k")); got != -1 {
		t.Errorf("all ejected: Locate = %d, want -1", got)
	}
}

func TestNewKetamaErrors(t *testing.T) {
	tests := []struct {
		name    string
		servers []shard.Server
		live    []bool
		hash    string
		want    error
	}{
		{"no servers", nil, nil, "md5", shard.ErrKetamaConfig},
		{"negative weight", []shard.Server{{Addr: "a:1", Weight: -1}}, nil, "md5", shard.ErrKetamaConfig},
		{"unknown hash", []shard.Server{{Addr: "a:1"}}, nil, "sha1", shard.ErrKetamaHash},
		{"liveness view too short", []shard.Server{{Addr: "a:1"}, {Addr: "b:1"}}, []bool{true}, "md5", shard.ErrLiveView},
		{"liveness view too long", []shard.Server{{Addr: "a:1"}}, []bool{true, true}, "md5", shard.ErrLiveView},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := shard.NewKetama(tc.servers, tc.live, tc.hash); !errors.Is(err, tc.want) {
				t.Errorf("err = %v, want %v", err, tc.want)
			}
		})
	}
}

func BenchmarkKetamaLocate(b *testing.B) {
	servers := []shard.Server{{Addr: "10.0.0.1:11211"}, {Addr: "10.0.0.2:11211"}, {Addr: "10.0.0.3:11211"}}
	key := []byte("rl:{tenant42:user1234567}:w1732900000")
	for _, hash := range []string{"fnv1a_64", "md5", "murmur"} {
		b.Run(hash, func(b *testing.B) {
			k, err := shard.NewKetama(servers, nil, hash)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					_ = k.Locate(shard.DefaultHashTag().Extract(key))
				}
			})
		})
	}
}

// Servers as in a nutcracker.yml pool with "hash: fnv1a_64",
// "distribution: ketama" and "hash_tag: {}"; the names, not the addresses,
// fix the ring. The answers are those of Debian's nutcracker 0.5.0 (see
// testdata/nutcracker/ketama_golden.txt).
func ExampleNewKetama() {
	var servers []shard.Server
	for _, entry := range []string{"10.0.0.1:11211:1 alpha", "10.0.0.2:11211:2 beta", "10.0.0.3:11211:3 gamma"} {
		s, err := shard.ParseServer(entry)
		if err != nil {
			panic(err)
		}
		servers = append(servers, s)
	}
	k, err := shard.NewKetama(servers, nil, "fnv1a_64")
	if err != nil {
		panic(err)
	}
	for _, key := range []string{"k:0", "rl:{user8}:w16", "k:150"} {
		i := k.Locate(shard.DefaultHashTag().Extract([]byte(key)))
		fmt.Println(key, "->", servers[i].Name)
	}
	// Output:
	// k:0 -> beta
	// rl:{user8}:w16 -> alpha
	// k:150 -> beta
}
