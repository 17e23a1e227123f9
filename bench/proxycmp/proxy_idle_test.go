package proxycmp

import (
	"context"
	"testing"
	"time"

	"github.com/poplimit/poplimit/bench/fixture"
)

// TestIdleConnsShort: 500 idle connections to mcproxy and to nutcracker
// all answer after being held; mcproxy's parked ones have no goroutine
// each (the figures are logged; RSS per connection is for popbench
// proxy --idle-conns 10000 to compare, too noisy at 500).
func TestIdleConnsShort(t *testing.T) {
	fixture.RequireNutcracker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rep, err := runIdleConns(ctx, IdleConnsConfig{Conns: 500, Sample: 50, Settle: 2500 * time.Millisecond, Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Results) != 2 {
		t.Fatalf("%d results, want mcproxy and nutcracker", len(rep.Results))
	}
	for _, r := range rep.Results {
		t.Logf("%s: %d conns, %.0f bytes RSS and %.3f goroutines each, heap %.0f, %d/%d answered",
			r.System, r.Conns, r.BytesPerConn, r.GoroutinesPerConn, r.HeapPerConn, r.Answered, r.Sampled)
		if r.Answered != r.Sampled || r.Sampled != 50 {
			t.Errorf("%s: %d of %d sampled connections answered", r.System, r.Answered, r.Sampled)
		}
		if r.OpenAtMeasure < int64(r.Conns) {
			t.Errorf("%s: %d descriptors more than before at the measurement, want at least the %d connections held",
				r.System, r.OpenAtMeasure, r.Conns)
		}
	}
	if mc := rep.Results[0]; mc.System != systemMcproxy || mc.GoroutinesHeld < 0 || mc.GoroutinesPerConn > 0.05 {
		t.Errorf("mcproxy: %.3f goroutines per idle connection (%d -> %d), want about 0 (parked)",
			mc.GoroutinesPerConn, mc.GoroutinesBefore, mc.GoroutinesHeld)
	}
}
