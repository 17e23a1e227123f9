package protocol

// This file is memcached's decimal scanner. One scan (scanDecimal) serves
// the two places memcached reads a number, which it treats differently:
//
//   - a command token (flags, exptime, lengths, deltas, meta flag values):
//     the token is the number and nothing else (ParseUint, ParseInt32);
//   - a stored value, for incr and decr: leading C whitespace is skipped
//     and the number ends at the end of the value, a whitespace byte or a
//     NUL (ParseValueUint).

import "math"

// scanDecimal reads an optional sign and decimal digits at the start of b:
// their magnitude, whether the sign was '-', and how many bytes were read.
// ok is false when there is no digit or the magnitude overflows 64 bits.
func scanDecimal(b []byte) (mag uint64, neg bool, n int, ok bool) {
	if len(b) > 0 && (b[0] == '+' || b[0] == '-') {
		neg, n = b[0] == '-', 1
	}
	start := n
	for n < len(b) && b[n] >= '0' && b[n] <= '9' {
		d := uint64(b[n] - '0')
		if mag > (math.MaxUint64-d)/10 {
			return 0, neg, n, false
		}
		mag = mag*10 + d
		n++
	}
	return mag, neg, n, n > start
}

// strtoull is safe_strtoull's sign rule: a '-' is refused when the result
// would be negative as a signed number (so "-0" is 0, "-1" is refused).
func strtoull(mag uint64, neg bool) (uint64, bool) {
	if neg {
		mag = -mag
		if int64(mag) < 0 {
			return 0, false
		}
	}
	return mag, true
}

// ParseUint parses a token with memcached's safe_strtoull semantics:
// optional sign, decimal digits, no overflow, and the sign rule of
// strtoull.
func ParseUint(t []byte) (uint64, bool) {
	mag, neg, n, ok := scanDecimal(t)
	if !ok || n != len(t) {
		return 0, false
	}
	return strtoull(mag, neg)
}

// ParseInt32 parses a token with memcached 1.6.18's safe_strtol semantics:
// strtol on a 64-bit long (optional sign, decimal digits, no int64
// overflow), then the value is stored in an int32_t, so larger values wrap
// (4294967396 is 100, 2147483648 is negative) rather than being refused.
func ParseInt32(t []byte) (int32, bool) {
	mag, neg, n, ok := scanDecimal(t)
	if !ok || n != len(t) || mag > math.MaxInt64+1 || (!neg && mag > math.MaxInt64) {
		return 0, false
	}
	if neg {
		return int32(-int64(mag)), true
	}
	return int32(int64(mag)), true
}

// ParseValueUint parses an item's value the way memcached's safe_strtoull
// does for incr and decr: optional leading C whitespace, an optional sign,
// decimal digits that fit in 64 bits, then the end of the value, a
// whitespace byte or a NUL; and the sign rule of strtoull ("-0" is 0, "-5"
// is refused), as in memcached.
func ParseValueUint(v []byte) (uint64, bool) {
	i := 0
	for i < len(v) && isCSpace(v[i]) {
		i++
	}
	if i == len(v) {
		// strtoull would skip the CRLF and read past the item: no number.
		return 0, false
	}
	mag, neg, n, ok := scanDecimal(v[i:])
	if !ok {
		return 0, false
	}
	if i += n; i < len(v) && !isCSpace(v[i]) && v[i] != 0 {
		return 0, false
	}
	return strtoull(mag, neg)
}

func isCSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r'
}
