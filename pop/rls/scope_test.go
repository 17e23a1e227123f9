package rls

import (
	"strings"
	"testing"
)

// scope: global in a descriptor's rate_limit makes the limit a global one
// (pop/global); it needs a fixed window.
func TestScopeGlobal(t *testing.T) {
	const doc = `domain: d
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 100, scope: global}
  - key: j
    rate_limit: {unit: minute, requests_per_unit: 100}
`
	cfg, err := Parse(map[string][]byte{"a.yaml": []byte(doc)}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Rules) != 2 || !cfg.Rules[0].Limits[0].Global || cfg.Rules[1].Limits[0].Global {
		t.Fatalf("rules %+v: want the first limit global, the second per PoP", cfg.Rules)
	}
	for _, bad := range []string{
		"{unit: minute, requests_per_unit: 100, scope: global, algorithm: sliding_window}",
		"{unit: minute, requests_per_unit: 100, scope: planet}",
	} {
		_, err := Parse(map[string][]byte{"a.yaml": []byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit: " + bad + "\n")}, Options{})
		if err == nil || !strings.Contains(err.Error(), "a.yaml:") {
			t.Errorf("%s: err %v, want a file:line error", bad, err)
		}
	}
}
