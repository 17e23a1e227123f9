package rls

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestStatsCountByKeyAndOverflow: hits count under (domain, key after the
// domain), a series appears once it counts, and keys beyond maxKeys count
// together under _overflow.
func TestStatsCountByKeyAndOverflow(t *testing.T) {
	reg := prometheus.NewRegistry()
	s, err := NewStats(reg, 2)
	if err != nil {
		t.Fatal(err)
	}
	s.descriptor("d", "d.user", 1, hitCounts{within: 1})
	s.descriptor("d", "d.user", 2, hitCounts{within: 2, near: 2})
	s.descriptor("d", "d.ip", 1, hitCounts{over: 1, shadow: 1})
	s.descriptor("d", "d.a", 5, hitCounts{within: 5}) // third key: overflow
	s.descriptor("d", "d.b", 1, hitCounts{over: 1})   // fourth: overflow too
	s.descriptor("e", "e.x", 1, hitCounts{within: 1}) // another domain, still over the bound
	for _, c := range []struct {
		vec         *prometheus.CounterVec
		key, domain string
		want        float64
	}{
		{s.total, "user", "d", 3}, {s.within, "user", "d", 3}, {s.near, "user", "d", 2},
		{s.total, "ip", "d", 1}, {s.over, "ip", "d", 1}, {s.shadow, "ip", "d", 1},
		{s.total, overflowKey, "d", 6}, {s.within, overflowKey, "d", 5}, {s.over, overflowKey, "d", 1},
		{s.total, overflowKey, "e", 1},
	} {
		if got := testutil.ToFloat64(c.vec.WithLabelValues(c.domain, c.key)); got != c.want {
			t.Errorf("%s/%s: %v, want %v", c.domain, c.key, got, c.want)
		}
	}
	// Series only where something counted: total has d/user, d/ip,
	// d/_overflow, e/_overflow (and the lookups above created none new).
	if n := testutil.CollectAndCount(s.total); n != 4 {
		t.Fatalf("%d total_hits series, want 4", n)
	}
	if n := testutil.CollectAndCount(s.near); n != 1 {
		t.Fatalf("%d near_limit series, want 1", n)
	}
}
