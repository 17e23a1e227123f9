package bench

import (
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"
)

// Latency is an HDR histogram of durations in microseconds, from 1 µs to
// 60 s with 3 significant digits. Not safe for concurrent use: give every
// goroutine its own and Merge them.
type Latency struct{ h *hdrhistogram.Histogram }

// NewLatency returns an empty histogram.
func NewLatency() *Latency { return &Latency{h: hdrhistogram.New(1, 60_000_000, 3)} }

// Record adds one duration (clamped to the histogram's range).
func (l *Latency) Record(d time.Duration) {
	us := d.Microseconds()
	if us < 1 {
		us = 1
	}
	if us > 60_000_000 {
		us = 60_000_000
	}
	_ = l.h.RecordValue(us)
}

// Merge adds every value of o.
func (l *Latency) Merge(o *Latency) { l.h.Merge(o.h) }

// Quantile returns the value at q in [0, 100] percent.
func (l *Latency) Quantile(q float64) time.Duration {
	return time.Duration(l.h.ValueAtQuantile(q)) * time.Microsecond
}

// Summary is a latency summary in milliseconds, for JSON and tables.
type Summary struct {
	Count int64   `json:"count"`
	P50   float64 `json:"p50_ms"`
	P90   float64 `json:"p90_ms"`
	P99   float64 `json:"p99_ms"`
	P999  float64 `json:"p999_ms"`
	Max   float64 `json:"max_ms"`
	Mean  float64 `json:"mean_ms"`
}

// Summary returns the usual quantiles.
func (l *Latency) Summary() Summary {
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	return Summary{
		Count: l.h.TotalCount(),
		P50:   ms(l.Quantile(50)),
		P90:   ms(l.Quantile(90)),
		P99:   ms(l.Quantile(99)),
		P999:  ms(l.Quantile(99.9)),
		Max:   float64(l.h.Max()) / 1000,
		Mean:  l.h.Mean() / 1000,
	}
}

// cdfPoint is one point of a cumulative distribution: the share of values
// (0–1) at or below Value.
type cdfPoint struct {
	Value    time.Duration
	Fraction float64
}

// CDF returns the distribution at a fixed set of quantiles, for charts.
func (l *Latency) CDF() []cdfPoint {
	if l.h.TotalCount() == 0 {
		return nil
	}
	qs := []float64{0, 1, 5, 10, 20, 30, 40, 50, 60, 70, 80, 90, 95, 97, 99, 99.5, 99.9, 99.99, 100}
	out := make([]cdfPoint, 0, len(qs))
	for _, q := range qs {
		out = append(out, cdfPoint{Value: l.Quantile(q), Fraction: q / 100})
	}
	return out
}
