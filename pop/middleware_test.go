package pop

import (
	"testing"
	"time"

	"github.com/poplimit/poplimit/counter"
)

func TestCeilSeconds(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want int64
	}{
		{-time.Second, 0},
		{0, 0},
		{1, 1},
		{time.Second, 1},
		{time.Second + 1, 2},
		{1500 * time.Millisecond, 2},
		{counter.Never, 9223372037},
		{counter.Never - time.Second + 1, 9223372036},
	} {
		if got := ceilSeconds(tc.d); got != tc.want {
			t.Errorf("ceilSeconds(%d) = %d, want %d", tc.d, got, tc.want)
		}
	}
}
