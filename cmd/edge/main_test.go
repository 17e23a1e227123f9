package main

import (
	"testing"
	"time"

	"github.com/poplimit/poplimit/counter"
)

func TestNewStore(t *testing.T) {
	for _, tc := range []struct {
		client string
		mux    int
		addrs  []string
		want   string // %T of the store, "" for an error
	}{
		{"pipe", 0, []string{"127.0.0.1:1"}, "*counter.PipeStore"},
		{"pipe", 2, []string{"127.0.0.1:1"}, "*counter.PipeStore"},
		{"pipe", -1, []string{"127.0.0.1:1"}, ""},
		{"gomemcache", 2, []string{"127.0.0.1:1"}, "*counter.MemcacheStore"},
		{"gomemcache", 2, []string{"127.0.0.1:1", "127.0.0.1:2"}, "*counter.MemcacheStore"},
		{"pipe", 2, nil, "*counter.MemoryStore"},
		{"gomemcache", 2, nil, "*counter.MemoryStore"},
		{"pipe", 2, []string{"127.0.0.1:1", "127.0.0.1:2"}, ""},
		{"redis", 2, []string{"127.0.0.1:1"}, ""},
		{"redis", 2, nil, ""},
	} {
		st, err := newStore(tc.client, tc.addrs, 20*time.Millisecond, tc.mux)
		got := ""
		if err == nil {
			got = typeName(st)
		}
		if got != tc.want {
			t.Errorf("newStore(%q, %v) = %s (err %v), want %q", tc.client, tc.addrs, got, err, tc.want)
		}
	}
}

func typeName(s counter.Store) string {
	switch s.(type) {
	case *counter.PipeStore:
		return "*counter.PipeStore"
	case *counter.MemcacheStore:
		return "*counter.MemcacheStore"
	case *counter.MemoryStore:
		return "*counter.MemoryStore"
	}
	return "other"
}
