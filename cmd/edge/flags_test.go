package main

import (
	"testing"

	"github.com/poplimit/poplimit/cmd/internal/storeflags"
)

// TestFlagsDeclaredOnce: every flag name of edge is declared once, and
// the store, store-deadline and breaker flags are storeflags' (shared
// with the other daemon).
func TestFlagsDeclaredOnce(t *testing.T) {
	seen := map[string]int{}
	for _, f := range newApp().Flags {
		for _, n := range f.Names() {
			seen[n]++
		}
	}
	for n, k := range seen {
		if k > 1 {
			t.Errorf("--%s declared %d times", n, k)
		}
	}
	for _, f := range storeflags.Flags() {
		if seen[f.Names()[0]] != 1 {
			t.Errorf("--%s of storeflags missing", f.Names()[0])
		}
	}
}
