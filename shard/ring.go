// Package shard places keys on memcached shards and tracks shard health.
//
// A Ring is an immutable placement (buraksezer/consistent with bounded
// loads, hashing with xxhash); Ketama (ketama.go), Modula and Random
// (modula.go) are Twemproxy's distributions, placing keys exactly as
// nutcracker does. All satisfy Locator. HashTag extracts the part of a key that is hashed, so all
// keys of one identity land on one shard. Health is a per-shard state
// machine driven by time (Twemproxy's auto_eject_hosts,
// server_failure_limit, server_retry_timeout, plus re-admission only after a
// good probe), and Membership ties them together: it publishes a new
// Locator snapshot through an atomic.Pointer whenever a shard is ejected or
// re-admitted. The package knows nothing of the memcached wire format.
//
// Server is the one shard type. The placement builders (NewRing,
// NewKetama, NewModula, NewRandom) take the servers in config order plus a
// liveness view: live[i] reports whether server i is on the placement, and
// nil means every server is. A server that is not live keeps its index
// (Locate answers are indexes into the full list) but owns no keys: they
// go to the others, as nutcracker does for a server ejected by
// auto_eject_hosts. Membership builds the view from each shard's Health.
// A view of another length than the servers is ErrLiveView.
package shard

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/buraksezer/consistent"
	"github.com/cespare/xxhash/v2"
)

// Errors.
var (
	// ErrNoMembers: a ring needs at least one member.
	ErrNoMembers = errors.New("shard: no members")
	// ErrDuplicateMember: two members have the same name.
	ErrDuplicateMember = errors.New("shard: duplicate member")
	// ErrNoLiveMember: every member is ejected.
	ErrNoLiveMember = errors.New("shard: no live members")
	// ErrRingConfig: a Server or RingConfig value NewRing cannot use
	// (negative or too large weight, Load below 1, negative
	// ReplicationFactor).
	ErrRingConfig = errors.New("shard: invalid ring config")
)

// Locator maps the hashed part of a key (see HashTag) to the index of its
// shard in the pool's server list, or -1 when no shard is live.
// Implementations are immutable and safe for concurrent use.
type Locator interface {
	Locate(hashKey []byte) int
}

var (
	_ Locator = (*Ring)(nil)
	_ Locator = (*Ketama)(nil)
)

// Hasher is the xxhash (XXH64, seed 0) hasher for buraksezer/consistent.
type Hasher struct{}

// Sum64 returns xxhash64 of data.
func (Hasher) Sum64(data []byte) uint64 { return xxhash.Sum64(data) }

// RingConfig configures NewRing. Zero means default.
type RingConfig struct {
	// PartitionCount is the number of partitions of the key space; default
	// 1021. Every Ring that must agree needs the same value.
	PartitionCount int
	// ReplicationFactor is the number of ring points per virtual member;
	// default 20 (consistent's).
	ReplicationFactor int
	// Load is consistent's bounded-load factor; 0 means the default 1.25,
	// otherwise it must be at least 1 (below, consistent cannot place
	// every partition).
	Load float64
}

// MaxRingWeight is the largest Server.Weight NewRing accepts: a weight w
// puts w virtual members on the ring, so every unit of weight is one more
// virtual member, and the ring build cost grows
// faster than linearly with their number (weight 1000 takes over a
// second). Weights are relative, so scale them down (e.g. divide by
// their gcd) to fit.
const MaxRingWeight = 100

func (c RingConfig) partitionCount() int {
	if c.PartitionCount > 0 {
		return c.PartitionCount
	}
	return 1021
}

// Ring is an immutable snapshot of a consistent-hash placement: the
// partition table of a buraksezer/consistent ring, flattened so Locate takes
// no lock and does not allocate. Two Rings built from the same servers (by
// Label and weight, in any order) and config place every key identically.
type Ring struct {
	owner []int32 // partition → member index, -1 when none live
	n     int
}

type ringMember string

func (m ringMember) String() string { return string(m) }

// NewRing builds a Ring over servers with the liveness view live (see the
// package doc); Locate returns indexes into servers. A server is placed by
// its Label (Name, else Addr), never by its position in the list; two
// servers with one Label are ErrDuplicateMember.
func NewRing(servers []Server, live []bool, cfg RingConfig) (*Ring, error) {
	if len(servers) == 0 {
		return nil, ErrNoMembers
	}
	if err := checkLive(servers, live); err != nil {
		return nil, err
	}
	index := make(map[string]int, len(servers))
	var members []consistent.Member
	for i, s := range servers {
		name := s.Label()
		if _, dup := index[name]; dup || name == "" {
			return nil, fmt.Errorf("%w: %q", ErrDuplicateMember, name)
		}
		index[name] = i
		if s.Weight < 0 {
			return nil, fmt.Errorf("%w: member %q: negative weight %d", ErrRingConfig, name, s.Weight)
		}
		if s.Weight > MaxRingWeight {
			return nil, fmt.Errorf("%w: member %q: weight %d above %d (weights are relative: scale them down)",
				ErrRingConfig, name, s.Weight, MaxRingWeight)
		}
	}
	if !(cfg.Load == 0 || cfg.Load >= 1) { // also rejects NaN
		return nil, fmt.Errorf("%w: load %v: want 0 (default) or at least 1", ErrRingConfig, cfg.Load)
	}
	if cfg.ReplicationFactor < 0 {
		return nil, fmt.Errorf("%w: negative replication factor %d", ErrRingConfig, cfg.ReplicationFactor)
	}
	virtual := make(map[string]int)
	for i, s := range servers {
		if !isLive(live, i) {
			continue
		}
		for j := 0; j < s.weight(); j++ {
			name := s.Label()
			if j > 0 {
				name += "#" + strconv.Itoa(j)
			}
			if _, clash := virtual[name]; clash {
				return nil, fmt.Errorf("%w: virtual %q", ErrDuplicateMember, name)
			}
			virtual[name] = i
			members = append(members, ringMember(name))
		}
	}
	r := &Ring{owner: make([]int32, cfg.partitionCount()), n: len(servers)}
	if len(members) == 0 {
		for p := range r.owner {
			r.owner[p] = -1
		}
		return r, nil
	}
	c := consistent.New(members, consistent.Config{
		Hasher:            Hasher{},
		PartitionCount:    cfg.partitionCount(),
		ReplicationFactor: cfg.ReplicationFactor,
		Load:              cfg.Load,
	})
	for p := range r.owner {
		r.owner[p] = int32(virtual[c.GetPartitionOwner(p).String()])
	}
	return r, nil
}

// Locate returns the index of the server that owns hashKey, as
// consistent.LocateKey would, or -1 when no server is live.
func (r *Ring) Locate(hashKey []byte) int {
	return int(r.owner[xxhash.Sum64(hashKey)%uint64(len(r.owner))])
}

// Len is the number of servers, live or not.
func (r *Ring) Len() int { return r.n }
