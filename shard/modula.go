package shard

import (
	"fmt"
	"math"
	"sync/atomic"
)

// modulaTableMax is the largest total live weight for which Modula keeps
// Twemproxy's continuum as a flat table (one int32 per weight unit, 256 KiB
// at most); above it, Locate binary-searches the cumulative weights, which
// places keys identically without allocating one slot per weight unit.
const modulaTableMax = 1 << 16

var (
	_ Locator = (*Modula)(nil)
	_ Locator = (*Random)(nil)
)

// Modula places keys on servers exactly as Twemproxy 0.5.0's
// "distribution: modula" does (src/hashkit/nc_modula.c) for the same
// servers list (order and weights) and hash: the continuum holds one slot
// per weight unit of every live server, in config order (server 0's slots
// first), and a key goes to slot hash(key) % slots. Server names and
// addresses do not affect placement; order and weights do.
//
// Because placement is a modulo, adding, removing or ejecting a server
// moves most keys (unlike ketama): an ejected server's slots are removed
// from the continuum, so the live servers' keys are reshuffled too. That is
// nutcracker's behaviour with auto_eject_hosts, reproduced here through
// the liveness view.
//
// A Modula is immutable and safe for concurrent use; Locate takes no lock
// and does not allocate.
type Modula struct {
	n     int
	hash  KetamaHashFunc
	total uint32  // live weight units: the continuum's length
	table []int32 // table[slot] is the server, when total <= modulaTableMax
	cum   []uint32
	idx   []int32 // otherwise: server idx[i] owns slots [cum[i-1], cum[i])
}

// liveWeights validates servers (config order) and the liveness view live,
// and returns the indexes of the live servers, their weights (0 means 1)
// and the total live weight.
func liveWeights(servers []Server, live []bool) (idx []int32, weights []uint32, total uint64, err error) {
	if len(servers) == 0 {
		return nil, nil, 0, fmt.Errorf("%w: no servers", ErrKetamaConfig)
	}
	if err := checkLive(servers, live); err != nil {
		return nil, nil, 0, err
	}
	if len(servers) > math.MaxInt32 {
		return nil, nil, 0, fmt.Errorf("%w: too many servers", ErrKetamaConfig)
	}
	for i, s := range servers {
		if s.Weight < 0 {
			return nil, nil, 0, fmt.Errorf("%w: server %d: negative weight", ErrKetamaConfig, i)
		}
		if !isLive(live, i) {
			continue
		}
		idx = append(idx, int32(i))
		weights = append(weights, uint32(min(s.weight(), math.MaxUint32)))
		total += uint64(s.weight())
	}
	return idx, weights, total, nil
}

// NewModula builds Twemproxy's modula continuum for servers, listed in
// config order, with the liveness view live (nil: all live; see the
// package doc) and the named hash (see KetamaHash; "" is fnv1a_64). Weight
// 0 means 1; a negative weight, an empty list, or a total live weight above
// 2^32-1 (nutcracker's uint32 counter would wrap) is ErrKetamaConfig. With
// no server live, Locate returns -1.
func NewModula(servers []Server, live []bool, hash string) (*Modula, error) {
	h, err := KetamaHash(hash)
	if err != nil {
		return nil, err
	}
	idx, weights, total, err := liveWeights(servers, live)
	if err != nil {
		return nil, err
	}
	if total > math.MaxUint32 {
		return nil, fmt.Errorf("%w: total weight %d exceeds 2^32-1", ErrKetamaConfig, total)
	}
	m := &Modula{n: len(servers), hash: h, total: uint32(total)}
	if total <= modulaTableMax {
		m.table = make([]int32, 0, total)
		for i, w := range weights {
			for range w {
				m.table = append(m.table, idx[i])
			}
		}
		return m, nil
	}
	m.idx = idx
	m.cum = make([]uint32, len(weights))
	var c uint32
	for i, w := range weights {
		c += w
		m.cum[i] = c
	}
	return m, nil
}

// Len is the number of servers, live or ejected.
func (m *Modula) Len() int { return m.n }

// Points is the continuum's length: the total weight of the live servers.
func (m *Modula) Points() int { return int(m.total) }

// Locate returns the index, in config order, of the server that owns key:
// continuum slot hash(key) % Points(). The key is hashed whole; apply the
// pool's hash tag first (HashTag.Extract has Twemproxy's rule). As in
// Twemproxy, a one-server pool skips hashing and the empty key hashes to 0.
// It returns -1 when every server is ejected.
func (m *Modula) Locate(key []byte) int {
	if m.total == 0 {
		return -1
	}
	if m.n == 1 {
		return 0
	}
	var h uint32
	if len(key) > 0 {
		h = m.hash(key)
	}
	slot := h % m.total
	if m.table != nil {
		return int(m.table[slot])
	}
	// First server whose cumulative weight exceeds slot.
	lo, hi := 0, len(m.cum)
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if m.cum[mid] <= slot {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return int(m.idx[lo])
}

// Random places each request on a live server drawn uniformly at random,
// as Twemproxy 0.5.0's "distribution: random" does (src/hashkit/nc_random.c):
// its continuum holds exactly one slot per live server, so weights are
// ignored (nutcracker reads them but random_update never uses them), and the
// key is not hashed at all.
//
// Placement does not depend on the key: a get may therefore miss a value
// that a set of the same key wrote, and the keys of one hash tag do not
// share a shard. That is Twemproxy's semantics; random only suits pools
// where every shard holds the same data or where misses are acceptable,
// never shared rate-limit counters.
//
// A Random is safe for concurrent use; Locate takes no lock and does not
// allocate. Its only mutable state is the generator, one atomic counter
// per Random (SplitMix64: the counter advances by a fixed odd step and each
// value is mixed), so concurrent callers get distinct draws. It is not a
// cryptographic generator.
type Random struct {
	n    int
	live []int32 // live server indexes, config order
	_    [64]byte
	ctr  atomic.Uint64 // own cache line: every Locate writes it
	_    [56]byte
}

// NewRandom builds Twemproxy's random continuum for servers, listed in
// config order, with the liveness view live (nil: all live; see the
// package doc), with its generator seeded by seed (the same seed draws the
// same sequence of servers when called from one goroutine). Weights are
// validated (negative is ErrKetamaConfig) but do not affect placement.
// With every server dead, Locate returns -1.
func NewRandom(servers []Server, live []bool, seed uint64) (*Random, error) {
	idx, _, _, err := liveWeights(servers, live)
	if err != nil {
		return nil, err
	}
	r := &Random{n: len(servers), live: idx}
	r.ctr.Store(seed)
	return r, nil
}

// Len is the number of servers, live or ejected.
func (r *Random) Len() int { return r.n }

// Points is the continuum's length: the number of live servers.
func (r *Random) Points() int { return len(r.live) }

// Locate ignores key and returns the index, in config order, of a live
// server drawn uniformly at random, or -1 when every server is ejected. As
// in Twemproxy, a one-server pool always returns 0.
func (r *Random) Locate(key []byte) int {
	n := uint64(len(r.live))
	if n == 0 {
		return -1
	}
	if r.n == 1 {
		return 0
	}
	x := r.ctr.Add(0x9e3779b97f4a7c15)
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	x ^= x >> 31
	// Lemire's multiply-shift maps the top 32 bits onto [0, n).
	return int(r.live[((x>>32)*n)>>32])
}
