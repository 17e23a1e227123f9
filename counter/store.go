package counter

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"
)

// Store errors. Implementations return exactly these (possibly wrapped) for
// the conditions below; any other error means the store could not answer.
var (
	// ErrNotFound: the key does not exist (or has expired).
	ErrNotFound = errors.New("counter: key not found")
	// ErrNotStored: Add found the key already present.
	ErrNotStored = errors.New("counter: not stored")
	// ErrCASConflict: CompareAndSwap found the item modified since Gets.
	ErrCASConflict = errors.New("counter: compare-and-swap conflict")
)

// CASToken is the opaque version Store.Gets hands out and
// Store.CompareAndSwap checks. Only the Store that issued it understands it.
type CASToken any

// Store is the handful of memcached verbs the algorithms need. Each method
// is one store round trip. Implementations are safe for concurrent use and
// give memcached's semantics:
//
//   - counters are unsigned decimal ASCII values; Incr and Decr are atomic,
//     Decr stops at 0, neither changes the TTL;
//   - Add is atomic create-if-absent;
//   - ttl is the item's lifetime from now (rounded up to whole seconds by
//     memcached); ttl ≤ 0 means no expiry;
//   - an expired item behaves exactly like a missing one.
type Store interface {
	// Add stores value under key only if key is absent; ErrNotStored if not.
	Add(ctx context.Context, key string, value []byte, ttl time.Duration) error
	// Incr adds delta to the counter under key and returns the new value;
	// ErrNotFound if key is absent.
	Incr(ctx context.Context, key string, delta uint64) (uint64, error)
	// Decr subtracts delta (stopping at 0) and returns the new value;
	// ErrNotFound if key is absent.
	Decr(ctx context.Context, key string, delta uint64) (uint64, error)
	// GetMulti returns the values of the keys present; absent keys are
	// simply missing from the map. One round trip when all keys share a
	// hash tag (they land on one shard).
	GetMulti(ctx context.Context, keys []string) (map[string][]byte, error)
	// Gets returns the value under key and its version; ErrNotFound if
	// absent.
	Gets(ctx context.Context, key string) ([]byte, CASToken, error)
	// CompareAndSwap replaces the value under key if it is still at the
	// version cas; ErrCASConflict if it changed, ErrNotFound if it vanished.
	CompareAndSwap(ctx context.Context, key string, value []byte, cas CASToken, ttl time.Duration) error
}

// Batcher is an optional Store extension: a read of closed sub-windows and
// the increment-or-create of the current one in ONE round trip. Limiter
// uses it, when the store has it, for a window its worker has not seen
// yet, so that a cold key costs one round trip instead of two.
type Batcher interface {
	// GetMultiIncr returns the values of the keys present among keys and
	// adds delta to the counter incrKey, creating it at 0 with ttl first if
	// absent; it returns the counter's new value. ErrNotSupported if the
	// store cannot do it in one round trip.
	GetMultiIncr(ctx context.Context, keys []string, incrKey string, delta uint64, ttl time.Duration) (map[string][]byte, uint64, error)
}

// ErrNotSupported: the store cannot batch (see Batcher).
var ErrNotSupported = errors.New("counter: operation not supported by store")

// parseCount parses a decimal counter value written by the algorithms.
func parseCount(b []byte) (int64, error) {
	// memcached pads a counter that shrank on decr with trailing spaces.
	v, err := strconv.ParseInt(string(bytes.TrimSpace(b)), 10, 64)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("%w: %q", ErrCorrupt, b)
	}
	return v, nil
}
