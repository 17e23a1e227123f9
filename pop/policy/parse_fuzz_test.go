package policy

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// FuzzParsePolicyErrors: Parse never panics and is deterministic, and
// every problem it reports is a *ValidationError (wrapping
// ErrInvalidPolicy) that names the file and a line inside the document
// or its end (0 only when unknown), and a field (never empty: a root that
// is not a mapping is the field "(document)", seed 8727b16d337d7b81).
// Lines count every YAML line break (seed
// 9f73b4d211d3cd95: a lone CR); the line after the last one is the end
// of input (seed a9e88922f87ae8de: "---" is reported at line 2).
func FuzzParsePolicyErrors(f *testing.F) {
	files, _ := filepath.Glob("../../testdata/policies/*.yml")
	for _, name := range files {
		if data, err := os.ReadFile(name); err == nil {
			f.Add(data)
		}
	}
	f.Add([]byte(minimalPolicy))
	f.Add([]byte("version: 1\ntiers: {a: {limits: [{quantity: 0, window: 0s}]}}\npolicies: [{name: 'x y', routes: ['GET /a', 'GET /a'], tier: b, fail_mode: sideways}]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		_, err := Parse("fuzz.yml", data)
		if err == nil {
			return
		}
		if _, again := Parse("fuzz.yml", data); again == nil || again.Error() != err.Error() {
			t.Fatalf("second parse: %v, first: %v", again, err)
		}
		// YAML's line breaks: CRLF, CR, LF, and (libyaml) NEL, LS, PS.
		doc := strings.ReplaceAll(string(data), "\r\n", "\n")
		lines := 1
		for _, br := range []string{"\n", "\r", "\u0085", "\u2028", "\u2029"} {
			lines += strings.Count(doc, br)
		}
		var check func(error)
		check = func(e error) {
			if j, ok := e.(interface{ Unwrap() []error }); ok {
				for _, x := range j.Unwrap() {
					check(x)
				}
				return
			}
			var ve *ValidationError
			if !errors.As(e, &ve) || !errors.Is(e, ErrInvalidPolicy) {
				t.Fatalf("error %T %v is not a ValidationError", e, e)
			}
			if ve.File != "fuzz.yml" || ve.Field == "" || ve.Line < 0 || ve.Line > lines+1 {
				t.Fatalf("error %q: file %q field %q line %d of %d", ve, ve.File, ve.Field, ve.Line, lines)
			}
		}
		check(err)
	})
}

// FuzzParseDuration: ParseDuration never panics, accepts only positive
// day counts with the d suffix, and what it returns reads back the same
// from its Go spelling.
func FuzzParseDuration(f *testing.F) {
	for _, s := range []string{"250ms", "1h30m", "1d", "7d", "3650d", "3651d", "-1d", "d", "1.5h", "0", "9223372036s"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := ParseDuration(s)
		if err != nil {
			return
		}
		if days, ok := strings.CutSuffix(s, "d"); ok && (d <= 0 || d%(24*time.Hour) != 0 || d > 3650*24*time.Hour || days == "") {
			t.Fatalf("ParseDuration(%q) = %v", s, d)
		}
		if back, err := ParseDuration(d.String()); err != nil || back != d {
			t.Fatalf("ParseDuration(%q) = %v; %q reads as %v, %v", s, d, d.String(), back, err)
		}
	})
}

// TestParseSyntaxErrorLine: a YAML syntax error in a policy names the file
// and the line it is on.
func TestParseSyntaxErrorLine(t *testing.T) {
	doc := "tiers:\n  free:\n    limits:\n   - {name: a, quantity: 1, window: 1m}\n"
	_, err := Parse("bad.yml", []byte(doc))
	if err == nil || !strings.Contains(err.Error(), "bad.yml:4: (document): yaml: did not find expected key") {
		t.Fatalf("err %v, want bad.yml:4", err)
	}
}
