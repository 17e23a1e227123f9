package accuracy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"time"

	"github.com/poplimit/poplimit/bench"
)

// Accuracy traces: one route, every source at its own rate. Their
// parameters and seeds are kept in testdata/traces/accuracy-<name>.json
// (loadAccuracyTrace); the built-in defaults of accuracyTraceConfig are the
// same values, pinned by a test.
const (
	// TraceBelow: mostly below the limit, 1% abusive sources at 2–10×.
	traceBelow = "below"
	// TraceNear: every source at 0.5–1.5× its limit.
	traceNear = "near"
	// TraceBursts: sources at 0.5–1.5× that send half their traffic
	// evenly and half in the last tenth of each window.
	traceBursts = "bursts"
)

// AccuracyTraces lists the accuracy trace names.
var accuracyTraces = []string{traceBelow, traceNear, traceBursts}

// accuracyTraceConfig describes an accuracy trace: a generator (Name) and
// its parameters. Zero means default for every field; the JSON form is the
// one of testdata/traces/accuracy-*.json.
type accuracyTraceConfig struct {
	// Name is TraceBelow, TraceNear or TraceBursts; default TraceNear.
	Name string `json:"name"`
	// About says what the trace stands for (documentation only).
	About string `json:"about,omitempty"`
	// Seed; default 1.
	Seed uint64 `json:"seed"`
	// Sources; default 200.
	Sources int `json:"sources"`
	// Duration; default 10 windows.
	Duration time.Duration `json:"-"`
	// Quantity and Window of the limit; default 100 per 60s.
	Quantity int64         `json:"quantity"`
	Window   time.Duration `json:"-"`

	// Below only. AbusiveFraction of the sources (at least one) are
	// abusive, at a multiple of the limit uniform in [AbusiveMin,
	// AbusiveMax]; defaults 0.01, 2, 10. The others are legitimate at
	// LegitMax/rank^LegitZipfS of the limit, at least LegitMin; defaults
	// 0.9, 0.5, 0.05.
	AbusiveFraction float64 `json:"abusive_fraction,omitempty"`
	AbusiveMin      float64 `json:"abusive_min_multiple,omitempty"`
	AbusiveMax      float64 `json:"abusive_max_multiple,omitempty"`
	LegitMin        float64 `json:"legit_min_multiple,omitempty"`
	LegitMax        float64 `json:"legit_max_multiple,omitempty"`
	LegitZipfS      float64 `json:"legit_zipf_s,omitempty"`

	// Near and bursts. Each source's multiple of the limit is uniform in
	// [MinMultiple, MinMultiple+1) (default 0.5: 0.5–1.5×); Poisson
	// arrivals.
	MinMultiple float64 `json:"min_multiple,omitempty"`
	// Bursts only: BurstShare of a source's traffic (default 0.5) arrives
	// in the last BurstTail of every window (default 0.1), the rest evenly.
	BurstShare float64 `json:"burst_share,omitempty"`
	BurstTail  float64 `json:"burst_tail,omitempty"`
}

// MarshalJSON writes Window and Duration as window_ms and duration_ms.
func (c accuracyTraceConfig) MarshalJSON() ([]byte, error) {
	type plain accuracyTraceConfig
	return json.Marshal(struct {
		plain
		WindowMs   int64 `json:"window_ms"`
		DurationMs int64 `json:"duration_ms"`
	}{plain(c), c.Window.Milliseconds(), c.Duration.Milliseconds()})
}

// ErrBadTraceFile reports an accuracy trace file that cannot be used.
var errBadTraceFile = errors.New("bench: bad accuracy trace file")

// loadAccuracyTrace reads an accuracy trace description (JSON, as in
// testdata/traces/accuracy-near.json). Unknown fields are an error.
func loadAccuracyTrace(path string) (accuracyTraceConfig, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return accuracyTraceConfig{}, err
	}
	return parseAccuracyTrace(b)
}

// parseAccuracyTrace parses the JSON of loadAccuracyTrace.
func parseAccuracyTrace(b []byte) (accuracyTraceConfig, error) {
	type plain accuracyTraceConfig
	var j struct {
		plain
		WindowMs   int64 `json:"window_ms"`
		DurationMs int64 `json:"duration_ms"`
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&j); err != nil {
		return accuracyTraceConfig{}, fmt.Errorf("%w: %v", errBadTraceFile, err)
	}
	c := accuracyTraceConfig(j.plain)
	c.Window = time.Duration(j.WindowMs) * time.Millisecond
	c.Duration = time.Duration(j.DurationMs) * time.Millisecond
	switch {
	case c.Name != traceBelow && c.Name != traceNear && c.Name != traceBursts:
		return c, fmt.Errorf("%w: name %q (below, near, bursts)", errBadTraceFile, c.Name)
	case j.WindowMs < 0 || j.DurationMs < 0 || c.Sources < 0 || c.Quantity < 0:
		return c, fmt.Errorf("%w: negative size", errBadTraceFile)
	case c.AbusiveFraction < 0 || c.AbusiveFraction > 1 || c.BurstShare < 0 || c.BurstShare > 1 || c.BurstTail < 0 || c.BurstTail > 1:
		return c, fmt.Errorf("%w: fraction outside [0, 1]", errBadTraceFile)
	}
	return c, nil
}

// findAccuracyTrace resolves a --trace argument: an existing file, or a
// trace name looked up as testdata/traces/accuracy-<name>.json in dir or
// the nearest parent directory holding go.mod.
func findAccuracyTrace(dir, arg string) (string, error) {
	if st, err := os.Stat(arg); err == nil && !st.IsDir() {
		return arg, nil
	}
	rel := filepath.Join("testdata", "traces", "accuracy-"+arg+".json")
	dir, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, rel)); err == nil {
			return filepath.Join(d, rel), nil
		}
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil || filepath.Dir(d) == d {
			return "", fmt.Errorf("%w: %q is neither a file nor a trace in %s", errBadTraceFile, arg, filepath.Join(d, rel))
		}
	}
}

func (c accuracyTraceConfig) withDefaults() accuracyTraceConfig {
	defaultTo(&c.Seed, 1)
	defaultTo(&c.Sources, 200)
	defaultTo(&c.Quantity, 100)
	defaultTo(&c.Window, time.Minute)
	defaultTo(&c.Duration, 10*c.Window)
	defaultTo(&c.AbusiveFraction, 0.01)
	defaultTo(&c.AbusiveMin, 2)
	defaultTo(&c.AbusiveMax, 10)
	defaultTo(&c.LegitMin, 0.05)
	defaultTo(&c.LegitMax, 0.9)
	defaultTo(&c.LegitZipfS, 0.5)
	defaultTo(&c.MinMultiple, 0.5)
	defaultTo(&c.BurstShare, 0.5)
	defaultTo(&c.BurstTail, 0.1)
	if c.Name == "" {
		c.Name = traceNear
	}
	return c
}

// GenerateAccuracy builds one of the accuracy traces. Offset 0 of the trace
// is meant to be aligned on a window boundary. The same config always
// yields the same trace.
func generateAccuracy(c accuracyTraceConfig) (*bench.Trace, error) {
	c = c.withDefaults()
	route := bench.Route{Path: "/api", Quantity: c.Quantity, Window: c.Window}
	switch c.Name {
	case traceBelow:
		abusive := max(1, int(math.Floor(float64(c.Sources)*c.AbusiveFraction+1e-9)))
		t, err := bench.Generate(bench.WorkloadConfig{Seed: c.Seed, Duration: c.Duration, API: route,
			Legit: c.Sources - abusive, Abusive: abusive, Boundary: -1, Stuffers: -1,
			AbuseMin: c.AbusiveMin, AbuseMax: c.AbusiveMax,
			LegitMin: c.LegitMin, LegitMax: c.LegitMax, ZipfS: c.LegitZipfS, MaxRequests: 20_000_000})
		if err == nil {
			t.Routes = t.Routes[:1] // no login traffic
		}
		return t, err
	case traceNear, traceBursts:
	default:
		return nil, fmt.Errorf("%w: unknown accuracy trace %q", bench.ErrBadWorkload, c.Name)
	}
	rng := rand.New(rand.NewPCG(c.Seed, 0x5eed))
	t := &bench.Trace{Seed: c.Seed, Duration: c.Duration, Routes: []bench.Route{route}}
	tail := time.Duration(math.Round(float64(c.Window) * c.BurstTail))
	for i := 0; i < c.Sources; i++ {
		m := c.MinMultiple + rng.Float64()
		kind := bench.Legit
		if m > 1 {
			kind = bench.Abusive
		}
		id := int32(len(t.Clients))
		t.Clients = append(t.Clients, bench.Client{ID: fmt.Sprintf("%s-%04d", c.Name, i), Kind: kind, Multiple: m})
		rate := m * route.Rate()
		if c.Name == traceNear {
			t.Arrive(rng, bench.Poisson, 1, id, rate)
			continue
		}
		// Bursts: BurstShare of the traffic in the window's last BurstTail,
		// the rest evenly.
		t.Arrive(rng, bench.Poisson, 1, id, rate*(1-c.BurstShare))
		burst := rate * c.BurstShare * (1 / c.BurstTail)
		for w := time.Duration(0); w < c.Duration; w += c.Window {
			from := (w + c.Window - tail).Seconds()
			to := min(w+c.Window, c.Duration).Seconds()
			for at := from + rng.ExpFloat64()/burst; at < to; at += rng.ExpFloat64() / burst {
				t.Requests = append(t.Requests, bench.Request{At: seconds(at), Client: id})
			}
		}
	}
	t.Sort()
	return t, nil
}

// openTrace resolves a --trace argument as a file or a trace name (see
// findAccuracyTrace) and reads the trace description it names.
func openTrace(dir, arg string) (accuracyTraceConfig, error) {
	path, err := findAccuracyTrace(dir, arg)
	if err != nil {
		return accuracyTraceConfig{}, err
	}
	c, err := loadAccuracyTrace(path)
	if err != nil {
		return accuracyTraceConfig{}, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}
