package rls

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseRejectsWithFileAndLine(t *testing.T) {
	cases := []struct{ name, doc, want string }{
		{"unknown field", "domain: d\ndescriptors:\n  - key: a\n    colour: red\n", "f.yaml:4: config error, unknown key 'colour'"},
		{"unknown rate_limit field", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, speed: 2}\n", "f.yaml:4: config error, unknown key 'speed'"},
		{"unknown unit", "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: fortnight\n      requests_per_unit: 1\n", "f.yaml:5: invalid rate limit unit 'fortnight'"},
		{"negative limit", "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n      requests_per_unit: -5\n", "f.yaml:6: requests_per_unit: want an integer from 0 to 4294967295"},
		{"duplicate", "domain: d\ndescriptors:\n  - key: a\n    value: b\n  - key: a\n    value: b\n", "f.yaml:5: duplicate descriptor composite key 'd.a_b'"},
		{"duplicate wildcard", "domain: d\ndescriptors:\n  - {key: a, value: b*}\n  - {key: a, value: b*}\n", "f.yaml:4: duplicate descriptor composite key 'd.a_b*'"},
		{"empty key", "domain: d\ndescriptors:\n  - value: b\n", "f.yaml:3: descriptor has empty key"},
		{"empty domain", "descriptors: []\n", "f.yaml:1: config file cannot have empty domain"},
		{"no unit", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {requests_per_unit: 3}\n", "f.yaml:4: rate_limit: a unit"},
		{"self replace", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {name: x, unit: second, requests_per_unit: 1, replaces: [{name: x}]}\n", "replaces should not contain name of same descriptor"},
		{"bad window", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, window: soon}\n", "f.yaml:4: window: want a duration"},
		{"bad algorithm", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, algorithm: leaky}\n", `algorithm: "leaky" is not one of fixed_window, sliding_window, token_bucket`},
		{"bad precision", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, algorithm: sliding_window, precision: 7}\n", "precision"},
		{"yaml syntax", "domain: d\ndescriptors:\n  - key: [\n", "f.yaml:"},
		{"yaml syntax on its own line", "domain: d\ndescriptors:\n  - key: a\n    value: b\n   rate_limit: {unit: second}\n", "f.yaml:5: yaml: did not find expected '-' indicator"},
		{"not a mapping", "- a\n- b\n", "f.yaml:1: file: want a mapping"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse(map[string][]byte{"f.yaml": []byte(c.doc)}, Options{})
			if err == nil || !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err %v, want ErrConfig containing %q", err, c.want)
			}
		})
	}
}

func TestParseDuplicateDomainUnlessMerged(t *testing.T) {
	files := map[string][]byte{
		"a.yaml": []byte("domain: d\ndescriptors:\n  - {key: a, rate_limit: {unit: second, requests_per_unit: 1}}\n"),
		"b.yaml": []byte("domain: d\ndescriptors:\n  - {key: b, rate_limit: {unit: second, requests_per_unit: 1}}\n"),
	}
	if _, err := Parse(files, Options{}); err == nil || !strings.Contains(err.Error(), "b.yaml:1: duplicate domain 'd'") {
		t.Fatalf("err %v", err)
	}
	c, err := Parse(files, Options{MergeDomains: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"a", "b"} {
		if l, _ := c.Match("d", []Entry{{k, "x"}}); l == nil {
			t.Fatalf("merged domain lacks %s", k)
		}
	}
}

func TestMatch(t *testing.T) {
	doc := `domain: d
descriptors:
  - key: path
    value: /a/*/c
    detailed_metric: true
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: path
    value: /a/*
    rate_limit: {unit: second, requests_per_unit: 2}
  - key: user
    value_to_metric: true
    descriptors:
      - key: plan
        value: gold
        rate_limit: {unit: minute, requests_per_unit: 3}
`
	c, err := Parse(map[string][]byte{"f.yaml": []byte(doc)}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		entries []Entry
		rpu     uint32
		stats   string
	}{
		{[]Entry{{"path", "/a/b/c"}}, 1, "d.path_/a/b/c"},
		{[]Entry{{"path", "/a/b/d"}}, 2, "d.path_/a/*"},
		{[]Entry{{"path", "/b"}}, 0, ""},
		{[]Entry{{"user", "u1"}, {"plan", "gold"}}, 3, "d.user_u1.plan_gold"},
		{[]Entry{{"user", "u1"}}, 0, ""},
		{[]Entry{{"user", "u1"}, {"plan", "gold"}, {"x", "y"}}, 0, ""},
	}
	for _, tc := range cases {
		l, key := c.Match("d", tc.entries)
		got := uint32(0)
		if l != nil {
			got = l.RequestsPerUnit
		}
		if got != tc.rpu || key != tc.stats {
			t.Errorf("%v: limit %d stats %q, want %d %q", tc.entries, got, key, tc.rpu, tc.stats)
		}
	}
	if l, _ := c.Match("other", []Entry{{"path", "/a/b"}}); l != nil {
		t.Fatal("unknown domain matched")
	}
}

func TestGlobMatch(t *testing.T) {
	for _, c := range []struct {
		pat, v string
		want   bool
	}{{"a*", "a", true}, {"a*", "abc", true}, {"a*", "ba", false}, {"*c", "abc", true}, {"a*c", "ac", true},
		{"a*b*c", "abc", true}, {"a*b*c", "ac", false}, {"ab*ba", "aba", false}, {"*", "", true}, {"x", "x", true}} {
		if got := globMatch(strings.Split(c.pat, "*"), c.v); got != c.want {
			t.Errorf("%q ~ %q = %v, want %v", c.pat, c.v, got, c.want)
		}
	}
}

func TestLoadDirSkipsDotAndOtherFiles(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("a.yaml", "domain: a\ndescriptors: [{key: k, rate_limit: {unit: second, requests_per_unit: 1}}]\n")
	write("b.yml", "domain: b\ndescriptors: []\n")
	write(".hidden.yaml", "not: [valid\n")
	write("notes.txt", "anything")
	c, err := LoadDir(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Domains) != 2 || len(c.Files) != 2 || len(c.Rules) != 1 {
		t.Fatalf("domains %d files %v rules %d", len(c.Domains), c.Files, len(c.Rules))
	}
	if _, err := LoadDir(filepath.Join(dir, "missing"), Options{}); !errors.Is(err, ErrConfig) {
		t.Fatalf("missing dir: %v", err)
	}
}

// FuzzParse: any document is parsed or rejected with ErrConfig, never a
// panic; a parsed one compiles its every rule's limits.
func FuzzParse(f *testing.F) {
	f.Add([]byte("domain: d\ndescriptors:\n  - key: a\n    value: b*\n    rate_limit: {unit: second, requests_per_unit: 1}\n    descriptors: [{key: c}]\n"))
	f.Add([]byte("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: minute, requests_per_unit: 5, algorithm: token_bucket, burst: 2, limits: [{window: 10s, requests_per_unit: 1}]}\n"))
	f.Add([]byte("domain: d\ndescriptors:\n  - {key: a, rate_limit: {unlimited: true}}\n"))
	f.Fuzz(func(t *testing.T, doc []byte) {
		c, err := Parse(map[string][]byte{"f.yaml": doc}, Options{})
		if err != nil {
			if !errors.Is(err, ErrConfig) {
				t.Fatalf("error not ErrConfig: %v", err)
			}
			return
		}
		for _, r := range c.Rules {
			for _, l := range r.Limits {
				if err := l.Limit.Validate(); err != nil {
					t.Fatalf("parsed an invalid limit: %v", err)
				}
			}
		}
		for d := range c.Domains {
			c.Match(d, []Entry{{"a", "b"}, {"c", "d"}})
		}
	})
}
