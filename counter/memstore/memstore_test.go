package memstore

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/poplimit/poplimit/counter"
)

// Keys expire as memcached's do (TTL rounded up to whole seconds), and
// expired keys leave nothing behind.
func TestKeysExpireAsInMemcached(t *testing.T) {
	var mu sync.Mutex
	now := time.Unix(1700000000, 0)
	st := NewClock(func() time.Time { mu.Lock(); defer mu.Unlock(); return now })
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	if err := st.Add(context.Background(), "k", []byte("1"), 1500*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	advance(1999 * time.Millisecond) // TTL rounds up to 2 s like memcached
	if _, err := st.Incr(context.Background(), "k", 1); err != nil {
		t.Fatalf("alive at 1.999s: %v", err)
	}
	advance(time.Millisecond)
	if _, err := st.Incr(context.Background(), "k", 1); !errors.Is(err, counter.ErrNotFound) {
		t.Fatalf("expired at 2s: %v", err)
	}
	if err := st.Add(context.Background(), "k", []byte("1"), time.Second); err != nil {
		t.Fatalf("add after expiry: %v", err)
	}
	if st.size() != 1 {
		t.Fatalf("Len = %d", st.size())
	}
	advance(time.Hour)
	if st.size() != 0 {
		t.Fatalf("Len after expiry = %d", st.size())
	}
}
