package pop

import (
	"crypto/sha256"
	"encoding/hex"
	"net"
	"net/http"
	"net/netip"
	"net/textproto"
	"strings"
)

// Part names one identity component a policy can key on.
type Part string

// Identity parts.
const (
	PartIP     Part = "ip"      // client IP, trusted-proxy aware
	PartAPIKey Part = "api_key" // API key (only its digest is ever stored or logged)
	PartUser   Part = "user"    // user id header
	PartTenant Part = "tenant"  // tenant from the API key's record
	PartRoute  Part = "route"   // method + path pattern of the matched route
)

// Identity is what pop extracted from one request. APIKey is the clear key:
// it is only used to look up its record and is never written to a key, a
// metric or a log; KeyID is its digest.
type Identity struct {
	IP     netip.Addr
	APIKey string
	KeyID  string
	User   string
	Tenant string
	Route  string
}

// KeyID returns the digest used in place of an API key everywhere outside
// the request: the first 12 bytes of its SHA-256, hex encoded.
func KeyID(apiKey string) string {
	if apiKey == "" {
		return ""
	}
	sum := sha256.Sum256([]byte(apiKey))
	return hex.EncodeToString(sum[:12])
}

// APIKeySource says where an API key may be found; the first non-empty
// source wins in the order Header, Bearer, Query.
type APIKeySource struct {
	Header string // request header, e.g. "X-API-Key"
	Bearer bool   // "Authorization: Bearer <key>"
	Query  string // query parameter name
}

// Extract returns the API key of r, or "".
func (s APIKeySource) Extract(r *http.Request) string {
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

// TrustedProxies is a set of CIDRs whose forwarding headers are believed.
// The zero value trusts nobody: the client IP is the connection's peer.
type TrustedProxies []netip.Prefix

func (t TrustedProxies) contains(a netip.Addr) bool {
	a = a.Unmap()
	for _, p := range t {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// ClientIP returns the client address of r. X-Forwarded-For and Forwarded
// are honoured only when the peer is a trusted proxy; the chain is walked
// from the right and the first untrusted hop is the client (so a client
// cannot spoof its address by prepending entries). Forwarded (RFC 7239)
// wins over X-Forwarded-For when both are present. The zero Addr is returned
// when RemoteAddr does not parse.
func (t TrustedProxies) ClientIP(r *http.Request) netip.Addr {
	peer := parseHostAddr(r.RemoteAddr)
	if !peer.IsValid() || len(t) == 0 || !t.contains(peer) {
		return peer
	}
	var hops []string
	if fw := r.Header.Values("Forwarded"); len(fw) > 0 {
		hops = forwardedFor(fw)
	} else if xff := r.Header.Values("X-Forwarded-For"); len(xff) > 0 {
		for _, line := range xff {
			for _, h := range strings.Split(line, ",") {
				hops = append(hops, strings.TrimSpace(h))
			}
		}
	}
	client := peer
	for i := len(hops) - 1; i >= 0; i-- {
		a := parseHostAddr(hops[i])
		if !a.IsValid() {
			// An unparsable hop ends the trusted chain: keep the last
			// address we could vouch for.
			return client
		}
		client = a.Unmap()
		if !t.contains(a) {
			return client
		}
	}
	return client
}

// forwardedFor extracts the for= values of RFC 7239 Forwarded fields, in
// order.
func forwardedFor(lines []string) []string {
	var out []string
	for _, line := range lines {
		for _, elem := range strings.Split(line, ",") {
			for _, pair := range strings.Split(elem, ";") {
				k, v, ok := strings.Cut(strings.TrimSpace(pair), "=")
				if !ok || !strings.EqualFold(k, "for") {
					continue
				}
				out = append(out, strings.Trim(v, `"`))
			}
		}
	}
	return out
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
