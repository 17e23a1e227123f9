package yamlpos

import (
	"errors"
	"testing"

	"go.yaml.in/yaml/v3"
)

func TestLineIsTheOffendingLine(t *testing.T) {
	for _, tc := range []struct {
		name, doc string
		want      int
	}{
		{"dedented key", "a:\n  b: 1\n  c: 2\n d: 3\n", 4},
		{"sequence item after a key", "a:\n  - x\n  y: 2\n", 3},
		{"mapping value in context", "a: 1\nb: 2\nc: : 3\n", 3},
		{"tab indentation", "a: 1\n\tb: 2\n", 2},
		{"unclosed flow sequence", "a:\n  b: 1\n  c: [1, 2\n  d: 3\n", 3},
		{"multi-line flow then a bad key", "a: [1,\n  2]\nb:\n  c: 1\n d: 2\n", 5},
		{"no trailing newline", "a:\n  b: 1\n c: 2", 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var n yaml.Node
			err := yaml.Unmarshal([]byte(tc.doc), &n)
			if err == nil {
				t.Fatal("no error")
			}
			if got := Line([]byte(tc.doc), err); got != tc.want {
				t.Errorf("Line = %d, want %d (yaml said %v)", got, tc.want, err)
			}
		})
	}
}

func TestLineOfOtherErrorsIsZero(t *testing.T) {
	if got := Line([]byte("a: 1\n"), errors.New("read: no such file")); got != 0 {
		t.Errorf("Line = %d, want 0", got)
	}
	if got := Line(nil, nil); got != 0 {
		t.Errorf("Line(nil) = %d, want 0", got)
	}
}

func FuzzLine(f *testing.F) {
	f.Add([]byte("a:\n  b: 1\n c: 2\n"))
	f.Add([]byte("a: [1,\n"))
	f.Fuzz(func(t *testing.T, doc []byte) {
		if len(doc) > 4096 {
			return
		}
		var n yaml.Node
		err := yaml.Unmarshal(doc, &n)
		l := Line(doc, err)
		lines := len(lineEnds(doc))
		if err == nil && l != 0 || l < 0 || l > max(lines, 1) {
			t.Fatalf("Line = %d for %d lines (err %v)", l, lines, err)
		}
	})
}
