package policy

import (
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/poplimit/poplimit/counter"
)

func TestParseExample(t *testing.T) {
	f, err := parseFile("../../testdata/policies/example.yml")
	if err != nil {
		t.Fatal(err)
	}
	if f.Headers != HeadersBoth || len(f.TrustedProxies) != 3 || !f.APIKey.Bearer || f.APIKey.Header != "X-Api-Key" || f.APIKey.Query != "api_key" {
		t.Errorf("top level: %+v", f)
	}
	if f.Prefilter == nil || f.Prefilter.Quantity != 2000 || f.Prefilter.Burst != 4000 {
		t.Errorf("prefilter: %+v", f.Prefilter)
	}
	if rec := f.Keys["demo-pro-key"]; rec.Tenant != "globex" || rec.Tier != "pro" {
		t.Errorf("key record: %+v", rec)
	}
	ent := f.Tiers["enterprise"].Limits
	if len(ent) != 2 || ent[1].Limit.Window != 24*time.Hour || ent[1].Limit.OnReject != counter.Refund || ent[0].Limit.Burst != 2000 {
		t.Errorf("enterprise: %+v", ent)
	}
	modes := map[string]FailMode{}
	for _, p := range f.Policies {
		modes[p.Name] = p.FailMode
	}
	want := map[string]FailMode{"api": FailLocal, "search": FailClosed, "login": FailOpen, "ingest": FailOpen, "unmatched": FailOpen}
	if f.DefaultPolicy != "unmatched" || f.MaxForwardedHops != 16 || f.IPv4Prefix != 32 || f.IPv6Prefix != 64 || f.CaseInsensitivePaths {
		t.Errorf("default policy, hops, prefixes, case: %q %d %d %d %v", f.DefaultPolicy, f.MaxForwardedHops, f.IPv4Prefix, f.IPv6Prefix, f.CaseInsensitivePaths)
	}
	for n, m := range want {
		if modes[n] != m {
			t.Errorf("policy %s fail mode %v, want %v", n, modes[n], m)
		}
	}
	var ingest, search PolicySpec
	for _, p := range f.Policies {
		switch p.Name {
		case "ingest":
			ingest = p
		case "search":
			search = p
		}
	}
	if !ingest.Lease.Enabled || ingest.Lease.MaxBatch != 10 || ingest.Lease.Horizon != 100*time.Millisecond {
		t.Errorf("lease: %+v", ingest.Lease)
	}
	if o := search.Overrides["pro"]; len(o) != 1 || o[0].Cost != 2 || search.TierSource != "pro" || search.DefaultTier != "pro" {
		t.Errorf("search: %+v", search)
	}
}

// parseFile parses the policy file at path.
func parseFile(path string) (*File, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return Parse(path, data)
}

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

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name      string
		doc       string
		wantLine  int
		wantField string
		wantMsg   string
	}{
		{"bad yaml", "version: 1\ntiers: [\n", 2, "(document)", "yaml"},
		{"root not a mapping", "00\n", 1, "(document)", "must be a mapping"},
		{"unknown top field", minimalPolicy + "bogus: 1\n", 10, "bogus", "unknown field"},
		{"bad window", strings.Replace(minimalPolicy, "window: 1s", "window: 1 sec", 1), 5, "tiers.free.limits[0].window", "duration"},
		{"zero quantity", strings.Replace(minimalPolicy, "quantity: 10", "quantity: 0", 1), 5, "tiers.free.limits[0].quantity", "≥ 1"},
		{"bad algorithm", strings.Replace(minimalPolicy, "fixed_window", "leaky", 1), 5, "tiers.free.limits[0].algorithm", "leaky"},
		{"unknown tier", strings.Replace(minimalPolicy, "tier: free", "tier: gold", 1), 9, "policies[0].tier", "gold"},
		{"bad route", strings.Replace(minimalPolicy, `"GET /x"`, `"GET x"`, 1), 8, "policies[0].routes[0]", "pattern"},
		{"bad fail mode", minimalPolicy + "    fail_mode: maybe\n", 10, "policies[0].fail_mode", "maybe"},
		{"bad identity", minimalPolicy + "    identity: [ip, cookie]\n", 10, "policies[0].identity[1]", "cookie"},
		{"bad cidr", minimalPolicy + "trusted_proxies: [10.0.0.0/33]\n", 10, "trusted_proxies[0]", "CIDR"},
		{"bad version", strings.Replace(minimalPolicy, "version: 1", "version: 2", 1), 1, "version", "unsupported"},
		{"cost too high", strings.Replace(minimalPolicy, "window: 1s}", "window: 1s, cost: 11}", 1), 5, "tiers.free.limits[0].cost", "exceeds"},
		{"bad precision", strings.Replace(minimalPolicy, "fixed_window, quantity: 10, window: 1s", "sliding_window, quantity: 10, window: 1s, precision: 7", 1), 5, "tiers.free.limits[0]", "precision"},
		{"no policies", "version: 1\ntiers:\n  free:\n    limits: [{quantity: 1, window: 1s}]\n", 1, "policies", "required"},
		{"default tier required", strings.Replace(minimalPolicy, "tier: free", "tier: api_key", 1), 7, "policies[0].default_tier", "required"},
		{"unknown key tier", minimalPolicy + "keys:\n  - {key: k1, tier: gold}\n", 11, "keys[0].tier", "gold"},
		{"conflicting routes", minimalPolicy + "  - name: q\n    routes: [\"GET /x\"]\n    tier: free\n", 11, "policies[1].routes[0]", "conflicts"},
		{"duplicate policy", minimalPolicy + "  - name: p\n    routes: [\"GET /y\"]\n    tier: free\n", 10, "policies[1].name", "duplicate"},
		{"max_batch over the limit", minimalPolicy + "    lease:\n      enabled: true\n      max_batch: 11\n", 12, "policies[0].lease.max_batch", "exceeds"},
		{"max_batch over allowance/cost", strings.Replace(minimalPolicy, "window: 1s}", "window: 1s, cost: 2}", 1) + "    lease: {enabled: true, max_batch: 6}\n", 10, "policies[0].lease.max_batch", "exceeds"},
		{"max_batch over an override", minimalPolicy + "    overrides:\n      free: [{name: o, algorithm: token_bucket, quantity: 2, window: 1s, burst: 3}]\n    lease: {enabled: true, max_batch: 4}\n", 12, "policies[0].lease.max_batch", "exceeds"},
		{"max_batch over a key's tier", strings.Replace(strings.Replace(minimalPolicy, "tier: free", "tier: api_key\n    default_tier: big", 1), "policies:", "  big:\n    limits: [{name: b, algorithm: fixed_window, quantity: 100, window: 1s}]\npolicies:", 1) + "    lease: {enabled: true, max_batch: 50}\n", 13, "policies[0].lease.max_batch", "tier free"},
		{"unknown default policy", minimalPolicy + "default_policy: nope\n", 10, "default_policy", "unknown policy"},
		{"default and unmatched", minimalPolicy + "default_policy: p\nunmatched: unlimited\n", 11, "unmatched", "conflicts with default_policy (line 10)"},
		{"bad unmatched", minimalPolicy + "unmatched: limited\n", 10, "unmatched", "must be unlimited"},
		{"routes required but for the default", minimalPolicy + "  - {name: q, tier: free}\n", 10, "policies[1].routes", "only the default_policy"},
		{"upper-case route with case_insensitive_paths", minimalPolicy + "  - {name: q, routes: [\"/API/{Id}\"], tier: free}\ncase_insensitive_paths: true\n", 10, "policies[1].routes[0]", "upper case"},
		{"bad case_insensitive_paths", minimalPolicy + "case_insensitive_paths: maybe\n", 10, "case_insensitive_paths", "true or false"},
		{"ipv6 prefix too long", minimalPolicy + "ip_prefix: {ipv6: 129}\n", 10, "ip_prefix.ipv6", "≤ 128"},
		{"ipv4 prefix zero", minimalPolicy + "ip_prefix: {ipv4: 0}\n", 10, "ip_prefix.ipv4", "≥ 1"},
		{"unknown ip_prefix field", minimalPolicy + "ip_prefix: {ipv5: 8}\n", 10, "ip_prefix.ipv5", "unknown field"},
		{"max_forwarded_hops zero", minimalPolicy + "max_forwarded_hops: 0\n", 10, "max_forwarded_hops", "≥ 1"},
		{"max_forwarded_hops too many", minimalPolicy + "max_forwarded_hops: 5000\n", 10, "max_forwarded_hops", "≤ 1024"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("f.yml", []byte(tc.doc))
			if err == nil {
				t.Fatal("no error")
			}
			if !errors.Is(err, ErrInvalidPolicy) {
				t.Errorf("error %v does not wrap ErrInvalidPolicy", err)
			}
			var ve *ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("no ValidationError in %v", err)
			}
			if ve.File != "f.yml" || ve.Line != tc.wantLine || ve.Field != tc.wantField || !strings.Contains(ve.Msg, tc.wantMsg) {
				t.Errorf("got %q (line %d field %q), want line %d field %q msg ~%q", err, ve.Line, ve.Field, tc.wantLine, tc.wantField, tc.wantMsg)
			}
			if !strings.HasPrefix(err.Error(), "f.yml:") {
				t.Errorf("error does not start with the file name: %q", err)
			}
		})
	}
}

func TestParseDuration(t *testing.T) {
	for in, want := range map[string]time.Duration{"250ms": 250 * time.Millisecond, "7m": 7 * time.Minute, "1d": 24 * time.Hour, "1h30m": 90 * time.Minute} {
		got, err := ParseDuration(in)
		if err != nil || got != want {
			t.Errorf("ParseDuration(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "d", "-1d", "1x", "99999d"} {
		if _, err := ParseDuration(in); err == nil {
			t.Errorf("ParseDuration(%q): no error", in)
		}
	}
}

func TestParseInvalidFixture(t *testing.T) {
	_, err := parseFile("../../testdata/policies/invalid.yml")
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{
		"invalid.yml:8: tiers.free.limits[0].algorithm",
		"invalid.yml:10: tiers.free.limits[0].window",
		"invalid.yml:14: policies[0].identity[1]",
		"invalid.yml:15: policies[0].tier",
		"invalid.yml:16: policies[0].fail_mode",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("missing %q in:\n%v", want, err)
		}
	}
}
