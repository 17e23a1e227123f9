package daemon

import (
	"io"
	"log/slog"
	"os"
	"runtime"
	"runtime/debug"
	"testing"
	"time"
)

func TestHeapFloorPercent(t *testing.T) {
	for _, c := range []struct {
		floor, live uint64
		want        int
	}{
		{64 << 20, 0, 100},         // nothing measured yet
		{64 << 20, 4 << 20, 1500},  // goal 4 MiB × 16 = the floor
		{64 << 20, 32 << 20, 100},  // half the floor: Go's own goal is the floor
		{64 << 20, 100 << 20, 100}, // above: Go's default
		{64 << 20, 1 << 10, 10000}, // tiny heap: capped
		{64 << 20, 21 << 20, 204},  // 21 MiB × 3.04 ≈ 64 MiB
	} {
		if got := heapFloorPercent(c.floor, c.live); got != c.want {
			t.Errorf("heapFloorPercent(%d, %d) = %d, want %d", c.floor, c.live, got, c.want)
		}
	}
}

// TestHeapFloorRetunesAfterCollections: after a collection of this test's
// small heap, GOGC is the floor's (far above 100), and 0 or GOGC in the
// environment leave it alone.
func TestHeapFloorRetunesAfterCollections(t *testing.T) {
	if _, ok := os.LookupEnv("GOGC"); ok {
		t.Skip("GOGC is set")
	}
	prev := debug.SetGCPercent(100)
	defer debug.SetGCPercent(prev)
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	if g := StartHeapFloor(0, logger); g != nil {
		t.Fatal("floor 0 started a tuner")
	}
	g := StartHeapFloor(1<<30, logger)
	if g == nil {
		t.Fatal("no tuner")
	}
	defer g.Stop()
	// The finalizer runs on its own goroutine after the collection: wait
	// for it (bounded; it does not depend on timing to pass).
	deadline := time.Now().Add(10 * time.Second)
	for g.Percent() <= 100 && time.Now().Before(deadline) {
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
	if g.Percent() <= 100 {
		t.Fatalf("GOGC still %d after collections", g.Percent())
	}
	if cur := debug.SetGCPercent(100); cur != g.Percent() {
		t.Fatalf("runtime GOGC %d, tuner says %d", cur, g.Percent())
	}
	t.Setenv("GOGC", "100")
	if g := StartHeapFloor(1<<30, logger); g != nil {
		t.Fatal("GOGC set, yet a tuner started")
	}
}
