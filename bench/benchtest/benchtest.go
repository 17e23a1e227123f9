// Package benchtest holds what the tests of bench's scenario packages
// share: the binaries, an Env per test, and the JSON a consumer of
// popbench --json would see. Test code only.
package benchtest

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/poplimit/poplimit/bench"
	"github.com/poplimit/poplimit/bench/fixture"
)

// bins returns mcproxy and edge, built once per test binary (the test
// package's TestMain must call fixture.Main).
func bins(t *testing.T) *bench.Binaries {
	return &bench.Binaries{MCProxy: fixture.Binary(t, "mcproxy"), Edge: fixture.Binary(t, "edge")}
}

// Env returns an environment for an end-to-end scenario (with edge
// workers when edge), closed when the test ends; skipped with -short.
func Env(t *testing.T, edge bool) *bench.Env {
	t.Helper()
	if testing.Short() {
		t.Skip("end-to-end scenario: skipped with -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	env, err := bench.NewEnv(ctx, bench.EnvConfig{Edge: edge, Dir: t.TempDir(), Bins: bins(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(env.Close)
	if env.ProxyErr != nil {
		t.Fatalf("mcproxy does not build: %v", env.ProxyErr)
	}
	if edge && env.EdgeErr != nil {
		t.Fatalf("edge does not build: %v", env.EdgeErr)
	}
	return env
}

// JSON marshals v and decodes it generically, as a consumer of --json
// would see it.
func JSON(t *testing.T, v any) map[string]any {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// Num is the number m[key], failing the test when it is missing.
func Num(t *testing.T, m map[string]any, key string) float64 {
	t.Helper()
	v, ok := m[key].(float64)
	if !ok {
		t.Fatalf("JSON field %q missing or not a number in %v", key, m)
	}
	return v
}
