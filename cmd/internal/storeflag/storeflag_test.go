package storeflag

import (
	"strings"
	"testing"
	"time"

	"github.com/poplimit/poplimit/counter"
	"github.com/poplimit/poplimit/counter/memcached"
)

// TestNew: each client and address count gives its store, and bad values
// are precise errors (edge and rls share these rules).
func TestNew(t *testing.T) {
	one, two := []string{"127.0.0.1:1"}, []string{"127.0.0.1:1", "127.0.0.1:2"}
	for _, tc := range []struct {
		client    string
		addrs     []string
		multiplex int
		want      string // type name, or an error substring
	}{
		{"pipe", nil, 1, "*counter.MemoryStore"},
		{"pipe", one, 1, "*memcached.PipeStore"},
		{"pipe", one, 0, "*memcached.PipeStore"},
		{"gomemcache", two, 0, "*memcached.Store"},
		{"pipe", two, 1, "speaks to one address"},
		{"redis", one, 0, `--store-client "redis"`},
		{"pipe", one, -1, "--store-multiplex -1"},
	} {
		st, err := New(tc.client, tc.addrs, time.Second, tc.multiplex)
		var got string
		switch s := st.(type) {
		case *counter.MemoryStore:
			got = "*counter.MemoryStore"
		case *memcached.PipeStore:
			got = "*memcached.PipeStore"
			s.Close()
		case *memcached.Store:
			got = "*memcached.Store"
		}
		if err != nil {
			got = err.Error()
		}
		if !strings.Contains(got, tc.want) {
			t.Errorf("New(%q, %v, %d) = %s, want %s", tc.client, tc.addrs, tc.multiplex, got, tc.want)
		}
	}
}
