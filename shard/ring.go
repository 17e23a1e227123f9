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
	// ErrRingConfig: a Member or RingConfig value NewRing cannot use
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

// Member is one shard on a Ring.
type Member struct {
	// Name identifies the member on the ring: placement depends on names
	// only, never on list order. Usually "host:port" or the Twemproxy
	// server name.
	Name string
	// Weight is the member's relative share; default 1. A weight w puts
	// w virtual members on the ring, so building costs grow with the total
	// weight: NewRing rejects weights above MaxRingWeight.
	Weight int
	// Ejected keeps the member's index but leaves it off the ring: its keys
	// go to the others.
	Ejected bool
}

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

// MaxRingWeight is the largest Member.Weight NewRing accepts: every unit
// of weight is one more virtual member, and the ring build cost grows
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
// no lock and does not allocate. Two Rings built from the same members (by
// name and weight, in any order) and config place every key identically.
type Ring struct {
	owner []int32 // partition → member index, -1 when none live
	n     int
}

type ringMember string

func (m ringMember) String() string { return string(m) }

// NewRing builds a Ring over members; Locate returns indexes into members.
func NewRing(members []Member, cfg RingConfig) (*Ring, error) {
	if len(members) == 0 {
		return nil, ErrNoMembers
	}
	index := make(map[string]int, len(members))
	var live []consistent.Member
	for i, m := range members {
		if _, dup := index[m.Name]; dup || m.Name == "" {
			return nil, fmt.Errorf("%w: %q", ErrDuplicateMember, m.Name)
		}
		index[m.Name] = i
		if m.Weight < 0 {
			return nil, fmt.Errorf("%w: member %q: negative weight %d", ErrRingConfig, m.Name, m.Weight)
		}
		if m.Weight > MaxRingWeight {
			return nil, fmt.Errorf("%w: member %q: weight %d above %d (weights are relative: scale them down)",
				ErrRingConfig, m.Name, m.Weight, MaxRingWeight)
		}
	}
	if !(cfg.Load == 0 || cfg.Load >= 1) { // also rejects NaN
		return nil, fmt.Errorf("%w: load %v: want 0 (default) or at least 1", ErrRingConfig, cfg.Load)
	}
	if cfg.ReplicationFactor < 0 {
		return nil, fmt.Errorf("%w: negative replication factor %d", ErrRingConfig, cfg.ReplicationFactor)
	}
	virtual := make(map[string]int)
	for i, m := range members {
		if m.Ejected {
			continue
		}
		w := max(m.Weight, 1)
		for j := 0; j < w; j++ {
			name := m.Name
			if j > 0 {
				name = m.Name + "#" + strconv.Itoa(j)
			}
			if _, clash := virtual[name]; clash {
				return nil, fmt.Errorf("%w: virtual %q", ErrDuplicateMember, name)
			}
			virtual[name] = i
			live = append(live, ringMember(name))
		}
	}
	r := &Ring{owner: make([]int32, cfg.partitionCount()), n: len(members)}
	if len(live) == 0 {
		for p := range r.owner {
			r.owner[p] = -1
		}
		return r, nil
	}
	c := consistent.New(live, consistent.Config{
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

// Locate returns the index of the member that owns hashKey, as
// consistent.LocateKey would, or -1 when every member is ejected.
func (r *Ring) Locate(hashKey []byte) int {
	return int(r.owner[xxhash.Sum64(hashKey)%uint64(len(r.owner))])
}

// Len is the number of members, live or ejected.
func (r *Ring) Len() int { return r.n }
