package shard_test

import (
	"crypto/md5"
	"encoding/binary"
	"errors"
	"hash/fnv"
	"math"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/poplimit/poplimit/shard"
)

// modulaServers is a pool with the given weights, named "a", "b", ...,
// and its liveness view with the listed servers ejected (nil: none).
func modulaServers(weights []int, ejected ...int) ([]shard.Server, []bool) {
	s := make([]shard.Server, len(weights))
	for i, w := range weights {
		s[i] = shard.Server{Addr: "127.0.0.1:" + strconv.Itoa(31001+i), Weight: w, Name: string(rune('a' + i))}
	}
	if len(ejected) == 0 {
		return s, nil
	}
	live := make([]bool, len(s))
	for i := range live {
		live[i] = true
	}
	for _, i := range ejected {
		live[i] = false
	}
	return s, live
}

// modula and random build over modulaServers' pool, failing the test on
// an error.
func modula(t testing.TB, hash string, weights []int, ejected ...int) *shard.Modula {
	t.Helper()
	s, live := modulaServers(weights, ejected...)
	m, err := shard.NewModula(s, live, hash)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func random(t testing.TB, seed uint64, weights []int, ejected ...int) *shard.Random {
	t.Helper()
	s, live := modulaServers(weights, ejected...)
	r, err := shard.NewRandom(s, live, seed)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestModulaKnownPlacements checks placements observed on Debian's
// nutcracker 0.5.0 (distribution: modula, hash: fnv1a_64, servers
// "127.0.0.1:3100N:W name" with weights 1,2,1): each key was set through
// nutcracker and found on exactly the shard listed.
func TestModulaKnownPlacements(t *testing.T) {
	tests := []struct {
		key  string
		want int
	}{
		{"a", 0}, {"b", 1}, {"foo", 2}, {"bar", 1}, {"user:42", 1}, {"rl:{u1}:w1", 1},
		{"k:1", 2}, {"k:2", 1}, {"k:3", 1}, {"k:4", 0}, {"x", 2}, {"hello", 2},
	}
	m := modula(t, "fnv1a_64", []int{1, 2, 1})
	if m.Points() != 4 || m.Len() != 3 {
		t.Fatalf("Points %d Len %d, want 4 and 3", m.Points(), m.Len())
	}
	for _, tc := range tests {
		t.Run(tc.key, func(t *testing.T) {
			if got := m.Locate([]byte(tc.key)); got != tc.want {
				t.Errorf("Locate(%q) = %d, nutcracker placed it on %d", tc.key, got, tc.want)
			}
		})
	}
}

// refHash is an independent implementation of the two hashes the
// reference placement uses: Twemproxy's fnv1a_64 (64-bit FNV-1a truncated
// to 32 bits) and md5 (the digest's first four bytes, little endian).
func refHash(t *testing.T, name string, key []byte) uint32 {
	switch name {
	case "fnv1a_64":
		h := fnv.New64a()
		h.Write(key)
		return uint32(h.Sum64())
	case "md5":
		d := md5.Sum(key)
		return binary.LittleEndian.Uint32(d[:4])
	}
	t.Fatalf("no reference for hash %q", name)
	return 0
}

// refContinuum is nc_modula.c's continuum spelled out: one slot per weight
// unit of each live server, in config order.
func refContinuum(servers []shard.Server, live []bool) []int {
	var slots []int
	for i, s := range servers {
		if live != nil && !live[i] {
			continue
		}
		for range max(s.Weight, 1) {
			slots = append(slots, i)
		}
	}
	return slots
}

// refModula places key as nutcracker's modula does: slot hash % slots.
func refModula(t *testing.T, slots []int, nservers int, hash string, key []byte) int {
	if len(slots) == 0 {
		return -1
	}
	if nservers == 1 {
		return 0
	}
	var h uint32
	if len(key) > 0 {
		h = refHash(t, hash, key)
	}
	return slots[h%uint32(len(slots))]
}

func TestModulaMatchesReference(t *testing.T) {
	tests := []struct {
		name    string
		hash    string
		weights []int
		ejected []int
	}{
		{"fnv1a_64 equal", "fnv1a_64", []int{1, 1, 1}, nil},
		{"fnv1a_64 weighted", "fnv1a_64", []int{1, 2, 1}, nil},
		{"md5 weighted", "md5", []int{1, 2, 1}, nil},
		{"zero weight is 1", "fnv1a_64", []int{0, 3, 0}, nil},
		{"middle ejected", "fnv1a_64", []int{1, 2, 1}, []int{1}},
		{"first ejected md5", "md5", []int{3, 1, 2, 5}, []int{0}},
		{"two ejected", "fnv1a_64", []int{1, 2, 1, 4}, []int{0, 3}},
		{"one server", "fnv1a_64", []int{7}, nil},
		{"large weights (searched, not tabled)", "fnv1a_64", []int{70000, 1, 30000}, nil},
		{"large weights ejected", "md5", []int{70000, 1, 30000}, []int{2}},
	}
	keys := make([][]byte, 0, 3001)
	keys = append(keys, nil) // the empty key hashes to 0
	for i := range 3000 {
		keys = append(keys, []byte("k:"+strconv.Itoa(i)))
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			servers, live := modulaServers(tc.weights, tc.ejected...)
			m := modula(t, tc.hash, tc.weights, tc.ejected...)
			slots := refContinuum(servers, live)
			wrong := 0
			for _, k := range keys {
				want := refModula(t, slots, len(servers), tc.hash, k)
				if got := m.Locate(k); got != want {
					if wrong++; wrong <= 5 {
						t.Errorf("Locate(%q) = %d, want %d", k, got, want)
					}
				}
			}
		})
	}
}

func TestModulaNamesDoNotMatter(t *testing.T) {
	ma := modula(t, "", []int{1, 2, 1})
	b, _ := modulaServers([]int{1, 2, 1})
	for i := range b {
		b[i].Name, b[i].Addr = "", "10.0.0."+strconv.Itoa(9-i)+":11211"
	}
	mb, err := shard.NewModula(b, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	for i := range 1000 {
		k := []byte(strconv.Itoa(i))
		if ma.Locate(k) != mb.Locate(k) {
			t.Fatalf("key %q placed differently after renaming servers", k)
		}
	}
}

// TestModulaSpreadByWeight: over many keys each server's share is close to
// its share of the live weight.
func TestModulaSpreadByWeight(t *testing.T) {
	weights := []int{1, 2, 1, 4}
	m := modula(t, "fnv1a_64", weights)
	const n = 40000
	counts := make([]int, len(weights))
	for i := range n {
		counts[m.Locate([]byte("spread:"+strconv.Itoa(i)))]++
	}
	for i, w := range weights {
		want := float64(n) * float64(w) / 8
		if math.Abs(float64(counts[i])-want) > 0.1*want {
			t.Errorf("server %d (weight %d): %d keys, want about %.0f", i, w, counts[i], want)
		}
	}
}

func TestModulaRandomAllEjected(t *testing.T) {
	m := modula(t, "md5", []int{1, 2}, 0, 1)
	r := random(t, 1, []int{1, 2}, 0, 1)
	m1 := modula(t, "", []int{1}, 0)
	r1 := random(t, 1, []int{1}, 0)
	for name, loc := range map[string]shard.Locator{"modula": m, "random": r, "modula one": m1, "random one": r1} {
		for _, k := range []string{"", "a", "rl:{x}"} {
			if got := loc.Locate([]byte(k)); got != -1 {
				t.Errorf("%s: Locate(%q) = %d with every server ejected, want -1", name, k, got)
			}
		}
	}
}

func TestModulaRandomErrors(t *testing.T) {
	tests := []struct {
		name    string
		weights []int // nil: no servers
		live    []bool
		hash    string
		want    error
	}{
		{"no servers", nil, nil, "", shard.ErrKetamaConfig},
		{"negative weight", []int{1, -1}, nil, "", shard.ErrKetamaConfig},
		{"unknown hash", []int{1}, nil, "sha1", shard.ErrKetamaHash},
		{"total weight over uint32", []int{math.MaxInt32, math.MaxInt32, math.MaxInt32}, nil, "", shard.ErrKetamaConfig},
		{"liveness view too short", []int{1, 1}, []bool{true}, "", shard.ErrLiveView},
		{"liveness view too long", []int{1}, []bool{true, false}, "", shard.ErrLiveView},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var servers []shard.Server
			if tc.weights != nil {
				servers, _ = modulaServers(tc.weights)
			}
			if _, err := shard.NewModula(servers, tc.live, tc.hash); !errors.Is(err, tc.want) {
				t.Errorf("NewModula: %v, want %v", err, tc.want)
			}
			if tc.want == shard.ErrKetamaHash || tc.name == "total weight over uint32" {
				return // Random ignores the hash and the weights' sum
			}
			if _, err := shard.NewRandom(servers, tc.live, 0); !errors.Is(err, tc.want) {
				t.Errorf("NewRandom: %v, want %v", err, tc.want)
			}
		})
	}
}

// TestRandomSpread: Twemproxy's random ignores weights (one continuum slot
// per live server, as nutcracker 0.5.0 shows: 3000 sets through it with
// weights 1,2,1 landed 971/1020/1009), so every live server gets about the
// same share, and ejected servers none.
func TestRandomSpread(t *testing.T) {
	tests := []struct {
		name    string
		weights []int
		ejected []int
	}{
		{"weights ignored", []int{1, 2, 1}, nil},
		{"one ejected", []int{1, 5, 1, 1}, []int{1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := random(t, 42, tc.weights, tc.ejected...)
			live := len(tc.weights) - len(tc.ejected)
			if r.Points() != live || r.Len() != len(tc.weights) {
				t.Fatalf("Points %d Len %d", r.Points(), r.Len())
			}
			const n = 30000
			counts := make([]int, len(tc.weights))
			key := []byte("same key every time")
			for range n {
				counts[r.Locate(key)]++
			}
			want := float64(n) / float64(live)
			for i, c := range counts {
				if slices.Contains(tc.ejected, i) {
					if c != 0 {
						t.Errorf("ejected server %d chosen %d times", i, c)
					}
					continue
				}
				if math.Abs(float64(c)-want) > 0.1*want {
					t.Errorf("server %d chosen %d times, want about %.0f", i, c, want)
				}
			}
		})
	}
}

func TestRandomSeed(t *testing.T) {
	draw := func(seed uint64) []int {
		r := random(t, seed, []int{1, 1, 1, 1})
		out := make([]int, 64)
		for i := range out {
			out[i] = r.Locate(nil)
		}
		return out
	}
	a, b, c := draw(7), draw(7), draw(8)
	same := 0
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("same seed, draw %d: %d vs %d", i, a[i], b[i])
		}
		if a[i] == c[i] {
			same++
		}
	}
	if same == len(a) {
		t.Errorf("seeds 7 and 8 drew the same 64 servers")
	}
}

// TestRandomConcurrent runs Locate from several goroutines (for -race) and
// checks every draw is a live server.
func TestRandomConcurrent(t *testing.T) {
	r := random(t, 3, []int{1, 1, 1}, 2)
	var wg sync.WaitGroup
	counts := make([][2]int, 4)
	for g := range counts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 5000 {
				i := r.Locate(nil)
				if i != 0 && i != 1 {
					t.Errorf("drew %d", i)
					return
				}
				counts[g][i]++
			}
		}()
	}
	wg.Wait()
	for g, c := range counts {
		if c[0] < 2000 || c[1] < 2000 {
			t.Errorf("goroutine %d drew %v", g, c)
		}
	}
}

func TestModulaRandomNoAllocs(t *testing.T) {
	m := modula(t, "md5", []int{1, 2, 1})
	big := modula(t, "fnv1a_64", []int{70000, 2, 1})
	r := random(t, 1, []int{1, 2, 1})
	key := []byte("rl:{user42}:w17")
	for name, loc := range map[string]shard.Locator{"modula": m, "modula searched": big, "random": r} {
		if a := testing.AllocsPerRun(200, func() { loc.Locate(key) }); a != 0 {
			t.Errorf("%s: %v allocs per Locate", name, a)
		}
	}
}

// TestMembershipModulaEjection: ejecting a shard publishes the modula
// continuum without it (nutcracker's rebuild with auto_eject_hosts), and
// re-admitting it restores the original placement.
func TestMembershipModulaEjection(t *testing.T) {
	servers := []shard.Server{{Addr: "127.0.0.1:31001", Weight: 1}, {Addr: "127.0.0.1:31002", Weight: 2}, {Addr: "127.0.0.1:31003", Weight: 1}}
	full, _ := shard.NewModula(servers, nil, "md5")
	without1, _ := shard.NewModula(servers, []bool{true, false, true}, "md5")

	changes := 0
	m, err := shard.NewMembership(shard.MembershipConfig{
		Servers: servers, Distribution: shard.DistModula, Hash: "md5",
		Health:   shard.HealthConfig{AutoEject: true, FailureLimit: 1, RetryTimeout: time.Second},
		OnChange: func(int, bool) { changes++ },
	})
	if err != nil {
		t.Fatal(err)
	}
	same := func(step string, want *shard.Modula) {
		t.Helper()
		moved := 0
		for i := range 2000 {
			k := []byte("e:" + strconv.Itoa(i))
			if m.Locate(k) != want.Locate(k) {
				t.Fatalf("%s: key %q on %d, want %d", step, k, m.Locate(k), want.Locate(k))
			}
			if full.Locate(k) != without1.Locate(k) {
				moved++
			}
		}
		if moved == 0 {
			t.Fatalf("ejection moved no key: the test cannot tell the continua apart")
		}
	}
	same("start", full)
	t0 := time.Unix(1000, 0)
	m.Observe(1, t0, errors.New("boom"))
	if m.Live(1) || changes != 1 {
		t.Fatalf("after the failure: live %v, %d changes", m.Live(1), changes)
	}
	same("ejected", without1)
	m.ProbeOnce(t.Context(), t0.Add(time.Second))
	if !m.Live(1) || changes != 2 {
		t.Fatalf("after the retry timeout: live %v, %d changes", m.Live(1), changes)
	}
	same("readmitted", full)

	m.Observe(0, t0, errors.New("x"))
	m.Observe(1, t0, errors.New("x"))
	m.Observe(2, t0, errors.New("x"))
	if got := m.Locate([]byte("k")); got != -1 {
		t.Errorf("every shard ejected: Locate = %d, want -1", got)
	}
}

func TestMembershipRandom(t *testing.T) {
	servers := []shard.Server{{Addr: "a:1"}, {Addr: "b:1", Weight: 3}, {Addr: "c:1"}}
	m, err := shard.NewMembership(shard.MembershipConfig{
		Servers: servers, Distribution: shard.DistRandom,
		Health: shard.HealthConfig{AutoEject: true, FailureLimit: 1, RetryTimeout: time.Second},
	})
	if err != nil {
		t.Fatal(err)
	}
	m.Observe(0, time.Unix(1, 0), errors.New("down"))
	seen := make([]int, 3)
	for range 3000 {
		seen[m.Locate([]byte("k"))]++
	}
	if seen[0] != 0 || seen[1] < 1000 || seen[2] < 1000 {
		t.Errorf("with shard 0 ejected, random chose %v", seen)
	}
	if _, err := shard.NewMembership(shard.MembershipConfig{Servers: servers, Distribution: "modulo"}); !errors.Is(err, shard.ErrDistribution) {
		t.Errorf("distribution modulo: %v, want ErrDistribution", err)
	}
}

func BenchmarkModulaLocate(b *testing.B) {
	for _, tc := range []struct {
		name    string
		weights []int
	}{{"table", []int{1, 2, 1, 1, 3}}, {"searched", []int{70000, 2, 1, 1, 3}}} {
		b.Run(tc.name, func(b *testing.B) {
			m := modula(b, "fnv1a_64", tc.weights)
			key := []byte("rl:user42:w17")
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					m.Locate(key)
				}
			})
		})
	}
}

func BenchmarkRandomLocate(b *testing.B) {
	r := random(b, 1, []int{1, 2, 1, 1, 3})
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			r.Locate(nil)
		}
	})
}

// TestModulaSearchedBoundaries: with a total weight too large for the flat
// table, keys whose slot is just below, on, or just after each server's last
// slot go where the continuum says (found by searching keys).
func TestModulaSearchedBoundaries(t *testing.T) {
	m := modula(t, "fnv1a_64", []int{70000, 1, 30000, 2})
	slots := refContinuum(modulaServers([]int{70000, 1, 30000, 2}))
	total := uint32(len(slots))
	want := map[uint32]bool{}
	for _, edge := range []uint32{70000, 70001, 100001} {
		want[edge-1], want[edge], want[edge+1] = true, true, true
	}
	want[0], want[total-1] = true, true
	for i := 0; i < 20_000_000 && len(want) > 0; i++ {
		k := []byte("edge:" + strconv.Itoa(i))
		slot := refHash(t, "fnv1a_64", k) % total
		if !want[slot] {
			continue
		}
		delete(want, slot)
		if got := m.Locate(k); got != slots[slot] {
			t.Errorf("key %q (slot %d): Locate = %d, want %d", k, slot, got, slots[slot])
		}
	}
	if len(want) > 0 {
		t.Errorf("found no key for slots %v", want)
	}
}
