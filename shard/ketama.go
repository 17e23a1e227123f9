package shard

import (
	"crypto/md5"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
)

// ErrKetamaConfig reports a Twemproxy ketama configuration that nutcracker
// itself would reject (no servers, bad weight, bad "host:port:weight [name]").
var ErrKetamaConfig = errors.New("shard: invalid ketama config")

// ErrKetamaHash reports a "hash:" name that Ketama does not implement.
var ErrKetamaHash = errors.New("shard: unsupported ketama hash")

func errKetamaHash(name string) error { return fmt.Errorf("%w %q", ErrKetamaHash, name) }

// Twemproxy 0.5.0 (src/hashkit/nc_ketama.c) constants.
const (
	ketamaPointsPerServer = 160 // points per server at equal weights
	ketamaPointsPerHash   = 4   // one MD5 digest yields four points
	ketamaDefaultPort     = 11211
	ketamaMaxHostLen      = 273 // label buffer, NUL included
)

// Ketama places keys on servers exactly as Twemproxy 0.5.0's
// "distribution: ketama" does for the same servers list (order, weights,
// names) and hash, so a pool can move from nutcracker to this proxy with
// every key staying on its shard.
//
// A Ketama is immutable and safe for concurrent use; Locate takes no lock
// and does not allocate. To change membership, build a new one and publish
// it (for instance through an atomic.Pointer).
type Ketama struct {
	n      int
	hash   KetamaHashFunc
	values []uint32 // continuum point values, ascending
	index  []int32  // index[i] is the server owning values[i]
}

// NewKetama builds the continuum for servers, listed in config order, with
// the liveness view live (nil: all live; see the package doc) and the named
// hash (see KetamaHash; "" is fnv1a_64). Each live server gets
// floor(weight/total*40*live)*4 points (160 at equal weights), four per MD5
// digest of "label-i". Points that collide keep config order, as glibc's
// stable qsort leaves them. With no server live, Locate returns -1.
func NewKetama(servers []Server, live []bool, hash string) (*Ketama, error) {
	h, err := KetamaHash(hash)
	if err != nil {
		return nil, err
	}
	if len(servers) == 0 {
		return nil, fmt.Errorf("%w: no servers", ErrKetamaConfig)
	}
	if err := checkLive(servers, live); err != nil {
		return nil, err
	}
	var total, nlive int
	for i, s := range servers {
		if s.Weight < 0 {
			return nil, fmt.Errorf("%w: server %d: negative weight", ErrKetamaConfig, i)
		}
		if isLive(live, i) {
			total += s.weight()
			nlive++
		}
	}
	k := &Ketama{n: len(servers), hash: h}
	type point struct {
		value  uint32
		server int32
	}
	var pts []point
	label := make([]byte, 0, ketamaMaxHostLen)
	for i, s := range servers {
		if !isLive(live, i) {
			continue
		}
		// Reproduce nutcracker's single-precision arithmetic step by step;
		// the explicit conversions forbid fused multiply-adds.
		pct := float32(s.weight()) / float32(total)
		x := float32(pct * float32(ketamaPointsPerServer))
		x = float32(x / float32(ketamaPointsPerHash))
		x = float32(x * float32(nlive))
		x = float32(float64(x) + 0.0000000001)
		perServer := int(math.Floor(float64(x))) * ketamaPointsPerHash
		for p := 0; p < perServer/ketamaPointsPerHash; p++ {
			label = append(label[:0], s.ketamaLabel()...)
			label = append(label, '-')
			label = strconv.AppendUint(label, uint64(p), 10)
			if len(label) > ketamaMaxHostLen-1 {
				label = label[:ketamaMaxHostLen-1]
			}
			d := md5.Sum(label)
			for w := 0; w < ketamaPointsPerHash; w++ {
				pts = append(pts, point{md5Word(&d, w), int32(i)})
			}
		}
	}
	slices.SortStableFunc(pts, func(a, b point) int {
		switch {
		case a.value < b.value:
			return -1
		case a.value > b.value:
			return 1
		}
		return 0
	})
	k.values = make([]uint32, len(pts))
	k.index = make([]int32, len(pts))
	for i, p := range pts {
		k.values[i], k.index[i] = p.value, p.server
	}
	return k, nil
}

// Len is the number of servers, live or ejected.
func (k *Ketama) Len() int { return k.n }

// Points is the number of points on the continuum.
func (k *Ketama) Points() int { return len(k.values) }

// Locate returns the index, in config order, of the server that owns key:
// the first point at or after the key's hash, wrapping to the first point.
// The key is hashed whole; apply the pool's hash tag first
// (HashTag.Extract has Twemproxy's rule). As in Twemproxy, a one-server pool skips hashing and the
// empty key hashes to 0. It returns -1 when every server is ejected.
func (k *Ketama) Locate(key []byte) int {
	if k.n == 1 && len(k.values) > 0 {
		return 0
	}
	if len(k.values) == 0 {
		return -1
	}
	var h uint32
	if len(key) > 0 {
		h = k.hash(key)
	}
	// Lower bound over values, hand-written to stay inlined and branch-light.
	lo, hi := 0, len(k.values)
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if k.values[mid] < h {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	if lo == len(k.values) {
		lo = 0
	}
	return int(k.index[lo])
}
