package pop

// Step 1 of a decision, identify: the client IP behind trusted proxies
// and the API key, as the policy file says to find them.

import (
	"net"
	"net/http"
	"net/netip"
	"net/textproto"
	"strings"

	"github.com/poplimit/poplimit/pop/policy"
)

// Identity is what pop extracted from one request. APIKey is the clear key:
// it is only used to look up its record and is never written to a key, a
// metric or a log; KeyID is its digest. In a decision, IP is the client's
// network address (File.ClientNet: the client IP masked to the policy
// file's ip_prefix), which is what per-IP counts key on; rejection events
// carry the full client IP.
type Identity struct {
	IP     netip.Addr
	APIKey string
	KeyID  string
	User   string
	Tenant string
	Route  string
}

// APIKey returns the API key of r found where s says, or "": the first
// non-empty of s.Header, s.Bearer, s.Query.
func APIKey(r *http.Request, s policy.APIKeySource) string {
	if s.Header != "" {
		if v := strings.TrimSpace(headerGet(r.Header, s.Header)); v != "" {
			return v
		}
	}
	if s.Bearer {
		if v := headerGet(r.Header, "Authorization"); len(v) > 7 && strings.EqualFold(v[:7], "bearer ") {
			if k := strings.TrimSpace(v[7:]); k != "" {
				return k
			}
		}
	}
	if s.Query != "" && r.URL != nil && r.URL.RawQuery != "" {
		if v := r.URL.Query().Get(s.Query); v != "" {
			return v
		}
	}
	return ""
}

// headerGet is h.Get(name) without canonicalising (and allocating) when
// name is already canonical, as the parser leaves it.
func headerGet(h http.Header, name string) string {
	if v := h[name]; len(v) > 0 {
		return v[0]
	}
	if c := textproto.CanonicalMIMEHeaderKey(name); c != name {
		return h.Get(c)
	}
	return ""
}

// maxHopBytes bounds one hop (an X-Forwarded-For entry or a Forwarded
// element): a longer one is unparsable and ends the trusted chain, so the
// cost of a hop is bounded too.
const maxHopBytes = 256

// ClientIP returns the client address of r. X-Forwarded-For and
// Forwarded are honoured only when the peer is a trusted proxy; the chain
// is walked from the right and the first untrusted hop is the client (so a
// client cannot spoof its address by prepending entries). Forwarded (RFC
// 7239) wins over X-Forwarded-For when both are present.
//
// At most maxHops hops are examined (≤ 0: policy.DefaultMaxForwardedHops), each
// at most 256 bytes: when every examined hop is trusted, the leftmost one
// examined is the client (a trusted proxy's address, never one a client
// chose). The work is therefore bounded whatever the header's size: the
// header is scanned backwards and only the hops examined are read. An
// unparsable hop ends the chain (the last address vouched for is the
// client). The zero Addr is returned when RemoteAddr does not parse.
func ClientIP(r *http.Request, t policy.TrustedProxies, maxHops int) netip.Addr {
	peer := parseHostAddr(r.RemoteAddr)
	if !peer.IsValid() || len(t) == 0 || !t.Contains(peer) {
		return peer
	}
	if maxHops <= 0 {
		maxHops = policy.DefaultMaxForwardedHops
	}
	lines, fwd := r.Header["Forwarded"], true
	if len(lines) == 0 {
		lines, fwd = r.Header["X-Forwarded-For"], false
	}
	client := peer
	hops := hopsFromRight{lines: lines, i: len(lines) - 1, rest: lastOf(lines)}
	for n := 0; n < maxHops; n++ {
		h, ok := hops.next()
		if !ok {
			break
		}
		if fwd {
			h = forwardedForValue(h)
		}
		a := netip.Addr{}
		if len(h) <= maxHopBytes {
			a = parseHostAddr(h)
		}
		if !a.IsValid() {
			return client
		}
		client = a.Unmap()
		if !t.Contains(a) {
			return client
		}
	}
	return client
}

func lastOf(lines []string) string {
	if len(lines) == 0 {
		return ""
	}
	return lines[len(lines)-1]
}

// maxEmptyHops bounds the empty entries ("a,,b", blank lines) skipped in
// one walk: past it the chain ends, so a header of commas costs no more
// than a short one.
const maxEmptyHops = 64

// hopsFromRight yields the comma-separated entries of header lines from the
// last one backwards, scanning only as far as it is asked to go, and never
// more than maxHopBytes+1 bytes for one entry: an entry longer than that
// is yielded as its last maxHopBytes+1 bytes (too long to be an address)
// and the walk ends there.
type hopsFromRight struct {
	lines   []string
	i       int    // current line
	rest    string // unread part of line i
	empties int    // empty entries skipped so far
	done    bool
}

func (h *hopsFromRight) next() (string, bool) {
	for !h.done && h.i >= 0 && h.empties <= maxEmptyHops {
		win := h.rest
		if len(win) > maxHopBytes+1 {
			win = win[len(win)-(maxHopBytes+1):]
		}
		if c := strings.LastIndexByte(win, ','); c >= 0 {
			c += len(h.rest) - len(win)
			e := strings.TrimSpace(h.rest[c+1:])
			h.rest = h.rest[:c]
			if e != "" {
				return e, true
			}
			h.empties++
			continue
		}
		if len(h.rest) > maxHopBytes {
			h.done = true
			return win, true
		}
		e := strings.TrimSpace(h.rest)
		h.i--
		if h.i >= 0 {
			h.rest = h.lines[h.i]
		} else {
			h.rest = ""
		}
		if e != "" {
			return e, true
		}
		h.empties++
	}
	return "", false
}

// forwardedForValue is the for= value of one RFC 7239 Forwarded element
// (pairs separated by ';'), unquoted; "" when it has none.
func forwardedForValue(elem string) string {
	if len(elem) > maxHopBytes {
		return ""
	}
	for elem != "" {
		pair := elem
		if i := strings.IndexByte(elem, ';'); i >= 0 {
			pair, elem = elem[:i], elem[i+1:]
		} else {
			elem = ""
		}
		k, v, ok := strings.Cut(strings.TrimSpace(pair), "=")
		if ok && strings.EqualFold(strings.TrimSpace(k), "for") {
			return strings.Trim(strings.TrimSpace(v), `"`)
		}
	}
	return ""
}

// parseHostAddr accepts "1.2.3.4", "1.2.3.4:80", "[::1]:80", "[::1]", "::1".
func parseHostAddr(s string) netip.Addr {
	s = strings.TrimSpace(s)
	// RemoteAddr is "ip:port" (or "[ip6]:port"): try that first, failed
	// parses allocate an error.
	if strings.HasPrefix(s, "[") || strings.Count(s, ":") == 1 {
		if ap, err := netip.ParseAddrPort(s); err == nil {
			return ap.Addr().Unmap()
		}
	}
	if a, err := netip.ParseAddr(s); err == nil {
		return a.Unmap()
	}
	if strings.HasPrefix(s, "[") && strings.HasSuffix(s, "]") {
		if a, err := netip.ParseAddr(s[1 : len(s)-1]); err == nil {
			return a.Unmap()
		}
	}
	if h, _, err := net.SplitHostPort(s); err == nil {
		if a, err := netip.ParseAddr(h); err == nil {
			return a.Unmap()
		}
	}
	return netip.Addr{}
}
