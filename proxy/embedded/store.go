package embedded

// This file is the in-process memory backend's storage engine: one memcached
// shard held in Go memory, with memcached 1.6's item semantics. It speaks no
// protocol; shard.go turns parsed requests into calls on it.

import (
	"errors"
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/poplimit/poplimit/proxy/protocol"
)

// Sentinel errors of the memory store. The adapter maps them to the reply
// memcached writes; callers test them with errors.Is.
var (
	// ErrTooLarge: the item (header, key and value) exceeds the item
	// size limit. memcached answers "SERVER_ERROR object too large for cache".
	ErrTooLarge = errors.New("embedded: object too large for cache")
	// ErrNonNumeric: incr/decr on a value that is not a decimal
	// unsigned 64-bit number. memcached answers
	// "CLIENT_ERROR cannot increment or decrement non-numeric value".
	ErrNonNumeric = errors.New("embedded: cannot increment or decrement non-numeric value")
	// ErrOutOfMemory: the item cannot fit in the byte budget even after
	// evicting everything else. memcached answers
	// "SERVER_ERROR out of memory storing object".
	ErrOutOfMemory = errors.New("embedded: out of memory storing object")
)

// memcached constants the store reproduces.
const (
	// memRelativeMax is REALTIME_MAXDELTA: an exptime up to 30 days is
	// relative to now, a larger one is an absolute unix time.
	memRelativeMax = 60 * 60 * 24 * 30
	// memUpdateInterval is ITEM_UPDATE_INTERVAL: an item's access time is
	// refreshed on a hit only when older than this many seconds.
	memUpdateInterval = 60
	// memStartSlack is how far before its first request memcached's clock
	// starts (process_started = time(0) - ITEM_UPDATE_INTERVAL - 2).
	memStartSlack = memUpdateInterval + 2
)

// Config configures a Store. The zero value is memcached's
// defaults.
type Config struct {
	// MaxBytes is the memory budget in bytes, counted with memcached's item
	// size formula; least recently used items are evicted to stay under it.
	// Default 64 MiB (memcached -m 64).
	MaxBytes int64
	// ItemSizeMax is the largest item in bytes, header, key and value
	// included (memcached -I). Default 1 MiB.
	ItemSizeMax int
}

func (c Config) maxBytes() int64 {
	if c.MaxBytes > 0 {
		return c.MaxBytes
	}
	return 64 << 20
}

func (c Config) itemSizeMax() int {
	if c.ItemSizeMax > 0 {
		return c.ItemSizeMax
	}
	return 1 << 20
}

// Mode says how Store.Store treats an existing item.
type Mode uint8

// The storage commands of the memcached text protocol.
const (
	ModeSet     Mode = iota + 1 // store unconditionally
	ModeAdd                     // store only if absent
	ModeReplace                 // store only if present
	ModeAppend                  // add the value after the existing one; flags and exptime kept
	ModePrepend                 // add the value before the existing one; flags and exptime kept
	ModeCAS                     // store only if present with the given CAS unique
)

// Result is the outcome of a store that did not fail.
type Result uint8

// Outcomes, named after memcached's replies.
const (
	Stored    Result = iota + 1 // STORED
	NotStored                   // NOT_STORED: add on present, replace/append/prepend on absent
	Exists                      // EXISTS: cas unique mismatch
	NotFound                    // NOT_FOUND: cas on absent
)

// Item is a snapshot of one stored item.
type Item struct {
	Key string
	// Value is the item's data without the trailing CRLF. It is shared with
	// the store and must not be modified.
	Value []byte
	// Flags is the opaque 32-bit client value.
	Flags uint32
	// Exptime is when the item expires, in unix seconds; 0 means never.
	Exptime int64
	// CAS is the item's CAS unique.
	CAS uint64
}

// Write is one storage request.
type Write struct {
	Mode Mode
	Key  string
	// Value is the data block without its CRLF. The store keeps the slice:
	// the caller must not modify it afterwards.
	Value []byte
	Flags uint32
	// Exptime is the protocol's exptime: 0 never expires, up to 30 days
	// (2592000) is seconds from now, larger is an absolute unix time, and a
	// negative value makes the item expire at once. Ignored by append and
	// prepend, which keep the existing item's.
	Exptime int64
	// CAS is the unique a ModeCAS write must match. An append or prepend
	// with a non-zero CAS must match it too (memcached's meta ms with MA or
	// MP and C); the text protocol's append and prepend send none. Other
	// modes ignore it.
	CAS uint64
}

// memEntry is a stored item and its place in the LRU list.
type memEntry struct {
	key        string
	value      []byte
	flags      uint32
	exptime    int64 // unix seconds; 0 never
	cas        uint64
	atime      int64 // last access, unix seconds (memcached's it->time)
	size       int64
	tokenSent  bool      // meta: an mg won this item's token (N); later mg show Z
	keyBinary  bool      // meta: stored by an ms with b; k shows the key in base64
	fetched    bool      // read by get, gat, mg since stored (memcached's ITEM_FETCHED; me shows it)
	prev, next *memEntry // prev is more recently used
}

// Store is one in-memory memcached shard: items with flags, expiry and
// CAS uniques, an item size limit and an LRU-evicted byte budget, following
// memcached 1.6's semantics (see the methods). Time is a parameter of every
// method, at one-second granularity like memcached's clock; a store expects
// non-decreasing times.
//
// A Store is safe for concurrent use; one mutex serialises all
// operations, as one memcached item lock would for a key. The zero value is
// not usable: use NewStore.
type Store struct {
	maxBytes    int64
	itemSizeMax int

	mu          sync.Mutex
	items       map[string]*memEntry
	head, tail  *memEntry // head is the most recently used
	bytes       int64
	casCounter  uint64
	started     int64  // memcached's process_started, set at the first call
	flushOldest int64  // settings.oldest_live as unix seconds; 0 none
	flushCAS    uint64 // settings.oldest_cas
	evictions   uint64
}

// NewStore returns an empty store configured by cfg.
func NewStore(cfg Config) (*Store, error) {
	if cfg.MaxBytes < 0 || cfg.ItemSizeMax < 0 {
		return nil, errors.New("embedded: memory store: negative size in config")
	}
	return &Store{
		maxBytes:    cfg.maxBytes(),
		itemSizeMax: cfg.itemSizeMax(),
		items:       make(map[string]*memEntry),
	}, nil
}

// memItemSize is memcached's item size for the item size limit and the
// byte budget (protocol.ItemSize, memcached 1.6.18's: key "k", flags 0
// -> largest value 1048516 bytes).
func memItemSize(nkey int, flags uint32, nvalue int) int64 {
	return int64(protocol.ItemSize(nkey, flags, nvalue))
}

// Get returns the live item under key and refreshes its recency.
func (s *Store) Get(key string, now time.Time) (Item, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.lookup(key, s.clock(now))
	if e == nil {
		return Item{}, false
	}
	e.fetched = true
	s.bump(e, now.Unix())
	return e.snapshot(), true
}

// Touch sets a live item's expiry from a protocol exptime (as in
// Write) and returns it; touch, gat and gats use it. Like memcached, it
// does not change the CAS unique. A negative exptime expires the item at
// once (memcached 1.6 does so for small negative values only: it adds a
// large negative one to its own clock and wraps into the far future).
func (s *Store) Touch(key string, exptime int64, now time.Time) (Item, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sec := s.clock(now)
	e := s.lookup(key, sec)
	if e == nil {
		return Item{}, false
	}
	e.exptime = s.realtime(exptime, sec)
	e.fetched = true
	s.bump(e, sec)
	return e.snapshot(), true
}

// Delete removes a live item and reports whether there was one.
func (s *Store) Delete(key string, now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.lookup(key, s.clock(now))
	if e == nil {
		return false
	}
	s.unlink(e)
	return true
}

// Store executes a storage command. On Stored it also returns the new
// item's CAS unique. Every stored item, whatever the mode, gets a new unique
// from the store's counter; failed writes consume none.
//
// The item size is checked first, against the request's own key, flags and
// value: a write over the limit returns ErrTooLarge and, for ModeSet
// only, deletes the existing item (memcached does, to avoid serving stale
// data). An append or prepend whose combined item would exceed the limit is
// NotStored. ErrOutOfMemory is returned when the item is larger
// than the whole byte budget.
func (s *Store) Store(w Write, now time.Time) (Result, uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sec := s.clock(now)
	size := memItemSize(len(w.Key), w.Flags, len(w.Value))
	if size > int64(s.itemSizeMax) {
		if w.Mode == ModeSet {
			if old := s.lookup(w.Key, sec); old != nil {
				s.unlink(old)
			}
		}
		return 0, 0, ErrTooLarge
	}
	old := s.lookup(w.Key, sec)
	e := &memEntry{key: w.Key, value: w.Value, flags: w.Flags, atime: sec, size: size}
	switch w.Mode {
	case ModeSet:
	case ModeAdd:
		if old != nil {
			s.bump(old, sec)
			return NotStored, 0, nil
		}
	case ModeReplace:
		if old == nil {
			return NotStored, 0, nil
		}
	case ModeCAS:
		if old == nil {
			return NotFound, 0, nil
		}
		if w.CAS == 0 || w.CAS != old.cas {
			return Exists, 0, nil
		}
	case ModeAppend, ModePrepend:
		if old == nil {
			return NotStored, 0, nil
		}
		if w.CAS != 0 && w.CAS != old.cas {
			return Exists, 0, nil // meta ms MA/MP with C
		}
		e.flags, e.exptime = old.flags, old.exptime
		e.size = memItemSize(len(w.Key), e.flags, len(old.value)+len(w.Value))
		if e.size > int64(s.itemSizeMax) {
			return NotStored, 0, nil
		}
		v := make([]byte, 0, len(old.value)+len(w.Value))
		if w.Mode == ModeAppend {
			v = append(append(v, old.value...), w.Value...)
		} else {
			v = append(append(v, w.Value...), old.value...)
		}
		e.value = v
		return s.link(old, e, sec)
	default:
		return 0, 0, errors.New("embedded: memory store: unknown write mode")
	}
	e.exptime = s.realtime(w.Exptime, sec)
	return s.link(old, e, sec)
}

// Delta is incr (incr true) or decr on a live item holding a decimal number,
// and returns the new number. found is false when there is no live item.
// incr wraps modulo 2^64; decr stops at 0. The value is parsed like
// memcached's strtoull (leading whitespace and a sign allowed, trailing bytes
// must start with whitespace or NUL); anything else is ErrNonNumeric.
// Like memcached, a result no longer than the old value is written in place,
// padded with spaces to the old length ("100" decr 1 reads back "99 "); a
// longer one makes a new item. Either way flags and expiry are kept and the
// item gets a new CAS unique.
func (s *Store) Delta(key string, incr bool, delta uint64, now time.Time) (value uint64, found bool, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sec := s.clock(now)
	e := s.lookup(key, sec)
	if e == nil {
		return 0, false, nil
	}
	n, _, err := s.deltaLocked(e, incr, delta, sec)
	return n, true, err
}

// deltaLocked applies incr/decr to the live entry e and returns the new
// number and the entry now holding it (e, or its replacement). Callers hold
// s.mu.
func (s *Store) deltaLocked(e *memEntry, incr bool, delta uint64, sec int64) (uint64, *memEntry, error) {
	key := e.key
	n, ok := protocol.ParseValueUint(e.value)
	if !ok {
		return 0, e, ErrNonNumeric
	}
	if incr {
		n += delta
	} else if delta > n {
		n = 0
	} else {
		n -= delta
	}
	var buf [20]byte
	digits := strconv.AppendUint(buf[:0], n, 10)
	if len(digits) <= len(e.value) {
		v := make([]byte, len(e.value))
		copy(v, digits)
		for i := len(digits); i < len(v); i++ {
			v[i] = ' '
		}
		e.value = v // values are shared with readers: never write in place
		e.cas = s.nextCAS()
		s.bump(e, sec)
		return n, e, nil
	}
	ne := &memEntry{key: key, value: append([]byte(nil), digits...), flags: e.flags,
		exptime: e.exptime, atime: sec, size: memItemSize(len(key), e.flags, len(digits))}
	if _, _, err := s.link(e, ne, sec); err != nil {
		return 0, e, err
	}
	return n, ne, nil
}

// FlushAll invalidates every item at once (delay <= 0) or, with a delay in
// exptime form (seconds, or an absolute unix time over 30 days), every item
// not stored or accessed after that moment. As in memcached, a delay that is
// an absolute time before the store's clock started cancels any pending
// flush and flushes nothing.
func (s *Store) FlushAll(delay int64, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sec := s.clock(now)
	var oldest int64
	if delay > 0 {
		if rt := s.realtime(delay, sec); rt != memExpired {
			oldest = rt - 1
		}
	} else {
		oldest = sec - 1
	}
	s.flushOldest = oldest
	if oldest <= sec {
		s.flushCAS = s.nextCAS()
	}
}

// Len returns the number of items held, live or not yet reclaimed.
func (s *Store) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.items)
}

// Bytes returns the bytes counted against the budget.
func (s *Store) Bytes() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.bytes
}

// Evictions returns how many live items were evicted to make room.
func (s *Store) Evictions() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.evictions
}

// memExpired is the deadline of an item that is already expired
// (memcached's realtime() returning 1).
const memExpired = math.MinInt64 + 1

// clock converts now to store seconds and starts the store's clock on the
// first call. Callers hold s.mu.
func (s *Store) clock(now time.Time) int64 {
	sec := now.Unix()
	if s.started == 0 {
		s.started = sec - memStartSlack
	}
	return sec
}

// realtime is memcached's realtime(): a protocol exptime to an absolute
// deadline in unix seconds, 0 for never, memExpired for the past.
func (s *Store) realtime(exptime, sec int64) int64 {
	switch {
	case exptime == 0:
		return 0
	case exptime < 0:
		return memExpired
	case exptime > memRelativeMax:
		if exptime <= s.started {
			return memExpired
		}
		return exptime
	default:
		return sec + exptime
	}
}

// lookup returns the live entry under key, reclaiming it when it has expired
// or been flushed. Callers hold s.mu.
func (s *Store) lookup(key string, sec int64) *memEntry {
	e := s.items[key]
	if e == nil {
		return nil
	}
	if e.exptime != 0 && e.exptime <= sec || s.flushed(e, sec) {
		s.unlink(e)
		return nil
	}
	return e
}

// flushed is memcached's item_is_flushed.
func (s *Store) flushed(e *memEntry, sec int64) bool {
	if s.flushOldest == 0 || s.flushOldest > sec {
		return false
	}
	return e.atime <= s.flushOldest || s.flushCAS != 0 && e.cas != 0 && e.cas < s.flushCAS
}

func (s *Store) nextCAS() uint64 {
	s.casCounter++
	return s.casCounter
}

// link puts e in place of old (nil when absent) with a new CAS unique and
// evicts least recently used items beyond the budget. Callers hold s.mu.
func (s *Store) link(old, e *memEntry, sec int64) (Result, uint64, error) {
	if e.size > s.maxBytes {
		return 0, 0, ErrOutOfMemory
	}
	if old != nil {
		s.unlink(old)
	}
	for s.bytes+e.size > s.maxBytes && s.tail != nil {
		victim := s.tail
		if !(victim.exptime != 0 && victim.exptime <= sec || s.flushed(victim, sec)) {
			s.evictions++
		}
		s.unlink(victim)
	}
	e.cas = s.nextCAS()
	s.items[e.key] = e
	s.bytes += e.size
	s.pushFront(e)
	return Stored, e.cas, nil
}

// bump marks e most recently used and refreshes its access time the way
// memcached does (at most once per ITEM_UPDATE_INTERVAL).
func (s *Store) bump(e *memEntry, sec int64) {
	if e.atime < sec-memUpdateInterval {
		e.atime = sec
	}
	if s.head == e {
		return
	}
	s.remove(e)
	s.pushFront(e)
}

func (s *Store) unlink(e *memEntry) {
	delete(s.items, e.key)
	s.bytes -= e.size
	s.remove(e)
}

func (s *Store) pushFront(e *memEntry) {
	e.prev, e.next = nil, s.head
	if s.head != nil {
		s.head.prev = e
	}
	s.head = e
	if s.tail == nil {
		s.tail = e
	}
}

func (s *Store) remove(e *memEntry) {
	if e.prev != nil {
		e.prev.next = e.next
	} else if s.head == e {
		s.head = e.next
	}
	if e.next != nil {
		e.next.prev = e.prev
	} else if s.tail == e {
		s.tail = e.prev
	}
	e.prev, e.next = nil, nil
}

func (e *memEntry) snapshot() Item {
	exp := e.exptime
	if exp == memExpired {
		exp = 1
	}
	return Item{Key: e.key, Value: e.value, Flags: e.flags, Exptime: exp, CAS: e.cas}
}
