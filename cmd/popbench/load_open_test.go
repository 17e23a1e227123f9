package main

import (
	"slices"
	"testing"
)

func TestParseRates(t *testing.T) {
	for _, tc := range []struct {
		in        string
		rates     []float64
		fractions []float64
		bad       bool
	}{
		{in: ""},
		{in: "25%,50%,75%", fractions: []float64{0.25, 0.5, 0.75}},
		{in: "1000, 5000", rates: []float64{1000, 5000}},
		{in: "1000,50%", bad: true},
		{in: "0", bad: true},
		{in: "-5%", bad: true},
		{in: "fast", bad: true},
		{in: "1000,", bad: true},
	} {
		r, f, err := parseRates(tc.in)
		if (err != nil) != tc.bad {
			t.Errorf("%q: error %v, want bad=%v", tc.in, err, tc.bad)
			continue
		}
		if !slices.Equal(r, tc.rates) || !slices.Equal(f, tc.fractions) {
			t.Errorf("%q: rates %v fractions %v, want %v %v", tc.in, r, f, tc.rates, tc.fractions)
		}
	}
}
