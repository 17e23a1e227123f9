package memcached

import (
	"math"
	"testing"
	"time"
)

// TestExpirationAt checks the TTL → memcached exptime conversion, including
// windows so large that a naive absolute time overflows int32.
func TestExpirationAt(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	const thirtyDays = 30 * 24 * time.Hour
	tests := []struct {
		name string
		ttl  time.Duration
		want int32
	}{
		{"zero", 0, 0},
		{"negative", -time.Second, 0},
		{"1ns rounds up", 1, 1},
		{"1s", time.Second, 1},
		{"1.5s rounds up", 1500 * time.Millisecond, 2},
		{"30 days relative", thirtyDays, 30 * 24 * 3600},
		{"30 days + 1s absolute", thirtyDays + time.Second, 1_800_000_000 + 30*24*3600 + 1},
		{"400 days", 400 * 24 * time.Hour, 1_800_000_000 + 400*24*3600},
		{"20 × 400 days clamps", 20 * 400 * 24 * time.Hour, math.MaxInt32},
		{"2^60 ns clamps", time.Duration(1) << 60, math.MaxInt32},
		{"max duration clamps", time.Duration(math.MaxInt64), math.MaxInt32},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := expirationAt(tt.ttl, now)
			if got != tt.want {
				t.Fatalf("expirationAt(%v) = %d, want %d", tt.ttl, got, tt.want)
			}
			if tt.ttl > 0 && got <= 0 {
				t.Fatalf("expirationAt(%v) = %d, not positive", tt.ttl, got)
			}
		})
	}
}
