package counter

import (
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/cespare/xxhash/v2"
)

// ErrBadKey: a key passed to a store-backed limiter is not one Key could
// have built (longer than 202 bytes, or whitespace/control bytes).
var ErrBadKey = errors.New("counter: illegal identity key")

// Key scheme limits.
const (
	// maxKeyLen is memcached's key limit.
	maxKeyLen = 250
	// maxIdentityLen bounds what Key returns, leaving room for the window
	// suffix the algorithms append (at most maxSuffixLen bytes).
	maxIdentityLen = maxKeyLen - maxSuffixLen
	// maxSuffixLen: algorithm letter, window ms (≤ 8 base-36 digits), "p"
	// and precision, ".", window id (≤ 13 digits with sign), bucket
	// quantity and burst (≤ 8 each with dots).
	maxSuffixLen = 48
	// maxPartLen is the longest part kept verbatim.
	maxPartLen = 64
	// keyPrefix starts every identity key.
	keyPrefix = "r"
)

// Key builds an identity key from its parts (e.g. "ip", "203.0.113.7" or
// "tenant", "acme", "route", "/v1/pay"). The result is always a legal
// memcached key with room for the window suffix every algorithm appends.
//
// Scheme (documented for operators reading `stats cachedump`):
//
//	r{part|part|...}<suffix>
//
// The braces are the hash tag: mcproxy hashes only the text between the
// first '{' and '}', so every window of one identity lands on one shard and
// one multi-get reads them all. A part is kept verbatim when it is 1 to 64
// printable ASCII bytes without space, '{', '}', '|' or '~'; any other part
// (empty, long, binary, UTF-8, whitespace) becomes '~' followed by the 11
// base64url characters of its xxhash64. If the joined parts would exceed
// 202 bytes (maxIdentityLen), the whole tag becomes "~" + the xxhash64 of the joined
// parts. Distinct part lists give distinct keys except on a 64-bit hash
// collision.
//
// The suffixes the algorithms append after the '}' are:
//
//	s<win>[p<N>].<id>   sliding window: win = window in ms, N = precision
//	                    (omitted when 1), id = sub-window number
//	                    floor(unix ms / (win/N)); all base 36
//	f<win>.<id>         fixed window: id = floor(unix ms / win)
//	b<win>.<q>.<burst>  token bucket: one item holding the GCRA
//	                    theoretical arrival time (unix ns, decimal)
//	c<u>.<start>        calendar window: u = d, w, m or y (day, week,
//	                    month, year), start = its first instant in unix
//	                    seconds (so zones and start days never share)
//
// e.g. "r{ip|203.0.113.7}s1aao.htkj0" (a minute window at 2026-11-29
// 21:00 UTC). Limits with the same algorithm and window share counters on
// the same identity: give two such limits different identity parts (e.g.
// the limit name).
func Key(parts ...string) string {
	var b strings.Builder
	b.Grow(len(keyPrefix) + 2 + 16*len(parts))
	b.WriteString(keyPrefix)
	b.WriteByte('{')
	for i, p := range parts {
		if i > 0 {
			b.WriteByte('|')
		}
		if safePart(p) {
			b.WriteString(p)
		} else {
			b.WriteByte('~')
			b.WriteString(hash64(xxhash.Sum64String(p)))
		}
	}
	b.WriteByte('}')
	k := b.String()
	if len(k) > maxIdentityLen {
		inner := k[len(keyPrefix)+1 : len(k)-1]
		k = keyPrefix + "{~" + hash64(xxhash.Sum64String(inner)) + "}"
	}
	return k
}

func safePart(p string) bool {
	if len(p) == 0 || len(p) > maxPartLen {
		return false
	}
	for i := 0; i < len(p); i++ {
		c := p[i]
		if c <= ' ' || c >= 0x7f || c == '{' || c == '}' || c == '|' || c == '~' {
			return false
		}
	}
	return true
}

func hash64(h uint64) string {
	var raw [8]byte
	binary.BigEndian.PutUint64(raw[:], h)
	return base64.RawURLEncoding.EncodeToString(raw[:])
}

// legalKey reports whether k is a legal memcached key: 1 to 250 bytes, no
// whitespace or control bytes.
func legalKey(k string) bool {
	if len(k) == 0 || len(k) > maxKeyLen {
		return false
	}
	for i := 0; i < len(k); i++ {
		if c := k[i]; c <= ' ' || c == 0x7f {
			return false
		}
	}
	return true
}

// checkIdentity verifies a caller's identity key leaves a legal store key
// once suffixed.
func checkIdentity(k string) error {
	if len(k) > maxIdentityLen || !legalKey(k) {
		return fmt.Errorf("%w: %.40q", ErrBadKey, k)
	}
	return nil
}

// limitSuffix is the per-limit part of the suffix, without the window id.
func limitSuffix(l Limit) string {
	if u := l.Calendar.Unit; u != NoCalendar {
		return "c" + string("?dwmy"[u]) + "."
	}
	w := strconv.FormatInt(l.Window.Milliseconds(), 36)
	switch l.Algorithm {
	case FixedWindow:
		return "f" + w + "."
	case TokenBucket:
		if l.Window%1e6 != 0 {
			w = strconv.FormatInt(int64(l.Window), 36) + "n"
		}
		return "b" + w + "." + strconv.FormatInt(l.Quantity, 36) + "." + strconv.FormatInt(l.burst(), 36)
	}
	if p := l.precision(); p > 1 {
		return "s" + w + "p" + strconv.FormatInt(int64(p), 36) + "."
	}
	return "s" + w + "."
}

// windowKey returns identity + suffix + base-36 id.
func windowKey(identity, suffix string, id int64) string {
	var buf [maxKeyLen + 16]byte
	b := append(buf[:0], identity...)
	b = append(b, suffix...)
	b = strconv.AppendInt(b, id, 36)
	return string(b)
}
