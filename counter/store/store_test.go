package store_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/poplimit/poplimit/counter"
	"github.com/poplimit/poplimit/counter/memcached"
	"github.com/poplimit/poplimit/counter/memstore"
	"github.com/poplimit/poplimit/counter/redis"
	"github.com/poplimit/poplimit/counter/store"
)

// TestNew: each client and address count gives its store, and a Config
// New cannot build is a precise error wrapping ErrConfig.
func TestNew(t *testing.T) {
	one, two := []string{"127.0.0.1:1"}, []string{"127.0.0.1:1", "127.0.0.1:2"}
	for _, tc := range []struct {
		name string
		cfg  store.Config
		want string // %T of the store, or an error substring
	}{
		{"zero: in process", store.Config{}, "*memstore.Store"},
		{"default client, one address", store.Config{Memcached: one}, "*memcached.PipeStore"},
		{"pipe, one connection per call", store.Config{Client: store.Pipe, Memcached: one, Multiplex: -1}, "*memcached.PipeStore"},
		{"pipe, two shared connections", store.Config{Client: store.Pipe, Memcached: one, Multiplex: 2}, "*memcached.PipeStore"},
		{"pipe without an address", store.Config{Client: store.Pipe, Multiplex: 2}, "*memstore.Store"},
		{"gomemcache, one address", store.Config{Client: store.Gomemcache, Memcached: one, Multiplex: 2}, "*memcached.Store"},
		{"gomemcache, two addresses", store.Config{Client: store.Gomemcache, Memcached: two, Multiplex: 2}, "*memcached.Store"},
		{"gomemcache without an address", store.Config{Client: store.Gomemcache}, "*memstore.Store"},
		{"redis", store.Config{Redis: "redis://127.0.0.1:1,127.0.0.1:2", Memcached: one}, "*redis.Store"},
		{"pipe, two addresses", store.Config{Memcached: two}, "speaks to one address"},
		{"unknown client", store.Config{Client: "redis", Memcached: one}, `client "redis"`},
		{"unknown client without an address", store.Config{Client: "redis"}, `client "redis"`},
		{"negative timeout", store.Config{Memcached: one, Timeout: -time.Second}, "negative Timeout"},
		{"bad redis URL", store.Config{Redis: "redis://nohost"}, "bad store URL"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sh, err := store.New(tc.cfg)
			var got string
			if err != nil {
				if !errors.Is(err, store.ErrConfig) {
					t.Errorf("New: %v does not wrap ErrConfig", err)
				}
				got = err.Error()
			} else {
				got = typeName(sh.Store())
				if err := sh.Close(); err != nil {
					t.Errorf("Close: %v", err)
				}
			}
			if !strings.Contains(got, tc.want) {
				t.Errorf("New(%+v) = %s, want %s", tc.cfg, got, tc.want)
			}
		})
	}
}

func typeName(s counter.Store) string {
	switch s.(type) {
	case *memcached.PipeStore:
		return "*memcached.PipeStore"
	case *memcached.Store:
		return "*memcached.Store"
	case *memstore.Store:
		return "*memstore.Store"
	case *redis.Store:
		return "*redis.Store"
	}
	return "other"
}

// TestNewAllowerInProcess: the Shared's allowers count in its store.
func TestNewAllowerInProcess(t *testing.T) {
	sh, err := store.New(store.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer sh.Close()
	a, err := sh.NewAllower(counter.Limit{Name: "l", Algorithm: counter.FixedWindow, Quantity: 1, Window: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	b, err := sh.NewAllower(counter.Limit{Name: "l", Algorithm: counter.FixedWindow, Quantity: 1, Window: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2030, 1, 1, 0, 0, 30, 0, time.UTC)
	if r, err := a.AllowN(t.Context(), "k", now, 1); err != nil || !r.Allowed {
		t.Fatalf("first: %+v, %v", r, err)
	}
	if r, err := b.AllowN(t.Context(), "k", now, 1); err != nil || r.Allowed {
		t.Fatalf("second, through another allower of the same store: %+v, %v; want refused", r, err)
	}
}
