// Package memrelease hands back to the operating system the memory of
// client connections that went idle together (a connection flood that stops
// sending, a fleet's pools after a burst). What the clients held until they
// parked (stacks, read buffers, request queues) stays in sync.Pools until
// two collections pass, and its pages stay resident until the scavenger
// returns them, minutes later in a quiet process that collects only when
// forced. It imports only the standard library.
package memrelease

import (
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"
)

const (
	// AfterParked is how many more connections must be parked than at the
	// last release before the next one.
	AfterParked = 1024
	// Every is the least time between two releases.
	Every = 10 * time.Second
)

// Releaser decides when a release runs. Once AfterParked more connections
// are parked than at the last release and their number stopped growing
// (the wave has settled, so one release frees it all), at most every
// Every, it runs two collections (the first moves the pools' objects to
// their victim caches, the second frees them) and debug.FreeOSMemory, on a
// goroutine of its own. Both stop the world briefly.
//
// The zero value is ready to use. Maybe must be called from one goroutine
// at a time; Count is safe for concurrent use.
type Releaser struct {
	base    int64 // parked connections at the last release (or fewer since)
	last    int64 // parked connections at the previous call
	at      time.Time
	running atomic.Bool
	count   atomic.Uint64 // releases started
}

// Maybe records that parked connections are parked at now, and starts a
// release when parked grew by AfterParked since the last one and stopped
// growing; wg tracks the release goroutine.
func (m *Releaser) Maybe(parked int64, now time.Time, wg *sync.WaitGroup) {
	m.base = min(m.base, parked) // resumed or closed since: count from here
	growing := parked > m.last
	m.last = parked
	if growing || parked-m.base < AfterParked || (!m.at.IsZero() && now.Sub(m.at) < Every) {
		return
	}
	if !m.running.CompareAndSwap(false, true) {
		return
	}
	m.base, m.at = parked, now
	m.count.Add(1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer m.running.Store(false)
		runtime.GC()
		debug.FreeOSMemory()
	}()
}

// Count returns the number of releases started so far.
func (m *Releaser) Count() uint64 { return m.count.Load() }
