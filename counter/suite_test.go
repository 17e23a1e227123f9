package counter_test

import (
	"context"
	"testing"
	"time"

	"github.com/poplimit/poplimit/bench/fixture"
	"github.com/poplimit/poplimit/bench/fixture/procs"
	"github.com/poplimit/poplimit/counter"
	"github.com/poplimit/poplimit/counter/memcached"
	"github.com/poplimit/poplimit/counter/memstore"
)

// t0 is aligned on a day, so on every window length used by the tests.
var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// backend builds the Allower under test: in-process, or the store-backed
// Limiter over the in-process store or over real memcached (STYLE rule 12:
// one suite, every backend).
type backend struct {
	name  string
	store func() counter.Store // nil: NewLocal (or allow)
	// allow, when set, builds the Allower itself (a store that runs the
	// algorithm, e.g. counter/redis).
	allow func(testing.TB, counter.Limit) counter.Allower
}

func (b backend) allower(t testing.TB, l counter.Limit) counter.Allower {
	t.Helper()
	if b.allow != nil {
		return b.allow(t, l)
	}
	if b.store == nil {
		lo, err := counter.NewLocal(l)
		if err != nil {
			t.Fatal(err)
		}
		return lo
	}
	lim, err := counter.New(b.store(), l)
	if err != nil {
		t.Fatal(err)
	}
	return lim
}

// backends returns local, memory and, when memcached is installed (or
// required by POPLIMIT_REQUIRE_MEMCACHED), memcached.
func backends(t *testing.T) []backend {
	t.Helper()
	bs := []backend{
		{name: "local"},
		{name: "memory", store: frozenMemoryStore},
		{name: "memory-nobatch", store: func() counter.Store { return noBatch{frozenMemoryStore()} }},
	}
	if procs.MemcachedInstalled() || fixture.Required() {
		mc := fixture.Memcached(t, 1)
		st := memcached.NewStore(memcached.NewClient(memcached.Config{
			Servers: []string{mc[0].Addr}, Timeout: time.Second}))
		pipe := memcached.NewPipeStore(memcached.PipeConfig{Addr: mc[0].Addr, Timeout: time.Second})
		t.Cleanup(func() { pipe.Close() })
		bs = append(bs, backend{name: "memcached", store: func() counter.Store { return st }},
			backend{name: "memcached-pipe", store: func() counter.Store { return pipe }})
	}
	return append(bs, redisBackends(t)...)
}

// uniqueKey returns an identity key no other test uses on a shared store.
func uniqueKey(t testing.TB, parts ...string) string {
	return counter.Key(append([]string{"test", t.Name(), time.Now().Format(time.RFC3339Nano)}, parts...)...)
}

var ctx = context.Background()

// frozenMemoryStore is a memory store whose TTL clock stays at t0: tests
// step through virtual instants while wall time passes at the speed of the
// (possibly loaded, race-instrumented) machine, so TTLs must not follow the
// wall clock. TTL semantics are tested on their own (TestMemoryStoreTTL).
func frozenMemoryStore() counter.Store {
	return memstore.NewClock(func() time.Time { return t0 })
}
