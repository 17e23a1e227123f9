package memrelease

import (
	"sync"
	"testing"
	"time"
)

// TestReleaseWaitsForTheWaveToSettle: a release runs once the parked
// count has grown by AfterParked and stopped growing, at most once per
// Every, and counts from the lowest level seen since.
func TestReleaseWaitsForTheWaveToSettle(t *testing.T) {
	var m Releaser
	var wg sync.WaitGroup
	t0 := time.Unix(1_000_000, 0)
	steps := []struct {
		parked int64
		at     time.Duration
		want   uint64 // releases so far
	}{
		{500, 0, 0},                 // growing, too few
		{2000, time.Second, 0},      // growing
		{2000, 2 * time.Second, 1},  // settled: release
		{2600, 3 * time.Second, 1},  // growing
		{2600, 4 * time.Second, 1},  // settled but only +600
		{3100, 5 * time.Second, 1},  // growing
		{3100, 6 * time.Second, 1},  // +1100 but within Every
		{3100, 13 * time.Second, 2}, // past Every
		{100, 14 * time.Second, 2},  // clients gone: count from here
		{1000, 30 * time.Second, 2}, // growing
		{1000, 31 * time.Second, 2}, // +900 from the low
		{1200, 32 * time.Second, 2}, // growing
		{1200, 33 * time.Second, 3}, // +1100 from the low, settled
	}
	for i, s := range steps {
		m.Maybe(s.parked, t0.Add(s.at), &wg)
		wg.Wait() // the release goroutine ends before the next step
		if got := m.Count(); got != s.want {
			t.Fatalf("step %d (%d parked at %v): %d releases, want %d", i, s.parked, s.at, got, s.want)
		}
	}
}
