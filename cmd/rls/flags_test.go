package main

import (
	"testing"

	"github.com/poplimit/poplimit/bench/fixture"
	"github.com/poplimit/poplimit/cmd/internal/storeflags"
)

// TestFlagsDeclaredOnce: every flag name of rls is declared once, and
// the store, store-deadline and breaker flags are storeflags' (shared
// with the other daemon).
func TestFlagsDeclaredOnce(t *testing.T) {
	fixture.FlagsDeclaredOnce(t, newApp().Flags, storeflags.Flags())
}
