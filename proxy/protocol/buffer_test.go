package protocol

import (
	"bytes"
	"testing"
)

func TestCompact(t *testing.T) {
	for _, tc := range []struct {
		name          string
		size, r, w    int
		need          int
		wantLen       int
		wantSameSlice bool
	}{
		{"moves the unread bytes to the front", 8, 3, 6, 0, 8, true},
		{"nothing read yet: kept", 8, 0, 5, 0, 8, true},
		{"full: doubles", 8, 0, 8, 0, 16, false},
		{"a known length beyond the buffer: grows to it", 8, 2, 6, 20, 20, false},
		{"a known length within the buffer: kept", 8, 2, 6, 8, 8, true},
		{"empty", 8, 4, 4, 0, 8, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			buf := make([]byte, tc.size)
			for i := range buf {
				buf[i] = byte('a' + i)
			}
			want := append([]byte(nil), buf[tc.r:tc.w]...)
			nb, w := Compact(buf, tc.r, tc.w, tc.need)
			if w != tc.w-tc.r || !bytes.Equal(nb[:w], want) || len(nb) != tc.wantLen {
				t.Fatalf("got %q (len %d), w %d; want %q, len %d", nb[:w], len(nb), w, want, tc.wantLen)
			}
			if same := &nb[0] == &buf[0]; same != tc.wantSameSlice {
				t.Fatalf("same buffer %v, want %v", same, tc.wantSameSlice)
			}
		})
	}
}
