package shard

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
)

// Distribution names a placement algorithm.
const (
	// DistConsistent is buraksezer/consistent over xxhash (the default).
	DistConsistent = "consistent"
	// DistKetama is Twemproxy's ketama (see Ketama), for pools that must
	// place keys exactly as nutcracker does.
	DistKetama = "ketama"
	// DistModula is Twemproxy's modula (see Modula): hash % total live
	// weight, identical placement to nutcracker.
	DistModula = "modula"
	// DistRandom is Twemproxy's random (see Random): a uniformly random
	// live server per request, weights and keys ignored.
	DistRandom = "random"
)

// ErrDistribution: unknown distribution name.
var ErrDistribution = errors.New("shard: unsupported distribution")

// MembershipConfig configures NewMembership. Zero means default.
type MembershipConfig struct {
	// Servers is the pool's shard list, in config order (required).
	Servers []Server
	// Distribution is DistConsistent (default, also ""), DistKetama,
	// DistModula or DistRandom.
	Distribution string
	// Hash is the ketama/modula hash name (see KetamaHash); ignored by
	// DistConsistent, which always uses xxhash, and by DistRandom.
	Hash string
	// Ring configures DistConsistent.
	Ring RingConfig
	// Health is the failure policy shared by every shard.
	Health HealthConfig
	// Probe checks shard i out of band (e.g. memcached "version" on a new
	// connection); nil means an ejected shard is re-admitted as soon as its
	// retry timeout passes (Twemproxy's behaviour).
	Probe func(ctx context.Context, i int) error
	// ProbeInterval is how often Run looks for ejected shards due for a
	// probe; default 100ms.
	ProbeInterval time.Duration
	// OnChange, when set, is called after every published change (from the
	// goroutine that caused it) with the shard and whether it is now live.
	OnChange func(i int, live bool)
}

func (c MembershipConfig) probeInterval() time.Duration {
	if c.ProbeInterval > 0 {
		return c.ProbeInterval
	}
	return 100 * time.Millisecond
}

// Membership is a pool's shards, their Health, and the current Locator,
// rebuilt without ejected shards and published through an atomic.Pointer
// whenever one is ejected or re-admitted. Locate never takes a lock.
// Membership is safe for concurrent use.
type Membership struct {
	cfg    MembershipConfig
	health []*Health
	cur    atomic.Pointer[snapshot]
	mu     sync.Mutex // serialises rebuilds
}

type snapshot struct {
	loc  Locator
	live []bool
}

// NewMembership builds the pool's ring with every shard live.
func NewMembership(cfg MembershipConfig) (*Membership, error) {
	if len(cfg.Servers) == 0 {
		return nil, ErrNoMembers
	}
	switch cfg.Distribution {
	case "", DistConsistent, DistKetama, DistModula, DistRandom:
	default:
		return nil, fmt.Errorf("%w: %q", ErrDistribution, cfg.Distribution)
	}
	m := &Membership{cfg: cfg, health: make([]*Health, len(cfg.Servers))}
	for i := range m.health {
		m.health[i] = NewHealth(cfg.Health)
	}
	if err := m.rebuild(); err != nil {
		return nil, err
	}
	return m, nil
}

func (m *Membership) rebuild() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	live := make([]bool, len(m.cfg.Servers))
	for i, h := range m.health {
		live[i] = !h.Stats().Ejected
	}
	var loc Locator
	var err error
	switch m.cfg.Distribution {
	case DistKetama:
		loc, err = NewKetama(m.cfg.Servers, live, m.cfg.Hash)
	case DistModula:
		loc, err = NewModula(m.cfg.Servers, live, m.cfg.Hash)
	case DistRandom:
		loc, err = NewRandom(m.cfg.Servers, live, rand.Uint64())
	default:
		loc, err = NewRing(m.cfg.Servers, live, m.cfg.Ring)
	}
	if err != nil {
		return err
	}
	m.cur.Store(&snapshot{loc: loc, live: live})
	return nil
}

// Len is the number of shards.
func (m *Membership) Len() int { return len(m.cfg.Servers) }

// Servers returns the shard list in config order (do not modify).
func (m *Membership) Servers() []Server { return m.cfg.Servers }

// Locate returns the index of the live shard owning hashKey, or -1 when
// every shard is ejected.
func (m *Membership) Locate(hashKey []byte) int { return m.cur.Load().loc.Locate(hashKey) }

// Locator returns the current snapshot.
func (m *Membership) Locator() Locator { return m.cur.Load().loc }

// Live reports whether shard i is on the current ring.
func (m *Membership) Live(i int) bool { return m.cur.Load().live[i] }

// Health returns shard i's state machine.
func (m *Membership) Health(i int) *Health { return m.health[i] }

// Observe records the outcome of a request to shard i at now; when it
// ejects the shard, a ring without it is published before Observe returns.
func (m *Membership) Observe(i int, now time.Time, err error) {
	if m.health[i].Observe(now, err) {
		m.changed(i, false)
	}
}

func (m *Membership) changed(i int, live bool) {
	// rebuild only fails on a config NewMembership already accepted.
	_ = m.rebuild()
	if m.cfg.OnChange != nil {
		m.cfg.OnChange(i, live)
	}
}

// ProbeOnce probes every ejected shard whose retry timeout has passed at
// now and re-admits those that answer.
func (m *Membership) ProbeOnce(ctx context.Context, now time.Time) {
	for i, h := range m.health {
		if !h.ProbeDue(now) {
			continue
		}
		var err error
		if m.cfg.Probe != nil {
			err = m.cfg.Probe(ctx, i)
		}
		if h.ProbeResult(now, err) {
			m.changed(i, true)
		}
	}
}

// Run probes ejected shards every ProbeInterval until ctx is done.
func (m *Membership) Run(ctx context.Context) {
	t := time.NewTicker(m.cfg.probeInterval())
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			m.ProbeOnce(ctx, now)
		}
	}
}
