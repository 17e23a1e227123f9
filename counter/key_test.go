package counter_test

import (
	"strings"
	"testing"
	"time"

	"github.com/poplimit/poplimit/counter"
	"github.com/poplimit/poplimit/counter/counting"
	"github.com/poplimit/poplimit/counter/memstore"
)

func TestKey(t *testing.T) {
	long := strings.Repeat("a", 65)
	tests := []struct {
		name  string
		parts []string
		want  string
	}{
		{"ip", []string{"ip", "203.0.113.7"}, "r{ip|203.0.113.7}"},
		{"route", []string{"tenant", "acme", "route", "/v1/pay"}, "r{tenant|acme|route|/v1/pay}"},
		{"no parts", nil, "r{}"},
		{"space hashed", []string{"user", "a b"}, "r{user|~"},
		{"brace hashed", []string{"x{y}"}, "r{~"},
		{"separator hashed", []string{"a|b"}, "r{~"},
		{"ipv6 kept", []string{"ip", "2001:db8::1"}, "r{ip|2001:db8::1}"},
		{"utf8 hashed", []string{"user", "zoë"}, "r{user|~"},
		{"long hashed", []string{"k", long}, "r{k|~"},
		{"empty hashed", []string{""}, "r{~"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			k := counter.Key(tc.parts...)
			if !strings.HasPrefix(k, tc.want) {
				t.Fatalf("Key(%q) = %q, want prefix %q", tc.parts, k, tc.want)
			}
			if !counter.LegalKey(k) || len(k) > counter.MaxIdentityLen {
				t.Fatalf("Key(%q) = %q is not a legal identity key", tc.parts, k)
			}
		})
	}
}

func TestKeyDistinct(t *testing.T) {
	lists := [][]string{{"a", "b"}, {"a|b"}, {"ab"}, {"a", "b", ""}, {""}, {}, {"a b"}, {"a_b"},
		{strings.Repeat("x", 200)}, {strings.Repeat("x", 200), "y"}, {"~"}, {"{a}"}}
	seen := map[string][]string{}
	for _, p := range lists {
		k := counter.Key(p...)
		if prev, ok := seen[k]; ok {
			t.Fatalf("Key(%q) = Key(%q) = %q", p, prev, k)
		}
		seen[k] = p
	}
}

func TestKeyLongIdentity(t *testing.T) {
	parts := make([]string, 20)
	for i := range parts {
		parts[i] = strings.Repeat("p", 60)
	}
	k := counter.Key(parts...)
	if len(k) > counter.MaxIdentityLen || !strings.HasPrefix(k, "r{~") {
		t.Fatalf("long identity %q (%d bytes)", k, len(k))
	}
}

// FuzzKey: every input yields a legal key that keeps its hash tag, and a
// limiter accepts it (window suffix included).
func FuzzKey(f *testing.F) {
	f.Add("ip", "203.0.113.7", "")
	f.Add("user", "zoë", "/v1/pay")
	f.Add("", "\x00\r\n", "{}|~")
	f.Add(strings.Repeat("a", 300), "b", "c")
	lim, err := counter.New(memstore.New(), counter.Limit{Quantity: 5, Window: 250 * ms, Precision: 5})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, a, b, c string) {
		k := counter.Key(a, b, c)
		if !counter.LegalKey(k) || len(k) > counter.MaxIdentityLen {
			t.Fatalf("illegal key %q", k)
		}
		open, close := strings.IndexByte(k, '{'), strings.IndexByte(k, '}')
		if open != 1 || close != len(k)-1 {
			t.Fatalf("hash tag not the whole identity: %q", k)
		}
		if _, err := lim.AllowN(ctx, k, t0, 1); err != nil {
			t.Fatalf("limiter rejected key %q: %v", k, err)
		}
	})
}

// TestWindowKeyScheme pins the documented key of a minute sliding window.
func TestWindowKeyScheme(t *testing.T) {
	cs := counting.New(frozenMemoryStore())
	lim, _ := counter.New(noBatch{cs}, counter.Limit{Quantity: 5, Window: time.Minute})
	at := time.Date(2026, 11, 29, 21, 0, 0, 0, time.UTC)
	key := counter.Key("ip", "203.0.113.7")
	if _, err := lim.AllowN(ctx, key, at, 1); err != nil {
		t.Fatal(err)
	}
	vals, _ := cs.GetMulti(ctx, []string{"r{ip|203.0.113.7}s1aao.htkj0", "r{ip|203.0.113.7}s1aao.htkiz"})
	if len(vals) != 1 || string(vals["r{ip|203.0.113.7}s1aao.htkj0"]) != "1" {
		t.Fatalf("store holds %q", vals)
	}
}
