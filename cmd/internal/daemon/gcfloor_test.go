package daemon

import (
	"context"
	"runtime/metrics"
	"testing"
	"time"
)

func gcCount() uint64 {
	s := []metrics.Sample{{Name: gcCycles}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// TestRunGCFloor: an idle process gets collections from RunGCFloor, and
// RunGCFloor returns once its context ends; every <= 0 returns at once.
func TestRunGCFloor(t *testing.T) {
	RunGCFloor(context.Background(), 0) // returns: nothing to run

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	before := gcCount()
	go func() { defer close(done); RunGCFloor(ctx, 5*time.Millisecond) }()
	deadline := time.Now().Add(10 * time.Second)
	for gcCount() < before+3 {
		if time.Now().After(deadline) {
			t.Fatalf("%d collections in 10s with a 5ms floor", gcCount()-before)
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("RunGCFloor did not return after its context ended")
	}
}
