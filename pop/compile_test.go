package pop

import (
	"errors"
	"testing"

	"github.com/poplimit/poplimit/counter/memstore"
	"github.com/poplimit/poplimit/pop/policy"
)

const minimalPolicy = `version: 1
tiers:
  free:
    limits:
      - {name: s, algorithm: fixed_window, quantity: 10, window: 1s}
policies:
  - name: p
    routes: ["GET /x"]
    tier: free
`

// TestExamplePolicyCompiles: the example policy file compiles into a
// snapshot.
func TestExamplePolicyCompiles(t *testing.T) {
	l, err := New(storeConfig(memstore.New()))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.LoadFile("../testdata/policies/example.yml"); err != nil {
		t.Fatal(err)
	}
}

// FuzzParseCompiles: every file the parser accepts compiles into a
// snapshot, and every error it returns wraps ErrInvalidPolicy.
func FuzzParseCompiles(f *testing.F) {
	f.Add([]byte(minimalPolicy))
	f.Add([]byte("version: 1\n"))
	f.Add([]byte("tiers: {a: {limits: [{quantity: 1, window: 1d}]}}\npolicies: [{name: x, routes: ['/'], tier: a}]"))
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := policy.Parse("fuzz.yml", data)
		if err != nil {
			if !errors.Is(err, ErrInvalidPolicy) {
				t.Fatalf("error does not wrap ErrInvalidPolicy: %v", err)
			}
			return
		}
		// A valid file must compile.
		l, err := New(storeConfig(memstore.New()))
		if err != nil {
			t.Fatal(err)
		}
		if err := l.install(file); err != nil && !errors.Is(err, ErrInvalidPolicy) {
			t.Fatalf("valid file failed to compile: %v", err)
		}
	})
}
