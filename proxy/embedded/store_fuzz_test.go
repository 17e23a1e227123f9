package embedded

import (
	"bytes"
	"testing"
	"time"

	"github.com/poplimit/poplimit/proxy/protocol"
)

// checkMemInvariants verifies the store's internal bookkeeping: the map and
// the LRU list hold the same entries, linked both ways, and the byte count
// is their sum and within the budget.
func checkMemInvariants(t *testing.T, s *Store) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	var sum int64
	n := 0
	var prev *memEntry
	for e := s.head; e != nil; e = e.next {
		if e.prev != prev {
			t.Fatalf("entry %q: prev link broken", e.key)
		}
		if s.items[e.key] != e {
			t.Fatalf("entry %q in the LRU list but not in the map", e.key)
		}
		if e.size != memItemSize(len(e.key), e.flags, len(e.value)) {
			t.Fatalf("entry %q: size %d for %d value bytes", e.key, e.size, len(e.value))
		}
		sum += e.size
		n++
		prev = e
		if n > len(s.items) {
			t.Fatal("LRU list longer than the map (cycle?)")
		}
	}
	if s.tail != prev {
		t.Fatal("tail is not the last entry")
	}
	if n != len(s.items) || sum != s.bytes || s.bytes > s.maxBytes {
		t.Fatalf("list %d entries, map %d, bytes %d counted %d, budget %d", n, len(s.items), sum, s.bytes, s.maxBytes)
	}
}

// FuzzMemoryStore runs random operation sequences on a small store and
// checks after each one the bookkeeping invariants, that CAS uniques only
// grow, that a stored never-expiring item reads back as written, and that
// incr/decr results read back.
func FuzzMemoryStore(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15})
	f.Add([]byte("set a; incr a; append a; flush; get a; touch; delete"))
	f.Fuzz(func(t *testing.T, prog []byte) {
		s := newTestStore(t, Config{MaxBytes: 600, ItemSizeMax: 150})
		sec := int64(0)
		var lastCAS uint64
		for len(prog) >= 3 {
			op, k, arg := prog[0], prog[1], prog[2]
			prog = prog[3:]
			key := string('a' + rune(k%5))
			now := memT0.Add(time.Duration(sec) * time.Second)
			value := bytes.Repeat([]byte{'0' + arg%10}, int(arg)%100)
			exptime := []int64{0, 0, 0, 2, -1, 2592001, memT0.Unix() + 5, 100}[arg%8]
			switch op % 9 {
			case 0, 1, 2, 3, 4, 5:
				mode := Mode(op%6) + ModeSet
				w := Write{Mode: mode, Key: key, Value: value, Flags: uint32(arg % 3), Exptime: exptime, CAS: lastCAS - uint64(arg%2)}
				res, cas, err := s.Store(w, now)
				if res == Stored {
					if cas <= lastCAS {
						t.Fatalf("cas %d after %d", cas, lastCAS)
					}
					lastCAS = cas
					s.mu.Lock()
					fresh := s.flushOldest == 0 || s.flushOldest < sec
					s.mu.Unlock()
					if mode != ModeAppend && mode != ModePrepend && exptime == 0 && fresh {
						it, ok := s.Get(key, now)
						if !ok || !bytes.Equal(it.Value, value) || it.CAS != cas || it.Flags != w.Flags {
							t.Fatalf("stored %q flags %d cas %d, read %+v %v", value, w.Flags, cas, it, ok)
						}
					}
				} else if cas != 0 || (err != nil && res != 0) {
					t.Fatalf("result %v cas %d err %v", res, cas, err)
				}
			case 6:
				n, found, err := s.Delta(key, arg%2 == 0, uint64(arg)*1e17, now)
				if found && err == nil {
					it, ok := s.Get(key, now)
					if !ok {
						t.Fatal("item gone after incr")
					}
					if got, ok := protocol.ParseValueUint(it.Value); !ok || got != n {
						t.Fatalf("incr returned %d, item holds %q", n, it.Value)
					}
					if it.CAS <= lastCAS {
						t.Fatalf("incr left cas %d after %d", it.CAS, lastCAS)
					}
					lastCAS = it.CAS
				}
			case 7:
				switch arg % 4 {
				case 0:
					s.Touch(key, exptime, now)
				case 1:
					s.Delete(key, now)
				case 2:
					s.FlushAll(exptime, now)
					s.mu.Lock()
					lastCAS = s.casCounter
					s.mu.Unlock()
				default:
					s.Get(key, now)
				}
			case 8:
				sec += int64(arg % 4)
			}
			checkMemInvariants(t, s)
		}
	})
}
