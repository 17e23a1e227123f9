package embedded

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// t0 is the fixed instant the step tables start at.
var memT0 = time.Unix(1_800_000_000, 0)

// memStep is one operation on a store at memT0+at seconds and what it must
// give. op is a compact command: "set k flags exptime value", "add ...",
// "replace ...", "append ...", "prepend ...", "cas k flags exptime value
// unique", "get k", "touch k exptime", "delete k", "incr k delta",
// "decr k delta", "flush delay". want is the outcome written the way
// memcached answers: STORED, NOT_STORED, EXISTS, NOT_FOUND, DELETED,
// TOUCHED, OK, a number for incr/decr, TOO_LARGE, NON_NUMERIC, and for get
// "MISS" or "value flags cas" (cas "*" when not checked).
type memStep struct {
	at   int64
	op   string
	want string
}

func runMemSteps(t *testing.T, s *Store, steps []memStep) {
	t.Helper()
	for i, st := range steps {
		now := memT0.Add(time.Duration(st.at) * time.Second)
		got := memDo(t, s, st.op, now)
		want := st.want
		if strings.HasSuffix(want, " *") && strings.Count(got, " ") == 2 {
			got = got[:strings.LastIndexByte(got, ' ')] + " *"
		}
		if got != want {
			t.Fatalf("step %d (at %d) %q: got %q, want %q", i, st.at, st.op, got, want)
		}
	}
}

func memDo(t *testing.T, s *Store, op string, now time.Time) string {
	t.Helper()
	f := strings.Fields(op)
	num := func(i int) int64 {
		n, err := strconv.ParseInt(f[i], 10, 64)
		if err != nil {
			t.Fatalf("bad step %q: %v", op, err)
		}
		return n
	}
	modes := map[string]Mode{"set": ModeSet, "add": ModeAdd, "replace": ModeReplace,
		"append": ModeAppend, "prepend": ModePrepend, "cas": ModeCAS}
	switch f[0] {
	case "set", "add", "replace", "append", "prepend", "cas":
		w := Write{Mode: modes[f[0]], Key: f[1], Flags: uint32(num(2)), Exptime: num(3)}
		if len(f) > 4 {
			w.Value = []byte(strings.ReplaceAll(f[4], "_", " "))
		}
		if f[0] == "cas" {
			w.CAS = uint64(num(5))
		}
		res, cas, err := s.Store(w, now)
		switch {
		case errors.Is(err, ErrTooLarge):
			return "TOO_LARGE"
		case err != nil:
			return err.Error()
		}
		if (res == Stored) != (cas != 0) {
			t.Fatalf("%q: result %v with cas %d", op, res, cas)
		}
		return map[Result]string{Stored: "STORED", NotStored: "NOT_STORED",
			Exists: "EXISTS", NotFound: "NOT_FOUND"}[res]
	case "get":
		it, ok := s.Get(f[1], now)
		if !ok {
			return "MISS"
		}
		return fmt.Sprintf("%s %d %d", strings.ReplaceAll(string(it.Value), " ", "_"), it.Flags, it.CAS)
	case "touch":
		if _, ok := s.Touch(f[1], num(2), now); !ok {
			return "NOT_FOUND"
		}
		return "TOUCHED"
	case "delete":
		if s.Delete(f[1], now) {
			return "DELETED"
		}
		return "NOT_FOUND"
	case "incr", "decr":
		d, err := strconv.ParseUint(f[2], 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		v, found, err := s.Delta(f[1], f[0] == "incr", d, now)
		switch {
		case errors.Is(err, ErrNonNumeric):
			return "NON_NUMERIC"
		case err != nil:
			return err.Error()
		case !found:
			return "NOT_FOUND"
		}
		return strconv.FormatUint(v, 10)
	case "flush":
		s.FlushAll(num(1), now)
		return "OK"
	}
	t.Fatalf("bad step %q", op)
	return ""
}

func newTestStore(t *testing.T, cfg Config) *Store {
	t.Helper()
	s, err := NewStore(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// The CAS sequences below were observed on memcached 1.6.18 with the same
// commands on a fresh process.
func TestMemoryStoreSteps(t *testing.T) {
	abs := memT0.Unix()
	cases := []struct {
		name  string
		steps []memStep
	}{
		{"set get overwrite", []memStep{
			{0, "get a", "MISS"},
			{0, "set a 5 0 x", "STORED"},
			{0, "get a", "x 5 1"},
			{0, "set a 6 0 yy", "STORED"},
			{0, "get a", "yy 6 2"},
		}},
		{"add replace", []memStep{
			{0, "replace a 0 0 x", "NOT_STORED"},
			{0, "add a 1 0 x", "STORED"},
			{0, "add a 2 0 y", "NOT_STORED"},
			{0, "replace a 3 0 z", "STORED"},
			{0, "get a", "z 3 2"},
		}},
		{"append prepend keep flags and exptime", []memStep{
			{0, "append a 0 0 x", "NOT_STORED"},
			{0, "prepend a 0 0 x", "NOT_STORED"},
			{0, "set a 3 10 1", "STORED"},
			{1, "append a 9 0 23", "STORED"},
			{2, "prepend a 7 -1 0", "STORED"},
			{3, "get a", "0123 3 3"},
			{9, "get a", "0123 3 3"},
			{10, "get a", "MISS"},
		}},
		{"cas", []memStep{
			{0, "cas a 0 0 x 1", "NOT_FOUND"},
			{0, "set a 0 0 x", "STORED"},
			{0, "cas a 0 0 y 2", "EXISTS"},
			{0, "cas a 0 0 y 0", "EXISTS"},
			{0, "cas a 4 0 y 1", "STORED"},
			{0, "get a", "y 4 2"},
			{0, "cas a 0 0 z 1", "EXISTS"},
		}},
		{"incr decr padding and cas", []memStep{
			{0, "incr a 1", "NOT_FOUND"},
			{0, "set a 5 0 100", "STORED"},
			{0, "decr a 1", "99"},
			{0, "get a", "99_ 5 2"},
			{0, "incr a 5", "104"},
			{0, "get a", "104 5 3"},
			{0, "incr a 1000", "1104"},
			{0, "get a", "1104 5 4"},
			{0, "decr a 5000", "0"},
			{0, "get a", "0___ 5 5"},
		}},
		{"incr wraps at 2^64", []memStep{
			{0, "set a 0 0 18446744073709551615", "STORED"},
			{0, "incr a 1", "0"},
			{0, "get a", "0___________________ 0 2"},
			{0, "incr a 18446744073709551615", "18446744073709551615"},
			{0, "incr a 2", "1"},
		}},
		{"incr non-numeric", []memStep{
			{0, "set a 0 0 abc", "STORED"},
			{0, "incr a 1", "NON_NUMERIC"},
			{0, "set a 0 0", "STORED"},
			{0, "decr a 1", "NON_NUMERIC"},
			{0, "set a 0 0 -5", "STORED"},
			{0, "incr a 1", "NON_NUMERIC"},
			{0, "set a 0 0 18446744073709551616", "STORED"},
			{0, "incr a 1", "NON_NUMERIC"},
			{0, "set a 0 0 -0", "STORED"},
			{0, "incr a 1", "1"},
			{0, "get a", "1_ 0 *"},
		}},
		{"incr keeps expiry", []memStep{
			{0, "set a 0 5 9", "STORED"},
			{1, "incr a 1", "10"},
			{4, "get a", "10 0 *"},
			{5, "get a", "MISS"},
		}},
		{"relative exptime", []memStep{
			{0, "set a 0 2 x", "STORED"},
			{1, "get a", "x 0 1"},
			{2, "get a", "MISS"},
			{2, "set b 0 2592000 x", "STORED"},
			{2592001, "get b", "x 0 2"},
			{2592002, "get b", "MISS"},
		}},
		{"absolute and negative exptime", []memStep{
			{0, "set a 0 -1 x", "STORED"},
			{0, "get a", "MISS"},
			{0, "set a 0 2592001 x", "STORED"},
			{0, "get a", "MISS"},
			{0, fmt.Sprintf("set a 0 %d x", abs+100), "STORED"},
			{99, "get a", "x 0 3"},
			{100, "get a", "MISS"},
			{100, fmt.Sprintf("set a 0 %d x", abs+50), "STORED"},
			{100, "get a", "MISS"},
		}},
		{"touch", []memStep{
			{0, "touch a 10", "NOT_FOUND"},
			{0, "set a 0 1 x", "STORED"},
			{0, "touch a 10", "TOUCHED"},
			{5, "get a", "x 0 1"},
			{5, "touch a 0", "TOUCHED"},
			{100000, "get a", "x 0 1"},
			{100000, "touch a -1", "TOUCHED"},
			{100000, "get a", "MISS"},
		}},
		{"delete", []memStep{
			{0, "delete a", "NOT_FOUND"},
			{0, "set a 0 0 x", "STORED"},
			{0, "delete a", "DELETED"},
			{0, "delete a", "NOT_FOUND"},
			{0, "set a 0 1 x", "STORED"},
			{1, "delete a", "NOT_FOUND"},
		}},
		{"flush now consumes a cas", []memStep{
			{0, "flush 0", "OK"},
			{0, "set a 0 0 x", "STORED"},
			{0, "get a", "x 0 2"},
			{0, "flush 0", "OK"},
			{0, "get a", "MISS"},
			{0, "set b 0 0 y", "STORED"},
			{0, "get b", "y 0 4"},
			{0, "flush -5", "OK"},
			{0, "get b", "MISS"},
		}},
		{"flush delayed", []memStep{
			{0, "set a 0 0 x", "STORED"},
			{0, "flush 100", "OK"},
			{98, "get a", "x 0 1"},
			{99, "get a", "MISS"},
			{100, "set b 0 0 y", "STORED"},
			{200, "get b", "y 0 2"},
		}},
		{"flush at absolute past time does nothing", []memStep{
			{0, "set a 0 0 x", "STORED"},
			{0, "flush 2592001", "OK"},
			{0, "get a", "x 0 1"},
			{0, "set b 0 0 y", "STORED"},
			{0, "get b", "y 0 3"},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			runMemSteps(t, newTestStore(t, Config{}), tc.steps)
		})
	}
}

func TestMemoryStoreItemSizeLimit(t *testing.T) {
	// Largest values memcached 1.6.18 (-I 1m) accepts, measured by bisection.
	cases := []struct {
		key   string
		flags uint32
		max   int
	}{
		{"k", 0, 1048516},
		{"k", 1, 1048512},
		{"kkkkkkkkkk", 0, 1048507},
		{"kkkkkkkkkk", 1, 1048503},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("%s/%d", tc.key, tc.flags), func(t *testing.T) {
			s := newTestStore(t, Config{})
			w := Write{Mode: ModeSet, Key: tc.key, Flags: tc.flags, Value: make([]byte, tc.max)}
			if res, _, err := s.Store(w, memT0); err != nil || res != Stored {
				t.Fatalf("%d bytes: %v %v", tc.max, res, err)
			}
			w.Value = make([]byte, tc.max+1)
			if _, _, err := s.Store(w, memT0); !errors.Is(err, ErrTooLarge) {
				t.Fatalf("%d bytes: err %v, want too large", tc.max+1, err)
			}
			// A too large set deletes the old value; add and append keep it.
			if _, ok := s.Get(tc.key, memT0); ok {
				t.Fatal("too large set kept the old value")
			}
		})
	}
	s := newTestStore(t, Config{})
	runMemSteps(t, s, []memStep{{0, "set a 0 0 x", "STORED"}})
	for _, m := range []Mode{ModeAdd, ModeReplace, ModeAppend, ModePrepend, ModeCAS} {
		w := Write{Mode: m, Key: "a", Value: make([]byte, 1<<20)}
		if _, _, err := s.Store(w, memT0); !errors.Is(err, ErrTooLarge) {
			t.Fatalf("mode %d: err %v", m, err)
		}
	}
	// An append that fits alone but not combined is NOT_STORED and takes no cas.
	big := Write{Mode: ModeSet, Key: "b", Value: make([]byte, 1048000)}
	if res, _, _ := s.Store(big, memT0); res != Stored {
		t.Fatal(res)
	}
	tail := Write{Mode: ModeAppend, Key: "b", Value: make([]byte, 1000)}
	if res, _, err := s.Store(tail, memT0); res != NotStored || err != nil {
		t.Fatalf("combined append: %v %v", res, err)
	}
	runMemSteps(t, s, []memStep{{0, "get a", "x 0 1"}, {0, "set c 0 0 z", "STORED"}, {0, "get c", "z 0 3"}})

	small := newTestStore(t, Config{ItemSizeMax: 100})
	runMemSteps(t, small, []memStep{
		{0, "set a 0 0 " + strings.Repeat("x", 40), "STORED"},
		{0, "set a 0 0 " + strings.Repeat("x", 41), "TOO_LARGE"},
	})
}

func TestMemoryStoreEvictsLeastRecentlyUsed(t *testing.T) {
	// Each item "kN" with a 10-byte value counts 56+3+10+2 = 71 bytes.
	s := newTestStore(t, Config{MaxBytes: 71 * 3})
	val := strings.Repeat("v", 10)
	runMemSteps(t, s, []memStep{
		{0, "set k1 0 0 " + val, "STORED"},
		{0, "set k2 0 0 " + val, "STORED"},
		{0, "set k3 0 0 " + val, "STORED"},
		{0, "get k1", val + " 0 1"}, // k2 is now the least recently used
		{0, "set k4 0 0 " + val, "STORED"},
		{0, "get k2", "MISS"},
		{0, "get k1", val + " 0 1"},
		{0, "get k3", val + " 0 3"},
		{0, "get k4", val + " 0 4"},
	})
	if got := s.Bytes(); got != 71*3 {
		t.Fatalf("bytes %d, want %d", got, 71*3)
	}
	if s.Evictions() != 1 || s.Len() != 3 {
		t.Fatalf("evictions %d len %d", s.Evictions(), s.Len())
	}
	w := Write{Mode: ModeSet, Key: "huge", Value: make([]byte, 1000)}
	if _, _, err := s.Store(w, memT0); !errors.Is(err, ErrOutOfMemory) {
		t.Fatalf("item over the budget: %v", err)
	}
}

func TestMemoryStoreBytesAccounting(t *testing.T) {
	s := newTestStore(t, Config{})
	runMemSteps(t, s, []memStep{
		{0, "set a 0 0 9", "STORED"},
		{0, "incr a 100", "109"},
		{0, "append a 0 0 0", "STORED"},
		{0, "set b 1 1 xy", "STORED"},
		{0, "delete a", "DELETED"},
	})
	if want := memItemSize(1, 1, 2); s.Bytes() != want {
		t.Fatalf("bytes %d, want %d", s.Bytes(), want)
	}
	runMemSteps(t, s, []memStep{{1, "get b", "MISS"}})
	if s.Bytes() != 0 || s.Len() != 0 {
		t.Fatalf("after expiry: bytes %d len %d", s.Bytes(), s.Len())
	}
}

func TestNewMemoryStoreRejectsNegativeSizes(t *testing.T) {
	for _, cfg := range []Config{{MaxBytes: -1}, {ItemSizeMax: -1}} {
		if _, err := NewStore(cfg); err == nil {
			t.Errorf("%+v: no error", cfg)
		}
	}
}

// TestMemoryStoreConcurrentIncr checks that concurrent increments are not
// lost (run with -race).
func TestMemoryStoreConcurrentIncr(t *testing.T) {
	s := newTestStore(t, Config{})
	runMemSteps(t, s, []memStep{{0, "set n 0 0 0", "STORED"}})
	const workers, each = 4, 200
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				if _, _, err := s.Delta("n", true, 1, memT0); err != nil {
					t.Error(err)
					return
				}
				s.Get("n", memT0)
			}
		}()
	}
	wg.Wait()
	if it, _ := s.Get("n", memT0); strings.TrimSpace(string(it.Value)) != strconv.Itoa(workers*each) {
		t.Fatalf("value %q, want %d", it.Value, workers*each)
	}
}

func ExampleStore() {
	s, err := NewStore(Config{})
	if err != nil {
		panic(err)
	}
	now := time.Unix(1_800_000_000, 0)
	// A counter window that expires in 60 s, as the rate limiter writes it.
	s.Store(Write{Mode: ModeAdd, Key: "{user:1}:w:42", Value: []byte("0"), Exptime: 60}, now)
	n, _, _ := s.Delta("{user:1}:w:42", true, 5, now)
	it, _ := s.Get("{user:1}:w:42", now)
	fmt.Println(n, string(it.Value), it.CAS, it.Exptime-now.Unix())
	_, found := s.Get("{user:1}:w:42", now.Add(time.Minute))
	fmt.Println(found)
	// Output:
	// 5 5 2 60
	// false
}
