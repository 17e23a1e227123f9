package main

import (
	"testing"
	"time"

	"github.com/poplimit/poplimit/counter"
)

func TestNewStore(t *testing.T) {
	for _, tc := range []struct {
		client string
		addrs  []string
		want   string // %T of the store, "" for an error
	}{
		{"pipe", []string{"127.0.0.1:1"}, "*counter.PipeStore"},
		{"gomemcache", []string{"127.0.0.1:1"}, "*counter.MemcacheStore"},
		{"gomemcache", []string{"127.0.0.1:1", "127.0.0.1:2"}, "*counter.MemcacheStore"},
		{"pipe", nil, "*counter.MemoryStore"},
		{"gomemcache", nil, "*counter.MemoryStore"},
		{"pipe", []string{"127.0.0.1:1", "127.0.0.1:2"}, ""},
		{"redis", []string{"127.0.0.1:1"}, ""},
		{"redis", nil, ""},
	} {
		st, err := newStore(tc.client, tc.addrs, 20*time.Millisecond)
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
