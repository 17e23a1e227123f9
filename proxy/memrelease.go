package proxy

import (
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"
)

// memRelease hands back to the operating system the memory of clients
// that went idle together (a connection flood that stops sending, a
// fleet's pools after a burst). A parked connection keeps a 16-byte
// record (park_linux.go), but what the clients held until they parked
// (stacks, read buffers, request queues, clientConns) stays in sync.Pools
// until two collections pass and its pages stay resident until the
// scavenger returns them, minutes later in a quiet process, which
// collects only when forced (every 2 minutes).
//
// The sweeper calls maybe after each sweep; once releaseAfterParked more
// connections are parked than at the last release and their number
// stopped growing (a sweep parked none: the wave has settled, so one
// release frees it all), at most every releaseEvery, it runs two collections (the first moves the pools'
// objects to their victim caches, the second frees them) and
// debug.FreeOSMemory, on a goroutine of the Server's wait group. Both
// stop the world for about a millisecond with a small live heap.
type memRelease struct {
	base    int64 // parked connections at the last release (or fewer since)
	last    int64 // parked connections at the previous sweep
	at      time.Time
	running atomic.Bool
	count   atomic.Uint64 // releases run
}

const (
	releaseAfterParked = 1024
	releaseEvery       = 10 * time.Second
)

// maybe starts a release when parked grew by releaseAfterParked since the
// last one; wg tracks the release goroutine. Sweeper goroutine only.
func (m *memRelease) maybe(parked int64, now time.Time, wg *sync.WaitGroup) {
	m.base = min(m.base, parked) // resumed or closed since: count from here
	growing := parked > m.last
	m.last = parked
	if growing || parked-m.base < releaseAfterParked || (!m.at.IsZero() && now.Sub(m.at) < releaseEvery) {
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
