package accuracy

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"
)

// TestAccuracyTraceFiles pins testdata/traces/accuracy-*.json to the
// built-in parameters: a name and its file generate the same trace.
func TestAccuracyTraceFiles(t *testing.T) {
	for _, name := range accuracyTraces {
		path, err := findAccuracyTrace(".", name)
		if err != nil {
			t.Fatal(err)
		}
		c, err := loadAccuracyTrace(path)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if c.About == "" || c.Name != name {
			t.Errorf("%s: name %q, about %q", path, c.Name, c.About)
		}
		c.About = ""
		got, want := c.withDefaults(), accuracyTraceConfig{Name: name}.withDefaults()
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s:\n got %+v\nwant %+v", path, got, want)
		}
		// Every parameter is written out, none left to a default.
		if c.Seed == 0 || c.Sources == 0 || c.Window == 0 || c.Duration == 0 || c.Quantity == 0 {
			t.Errorf("%s: a size is missing: %+v", path, c)
		}
		small := c
		small.Sources, small.Duration = 20, 3*time.Minute
		a, err := generateAccuracy(small)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := generateAccuracy(accuracyTraceConfig{Name: name, Sources: 20, Duration: 3 * time.Minute})
		if !reflect.DeepEqual(a.Requests, b.Requests) || len(a.Requests) == 0 {
			t.Errorf("%s: file and built-in parameters give different traces", name)
		}
	}
}

func TestParseAccuracyTrace(t *testing.T) {
	cases := []struct {
		name, json string
		ok         bool
	}{
		{"near", `{"name":"near","seed":3,"sources":10,"window_ms":1000,"duration_ms":5000}`, true},
		{"unknown generator", `{"name":"flat"}`, false},
		{"unknown field", `{"name":"near","sourcez":1}`, false},
		{"negative window", `{"name":"near","window_ms":-1}`, false},
		{"share above 1", `{"name":"bursts","burst_share":1.5}`, false},
		{"not json", `name: near`, false},
	}
	for _, c := range cases {
		got, err := parseAccuracyTrace([]byte(c.json))
		if (err == nil) != c.ok {
			t.Errorf("%s: err %v", c.name, err)
		}
		if err != nil && !errors.Is(err, errBadTraceFile) {
			t.Errorf("%s: %v is not ErrBadTraceFile", c.name, err)
		}
		if c.ok && (got.Window != time.Second || got.Duration != 5*time.Second || got.Seed != 3) {
			t.Errorf("%s: %+v", c.name, got)
		}
	}
	if _, err := findAccuracyTrace(".", "nope"); !errors.Is(err, errBadTraceFile) {
		t.Errorf("missing trace: %v", err)
	}
}

// FuzzParseAccuracyTrace: never panics; what parses round-trips through
// MarshalJSON.
func FuzzParseAccuracyTrace(f *testing.F) {
	files, _ := filepath.Glob("../testdata/traces/accuracy-*.json")
	for _, p := range files {
		if b, err := os.ReadFile(p); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte(`{"name":"bursts","burst_tail":0.2}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := parseAccuracyTrace(b)
		if err != nil {
			return
		}
		out, err := c.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		back, err := parseAccuracyTrace(out)
		if err != nil || !reflect.DeepEqual(back, c) {
			t.Fatalf("round trip: %v\n%+v\n%+v", err, c, back)
		}
	})
}
