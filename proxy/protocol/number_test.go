package protocol

import (
	"strconv"
	"strings"
	"testing"
)

func TestParseMemcachedUint(t *testing.T) {
	// Observed on memcached 1.6.18: "set n 0 0 <len>\r\n<v>\r\nincr n 1".
	cases := []struct {
		in   string
		want uint64
		ok   bool
	}{
		{"0", 0, true},
		{"-0", 0, true},
		{" 5", 5, true},
		{"\t5", 5, true},
		{"5 ", 5, true},
		{"+7", 7, true},
		{"1\x002", 1, true},
		{"00000000000000000000000001", 1, true},
		{"18446744073709551615", 18446744073709551615, true},
		{"18446744073709551616", 0, false},
		{"-5", 0, false},
		{"abc", 0, false},
		{"5a", 0, false},
		{"", 0, false},
		{"  ", 0, false},
		{"+", 0, false},
		{"-", 0, false},
		{"0x10", 0, false},
	}
	for _, tc := range cases {
		got, ok := ParseValueUint([]byte(tc.in))
		if got != tc.want || ok != tc.ok {
			t.Errorf("%q: got %d %v, want %d %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

// FuzzParseMemcachedUint checks ParseValueUint against a reference built
// on strconv: never panics, and agrees on every input.
func FuzzParseMemcachedUint(f *testing.F) {
	for _, s := range []string{"0", "-0", " 5", "5 ", "+7", "1\x002", "18446744073709551615",
		"18446744073709551616", "-5", "abc", "", "  ", "-18446744073709551615", "99 "} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, v []byte) {
		got, ok := ParseValueUint(v)
		want, wantOK := refStrtoull(v)
		if got != want || ok != wantOK {
			t.Fatalf("%q: got %d %v, reference %d %v", v, got, ok, want, wantOK)
		}
		if ok {
			again, ok2 := ParseValueUint(strconv.AppendUint(nil, got, 10))
			if !ok2 || again != got {
				t.Fatalf("%q: %d does not round-trip", v, got)
			}
		}
	})
}

// refStrtoull is an independent model of safe_strtoull over a value:
// trim C whitespace, split off a sign and the digit run, strconv the digits.
func refStrtoull(v []byte) (uint64, bool) {
	s := strings.TrimLeft(string(v), " \t\n\v\f\r")
	if s == "" {
		return 0, false
	}
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(strings.TrimPrefix(s, "-"), "+")
	if neg && len(s) < len(strings.TrimLeft(string(v), " \t\n\v\f\r"))-1 {
		return 0, false // "+-5", "--5"
	}
	end := strings.IndexFunc(s, func(r rune) bool { return r < '0' || r > '9' })
	digits, rest := s, ""
	if end >= 0 {
		digits, rest = s[:end], s[end:]
	}
	if digits == "" {
		return 0, false
	}
	if rest != "" && !strings.ContainsRune(" \t\n\v\f\r\x00", rune(rest[0])) {
		return 0, false
	}
	n, err := strconv.ParseUint(digits, 10, 64)
	if err != nil {
		return 0, false
	}
	if neg {
		if n != 0 && n <= 1<<63 {
			return 0, false // -n as signed is negative
		}
		n = -n
	}
	return n, true
}
