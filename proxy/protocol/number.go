package protocol

import "math"

// ParseUint has memcached's safe_strtoull semantics: optional sign, decimal
// digits, no overflow; a '-' is refused when the result would be negative as
// a signed number (so "-0" is 0, "-1" is refused).
func ParseUint(t []byte) (uint64, bool) {
	neg := false
	if len(t) > 0 && (t[0] == '+' || t[0] == '-') {
		neg = t[0] == '-'
		t = t[1:]
	}
	if len(t) == 0 {
		return 0, false
	}
	var v uint64
	for _, c := range t {
		if c < '0' || c > '9' {
			return 0, false
		}
		d := uint64(c - '0')
		if v > (math.MaxUint64-d)/10 {
			return 0, false
		}
		v = v*10 + d
	}
	if neg {
		v = -v
		if int64(v) < 0 {
			return 0, false
		}
	}
	return v, true
}

// ParseInt32 has memcached 1.6.18's safe_strtol semantics: strtol on a
// 64-bit long (optional sign, decimal digits, no int64 overflow), then the
// value is stored in an int32_t, so larger values wrap (4294967396 is 100,
// 2147483648 is negative) rather than being refused.
func ParseInt32(t []byte) (int32, bool) {
	neg := false
	if len(t) > 0 && (t[0] == '+' || t[0] == '-') {
		neg = t[0] == '-'
		t = t[1:]
	}
	if len(t) == 0 {
		return 0, false
	}
	var v uint64
	for _, c := range t {
		if c < '0' || c > '9' {
			return 0, false
		}
		if v > math.MaxUint64/10 {
			return 0, false
		}
		v = v*10 + uint64(c-'0')
		if v > math.MaxInt64+1 || (!neg && v > math.MaxInt64) {
			return 0, false
		}
	}
	if neg {
		return int32(-int64(v)), true
	}
	return int32(int64(v)), true
}

// ParseValueUint parses an item's value the way memcached's
// safe_strtoull does for incr and decr: optional leading C whitespace, an
// optional sign, decimal digits that fit in 64 bits, then the end of the
// value, a whitespace byte or a NUL. A minus sign is accepted only when the
// negated result still looks non-negative as a signed number ("-0" is 0,
// "-5" is rejected), as in memcached.
func ParseValueUint(v []byte) (uint64, bool) {
	i := 0
	for i < len(v) && isCSpace(v[i]) {
		i++
	}
	if i == len(v) {
		// strtoull would skip the CRLF and read past the item: no number.
		return 0, false
	}
	neg := false
	if v[i] == '+' || v[i] == '-' {
		neg = v[i] == '-'
		i++
	}
	start := i
	var n uint64
	for i < len(v) && v[i] >= '0' && v[i] <= '9' {
		d := uint64(v[i] - '0')
		if n > (math.MaxUint64-d)/10 {
			return 0, false // ERANGE
		}
		n = n*10 + d
		i++
	}
	if i == start {
		return 0, false
	}
	if i < len(v) && !isCSpace(v[i]) && v[i] != 0 {
		return 0, false
	}
	if neg {
		n = -n
		if int64(n) < 0 {
			return 0, false
		}
	}
	return n, true
}

func isCSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r'
}
