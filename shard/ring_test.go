package shard

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"
)

func members(names ...string) []Server {
	ms := make([]Server, len(names))
	for i, n := range names {
		ms[i] = Server{Name: n}
	}
	return ms
}

// Two rings built from permuted lists place 100k keys on the same member.
func TestRingOrderIndependent(t *testing.T) {
	names := []string{"10.0.0.1:11211", "10.0.0.2:11211", "10.0.0.3:11211", "10.0.0.4:11211", "10.0.0.5:11211"}
	a, err := NewRing(members(names...), nil, RingConfig{})
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for round := 0; round < 3; round++ {
		perm := append([]string(nil), names...)
		rng.Shuffle(len(perm), func(i, j int) { perm[i], perm[j] = perm[j], perm[i] })
		b, err := NewRing(members(perm...), nil, RingConfig{})
		if err != nil {
			t.Fatal(err)
		}
		counts := make([]int, len(names))
		for k := 0; k < 100000; k++ {
			key := []byte("key:" + strconv.Itoa(k))
			ia, ib := a.Locate(key), b.Locate(key)
			if names[ia] != perm[ib] {
				t.Fatalf("perm %v: key %s on %s vs %s", perm, key, names[ia], perm[ib])
			}
			counts[ia]++
		}
		for i, c := range counts {
			if c < 100000/len(names)/3 {
				t.Errorf("member %s got only %d keys: %v", names[i], c, counts)
			}
		}
	}
}

func TestRingEjectMovesOnlyEjectedKeys(t *testing.T) {
	ms := members("a", "b", "c")
	full, _ := NewRing(ms, nil, RingConfig{})
	part, _ := NewRing(ms, []bool{true, false, true}, RingConfig{})
	moved := 0
	for k := 0; k < 20000; k++ {
		key := []byte(strconv.Itoa(k))
		f, p := full.Locate(key), part.Locate(key)
		if p == 1 {
			t.Fatalf("key %s placed on ejected member", key)
		}
		if f != 1 && f != p {
			moved++
		}
	}
	// Bounded loads may move a few partitions of live members; most stay.
	if moved > 20000/5 {
		t.Errorf("%d keys of live members moved", moved)
	}
	none, _ := NewRing(ms, make([]bool, len(ms)), RingConfig{})
	if got := none.Locate([]byte("x")); got != -1 {
		t.Errorf("all ejected: Locate = %d, want -1", got)
	}
}

func TestRingErrors(t *testing.T) {
	if _, err := NewRing(nil, nil, RingConfig{}); !errors.Is(err, ErrNoMembers) {
		t.Errorf("empty: %v", err)
	}
	if _, err := NewRing(members("a", "b"), []bool{true}, RingConfig{}); !errors.Is(err, ErrLiveView) {
		t.Errorf("short liveness view: %v, want ErrLiveView", err)
	}
	// A name and another server's address are one label.
	if _, err := NewRing([]Server{{Addr: "a:1"}, {Addr: "b:1", Name: "a:1"}}, nil, RingConfig{}); !errors.Is(err, ErrDuplicateMember) {
		t.Errorf("name equal to an address: %v, want ErrDuplicateMember", err)
	}
	if _, err := NewRing(members("a", "a"), nil, RingConfig{}); !errors.Is(err, ErrDuplicateMember) {
		t.Errorf("dup: %v", err)
	}
}

func TestHashTag(t *testing.T) {
	tests := []struct {
		name, tag, key, want string
	}{
		{"no tag in key", "{}", "user:42", "user:42"},
		{"tag", "{}", "rl:{42}:w1", "42"},
		{"first tag wins", "{}", "{a}{b}", "a"},
		{"empty tag hashes whole", "{}", "x{}y", "x{}y"},
		{"unclosed", "{}", "x{abc", "x{abc"},
		{"close before open", "{}", "}a{", "}a{"},
		{"other tag", "$$", "a$id$b", "id"},
		{"no tag configured", "", "a{b}c", "a{b}c"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, err := ParseHashTag(tt.tag)
			if err != nil {
				t.Fatal(err)
			}
			if got := string(h.Extract([]byte(tt.key))); got != tt.want {
				t.Errorf("Extract(%q) = %q, want %q", tt.key, got, tt.want)
			}
		})
	}
	if _, err := ParseHashTag("{"); !errors.Is(err, ErrHashTag) {
		t.Errorf("one char tag: %v", err)
	}
}

func TestHealthSteps(t *testing.T) {
	t0 := time.Unix(1000, 0)
	fail := errors.New("down")
	h := NewHealth(HealthConfig{AutoEject: true, FailureLimit: 3, RetryTimeout: 10 * time.Second})
	steps := []struct {
		name        string
		at          time.Duration
		op          string // "obs" or "probe"
		err         error
		wantChanged bool
		wantHealthy bool
	}{
		{"one failure", 0, "obs", fail, false, true},
		{"success resets", 1 * time.Second, "obs", nil, false, true},
		{"fail 1", 2 * time.Second, "obs", fail, false, true},
		{"fail 2", 2 * time.Second, "obs", fail, false, true},
		{"fail 3 ejects", 3 * time.Second, "obs", fail, true, false},
		{"in-flight failure ignored", 3 * time.Second, "obs", fail, false, false},
		{"probe before retry timeout", 5 * time.Second, "probe", nil, false, false},
		{"failed probe after timeout", 13 * time.Second, "probe", fail, false, false},
		{"good probe too early again", 20 * time.Second, "probe", nil, false, false},
		{"good probe readmits", 23 * time.Second, "probe", nil, true, true},
		{"fail 1 after return", 24 * time.Second, "obs", fail, false, true},
	}
	for _, s := range steps {
		now := t0.Add(s.at)
		var changed bool
		if s.op == "obs" {
			changed = h.Observe(now, s.err)
		} else {
			changed = h.ProbeResult(now, s.err)
		}
		if changed != s.wantChanged || h.Healthy(now) != s.wantHealthy {
			t.Fatalf("%s: changed=%v healthy=%v, want %v %v", s.name, changed, h.Healthy(now), s.wantChanged, s.wantHealthy)
		}
	}
	if st := h.Stats(); st.Ejections != 1 || st.Failures != 1 {
		t.Errorf("stats %+v", st)
	}
	noEject := NewHealth(HealthConfig{FailureLimit: 1})
	for i := 0; i < 5; i++ {
		noEject.Observe(t0, fail)
	}
	if !noEject.Healthy(t0) {
		t.Error("ejected without AutoEject")
	}
}

func TestMembershipEjectAndProbe(t *testing.T) {
	for _, dist := range []string{DistConsistent, DistKetama} {
		t.Run(dist, func(t *testing.T) {
			probeErr := errors.New("still down")
			var changes []string
			m, err := NewMembership(MembershipConfig{
				Servers:      []Server{{Addr: "127.0.0.1:1"}, {Addr: "127.0.0.1:2"}, {Addr: "127.0.0.1:3"}},
				Distribution: dist,
				Health:       HealthConfig{AutoEject: true, FailureLimit: 2, RetryTimeout: time.Second},
				Probe:        func(ctx context.Context, i int) error { return probeErr },
				OnChange:     func(i int, live bool) { changes = append(changes, strconv.Itoa(i)+strconv.FormatBool(live)) },
			})
			if err != nil {
				t.Fatal(err)
			}
			key := []byte("some-key")
			owner := m.Locate(key)
			t0 := time.Unix(0, 0)
			m.Observe(owner, t0, errors.New("x"))
			if m.Locate(key) != owner {
				t.Fatal("moved before the failure limit")
			}
			m.Observe(owner, t0, errors.New("x"))
			if got := m.Locate(key); got == owner || got < 0 || m.Live(owner) {
				t.Fatalf("after ejection key on %d (owner %d)", got, owner)
			}
			m.ProbeOnce(context.Background(), t0.Add(2*time.Second)) // probe fails
			if m.Live(owner) {
				t.Fatal("readmitted after a failed probe")
			}
			probeErr = nil
			m.ProbeOnce(context.Background(), t0.Add(2500*time.Millisecond)) // not due yet
			if m.Live(owner) {
				t.Fatal("readmitted before the retry timeout")
			}
			m.ProbeOnce(context.Background(), t0.Add(3*time.Second))
			if !m.Live(owner) || m.Locate(key) != owner {
				t.Fatal("not readmitted after a good probe")
			}
			// Re-added, the shard owns exactly what a fresh pool gives it.
			fresh, err := NewMembership(MembershipConfig{Servers: m.Servers(), Distribution: dist})
			if err != nil {
				t.Fatal(err)
			}
			for k := 0; k < 10000; k++ {
				key := []byte("k" + strconv.Itoa(k))
				if m.Locate(key) != fresh.Locate(key) {
					t.Fatalf("after re-admission key %s on %d, fresh ring %d", key, m.Locate(key), fresh.Locate(key))
				}
			}
			want := []string{strconv.Itoa(owner) + "false", strconv.Itoa(owner) + "true"}
			if len(changes) != 2 || changes[0] != want[0] || changes[1] != want[1] {
				t.Errorf("changes %v, want %v", changes, want)
			}
		})
	}
}

func BenchmarkRingLocate(b *testing.B) {
	r, _ := NewRing(members("a", "b", "c", "d"), nil, RingConfig{})
	key := []byte("rl:{user:12345}:1700000000")
	tag := DefaultHashTag()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			_ = r.Locate(tag.Extract(key))
		}
	})
}

func ExampleHashTag_Extract() {
	tag := DefaultHashTag()
	fmt.Println(string(tag.Extract([]byte("rl:{user:42}:w1700000000"))))
	fmt.Println(string(tag.Extract([]byte("plain-key"))))
	// Output:
	// user:42
	// plain-key
}

func ExampleNewRing() {
	// The same members in any order place every key on the same member.
	x := []Server{{Addr: "10.0.0.1:11211"}, {Addr: "10.0.0.2:11211"}, {Addr: "10.0.0.3:11211"}}
	y := []Server{x[2], x[0], x[1]}
	a, _ := NewRing(x, nil, RingConfig{})
	b, _ := NewRing(y, nil, RingConfig{})
	key := DefaultHashTag().Extract([]byte("rl:{user:42}:w1"))
	fmt.Println(x[a.Locate(key)].Addr == y[b.Locate(key)].Addr)
	// Output: true
}

func TestRingWeights(t *testing.T) {
	r, err := NewRing([]Server{{Name: "a", Weight: 3}, {Name: "b"}, {Name: "c", Weight: 0}}, nil, RingConfig{})
	if err != nil {
		t.Fatal(err)
	}
	counts := make([]int, 3)
	for k := 0; k < 50000; k++ {
		counts[r.Locate([]byte(strconv.Itoa(k)))]++
	}
	// a has 3 virtual members of 5: about 60% of keys; b and c about 20%.
	if counts[0] < 50000*45/100 || counts[1] > 50000*30/100 || counts[2] > 50000*30/100 {
		t.Errorf("shares %v, want about 60/20/20%%", counts)
	}
	if _, err := NewRing([]Server{{Name: "a", Weight: -1}}, nil, RingConfig{}); err == nil {
		t.Error("negative weight accepted")
	}
}

// TestRingConfigErrors checks that configs consistent cannot use (or only
// at a prohibitive cost) are refused with ErrRingConfig instead of
// panicking or building for seconds.
func TestRingConfigErrors(t *testing.T) {
	nan := 0.0
	nan /= nan
	tests := []struct {
		name    string
		members []Server
		cfg     RingConfig
		wantErr bool
	}{
		{"defaults", members("a", "b", "c"), RingConfig{}, false},
		{"load 1", members("a", "b", "c"), RingConfig{Load: 1}, false},
		{"load 0.5", members("a", "b", "c"), RingConfig{Load: 0.5}, true},
		{"load negative", members("a", "b", "c"), RingConfig{Load: -1}, true},
		{"load NaN", members("a", "b", "c"), RingConfig{Load: nan}, true},
		{"replication negative", members("a", "b"), RingConfig{ReplicationFactor: -1}, true},
		{"weight negative", []Server{{Name: "a", Weight: -1}}, RingConfig{}, true},
		{"weight max", []Server{{Name: "a", Weight: MaxRingWeight}, {Name: "b"}}, RingConfig{}, false},
		{"weight above max", []Server{{Name: "a", Weight: MaxRingWeight + 1}, {Name: "b"}}, RingConfig{}, true},
		{"weight 50000", []Server{{Name: "a", Weight: 50000}}, RingConfig{}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var err error
			func() {
				defer func() {
					if p := recover(); p != nil {
						err = fmt.Errorf("panic: %v", p)
					}
				}()
				_, err = NewRing(tt.members, nil, tt.cfg)
			}()
			if tt.wantErr && !errors.Is(err, ErrRingConfig) {
				t.Fatalf("err = %v, want ErrRingConfig", err)
			}
			if !tt.wantErr && err != nil {
				t.Fatalf("err = %v", err)
			}
		})
	}
}

// TestDefaultHashTag checks that DefaultHashTag is "{}" and that a caller
// changing its copy cannot change what others get.
func TestDefaultHashTag(t *testing.T) {
	want, err := ParseHashTag("{}")
	if err != nil {
		t.Fatal(err)
	}
	tag := DefaultHashTag()
	if tag != want {
		t.Fatalf("DefaultHashTag() = %q, want %q", tag, want)
	}
	if tag, _ = ParseHashTag("[]"); tag.String() != "[]" {
		t.Fatalf("the caller's copy is %q, want []", tag)
	}
	if got := DefaultHashTag(); got != want || got.String() != "{}" {
		t.Fatalf("DefaultHashTag() after a caller's change = %q", got)
	}
}
