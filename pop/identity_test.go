package pop

import (
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"testing"

	"github.com/poplimit/poplimit/pop/policy"
)

func TestClientIP(t *testing.T) {
	trusted := policy.TrustedProxies{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("127.0.0.1/32")}
	tests := []struct {
		name    string
		trusted policy.TrustedProxies
		remote  string
		xff     []string
		fwd     []string
		want    string
	}{
		{"no proxy", trusted, "203.0.113.9:4000", nil, nil, "203.0.113.9"},
		{"untrusted peer ignores xff", trusted, "203.0.113.9:4000", []string{"1.1.1.1"}, nil, "203.0.113.9"},
		{"trusted peer uses xff", trusted, "10.1.2.3:80", []string{"198.51.100.7"}, nil, "198.51.100.7"},
		{"spoofed left entries ignored", trusted, "10.1.2.3:80", []string{"6.6.6.6, 198.51.100.7, 10.9.9.9"}, nil, "198.51.100.7"},
		{"multiple xff lines", trusted, "127.0.0.1:80", []string{"6.6.6.6", "198.51.100.7"}, nil, "198.51.100.7"},
		{"all trusted gives leftmost", trusted, "10.1.2.3:80", []string{"10.0.0.5, 10.0.0.6"}, nil, "10.0.0.5"},
		{"garbage hop stops chain", trusted, "10.1.2.3:80", []string{"6.6.6.6, garbage"}, nil, "10.1.2.3"},
		{"forwarded wins", trusted, "10.1.2.3:80", []string{"6.6.6.6"}, []string{`for=192.0.2.60;proto=http, for="[2001:db8::1]:4711"`}, "2001:db8::1"},
		{"forwarded v4 with port", trusted, "10.1.2.3:80", nil, []string{`for="198.51.100.17:1234"`}, "198.51.100.17"},
		{"no trust configured", nil, "10.1.2.3:80", []string{"198.51.100.7"}, nil, "10.1.2.3"},
		{"ipv6 peer", trusted, "[2001:db8::2]:443", nil, nil, "2001:db8::2"},
		{"v4-mapped peer trusted", trusted, "[::ffff:10.0.0.1]:80", []string{"198.51.100.7"}, nil, "198.51.100.7"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest("GET", "/", nil)
			r.RemoteAddr = tc.remote
			for _, v := range tc.xff {
				r.Header.Add("X-Forwarded-For", v)
			}
			for _, v := range tc.fwd {
				r.Header.Add("Forwarded", v)
			}
			if got := ClientIP(r, tc.trusted, 0); got.String() != tc.want {
				t.Errorf("ClientIP = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestClientIPHopCap: at most maxHops hops are examined from the right, a
// hop longer than 256 bytes ends the chain, and blank entries are skipped.
func TestClientIPHopCap(t *testing.T) {
	trusted := policy.TrustedProxies{netip.MustParsePrefix("10.0.0.0/8")}
	chain := "198.51.100.7, 10.0.0.4, 10.0.0.3, 10.0.0.2, 10.0.0.1"
	for _, tc := range []struct {
		name string
		xff  []string
		fwd  []string
		max  int
		want string
	}{
		{"within cap", []string{chain}, nil, 5, "198.51.100.7"},
		{"cap stops at a trusted hop", []string{chain}, nil, 3, "10.0.0.3"},
		{"cap of one", []string{chain}, nil, 1, "10.0.0.1"},
		{"default cap", []string{chain}, nil, 0, "198.51.100.7"},
		{"hops over lines", []string{"198.51.100.7, 10.0.0.3", "", "10.0.0.2 ,, 10.0.0.1"}, nil, 4, "198.51.100.7"},
		{"long hop ends chain", []string{strings.Repeat("1", 300) + ", 10.0.0.1"}, nil, 5, "10.0.0.1"},
		{"long last line ends chain", []string{"198.51.100.7", strings.Repeat("1", 300)}, nil, 5, "10.1.2.3"},
		{"few empty entries skipped", []string{"198.51.100.7" + strings.Repeat(",", 60) + "10.0.0.1"}, nil, 5, "198.51.100.7"},
		{"a flood of empty entries ends the chain", []string{"198.51.100.7" + strings.Repeat(",", 10000) + "10.0.0.1"}, nil, 5, "10.0.0.1"},
		{"a flood of blank lines ends the chain", append(append([]string{"198.51.100.7"}, make([]string, 100)...), "10.0.0.1"), nil, 5, "10.0.0.1"},
		{"forwarded capped", nil, []string{`for=198.51.100.7, for=10.0.0.2;proto=https`, `for="10.0.0.1:80"`}, 2, "10.0.0.2"},
		{"forwarded element without for", nil, []string{`for=198.51.100.7, proto=https`}, 5, "10.1.2.3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest("GET", "/", nil)
			r.RemoteAddr = "10.1.2.3:80"
			for _, v := range tc.xff {
				r.Header.Add("X-Forwarded-For", v)
			}
			for _, v := range tc.fwd {
				r.Header.Add("Forwarded", v)
			}
			if got := ClientIP(r, trusted, tc.max); got.String() != tc.want {
				t.Errorf("ClientIP(hops %d) = %v, want %v", tc.max, got, tc.want)
			}
		})
	}
}

func TestAPIKeyExtract(t *testing.T) {
	src := policy.APIKeySource{Header: "X-API-Key", Bearer: true, Query: "api_key"}
	tests := []struct {
		name   string
		target string
		hdr    []string
		want   string
	}{
		{"header", "/", []string{"X-API-Key", "k1"}, "k1"},
		{"bearer", "/", []string{"Authorization", "Bearer k2"}, "k2"},
		{"bearer lower case", "/", []string{"Authorization", "bearer k2"}, "k2"},
		{"basic is not a key", "/", []string{"Authorization", "Basic Zm9vOmJhcg=="}, ""},
		{"query", "/?api_key=k3", nil, "k3"},
		{"header wins", "/?api_key=k3", []string{"X-API-Key", "k1", "Authorization", "Bearer k2"}, "k1"},
		{"none", "/", nil, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := APIKey(req("GET", tc.target, tc.hdr...), src); got != tc.want {
				t.Errorf("Extract = %q, want %q", got, tc.want)
			}
		})
	}
	if got := APIKey(req("GET", "/?api_key=x", "X-API-Key", "y"), policy.APIKeySource{}); got != "" {
		t.Errorf("empty source extracted %q", got)
	}
}

func FuzzClientIP(f *testing.F) {
	f.Add("10.0.0.1:80", "198.51.100.7, 10.0.0.2", `for=192.0.2.60;proto=http, for="[2001:db8::1]:4711"`)
	f.Add("[::1]:80", "garbage", "")
	f.Add("203.0.113.9:1", "", "for=unknown")
	trusted := policy.TrustedProxies{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("::1/128")}
	f.Fuzz(func(t *testing.T, remote, xff, fwd string) {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = remote
		if xff != "" {
			r.Header.Set("X-Forwarded-For", xff)
		}
		if fwd != "" {
			r.Header.Set("Forwarded", fwd)
		}
		got := ClientIP(r, trusted, 0)
		peer := parseHostAddr(remote)
		if !peer.IsValid() {
			if got.IsValid() {
				t.Fatalf("client %v from an unparsable peer %q", got, remote)
			}
			return
		}
		if !trusted.Contains(peer) && got != peer {
			t.Fatalf("untrusted peer %v: client %v taken from headers", peer, got)
		}
	})
}

// FuzzIdentity: identity extraction from X-Forwarded-For, Forwarded and
// the API key sources never panics; the client is the peer, an address
// vouched for by the chain, or invalid exactly when the peer is; and the
// work is bounded: once the chain holds max hops on the right, nothing to
// their left is read (prepending junk changes nothing).
func FuzzIdentity(f *testing.F) {
	for _, s := range []struct{ remote, xff, fwd, auth, apiKey, query string }{
		{"10.0.0.1:80", "198.51.100.7, 10.0.0.2", "", "Bearer abc", "", ""},
		{"10.0.0.1:80", "", `for=192.0.2.60;proto=http;by=203.0.113.43, for="[2001:db8:cafe::17]:4711"`, "", "k1", ""},
		{"[::1]:80", "2001:db8::1, ::ffff:10.0.0.3", `for=unknown, for="_hidden"`, "bearer  spaced ", "", "api_key=q1&x=2"},
		{"203.0.113.9:1", "1.1.1.1", "for=1.1.1.1", "Basic Zm9vOmJhcg==", "", "api_key=%zz"},
		{"10.9.9.9:443", ",,, 10.0.0.4 , ,10.0.0.5", `For="10.0.0.6" ; proto=https`, "Bearer", " ", "api_key="},
		{"garbage", "1.2.3.4", "", "", "", ""},
	} {
		f.Add(s.remote, s.xff, s.fwd, s.auth, s.apiKey, s.query, uint8(3))
	}
	trusted := policy.TrustedProxies{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("::1/128")}
	src := policy.APIKeySource{Header: "X-Api-Key", Bearer: true, Query: "api_key"}
	f.Fuzz(func(t *testing.T, remote, xff, fwd, auth, apiKey, query string, hops uint8) {
		max := int(hops%8) + 1
		build := func(xff, fwd string) *http.Request {
			r := &http.Request{Method: "GET", URL: &url.URL{Path: "/", RawQuery: query}, RemoteAddr: remote, Header: http.Header{}}
			if xff != "" {
				r.Header["X-Forwarded-For"] = []string{xff}
			}
			if fwd != "" {
				r.Header["Forwarded"] = []string{fwd}
			}
			if auth != "" {
				r.Header["Authorization"] = []string{auth}
			}
			if apiKey != "" {
				r.Header["X-Api-Key"] = []string{apiKey}
			}
			return r
		}
		r := build(xff, fwd)
		got := ClientIP(r, trusted, max)
		peer := parseHostAddr(remote)
		if got.IsValid() != peer.IsValid() {
			t.Fatalf("peer %q (%v) gave client %v", remote, peer, got)
		}
		if peer.IsValid() && !trusted.Contains(peer) && got != peer {
			t.Fatalf("untrusted peer %v: client %v taken from headers", peer, got)
		}
		if got.Is4In6() {
			t.Fatalf("client %v is v4-mapped", got)
		}
		// Bounded: with max hops on the right, what is left of them is
		// never read.
		chain := xff
		if fwd != "" {
			chain = fwd
		}
		h := hopsFromRight{lines: []string{chain}, rest: chain}
		n := 0
		for n < max {
			if _, ok := h.next(); !ok {
				break
			}
			n++
		}
		if n == max {
			junk := strings.Repeat("not-an-address, 10.0.0.1, ", 50)
			var r2 *http.Request
			if fwd != "" {
				r2 = build(xff, junk+fwd)
			} else {
				r2 = build(junk+xff, fwd)
			}
			if got2 := ClientIP(r2, trusted, max); got2 != got {
				t.Fatalf("hops left of the %d examined changed the client: %v → %v", max, got, got2)
			}
		}
		k := APIKey(r, src)
		if k != strings.TrimSpace(k) && k != r.URL.Query().Get("api_key") {
			t.Fatalf("API key %q not trimmed", k)
		}
		if k != "" && policy.KeyID(k) == "" {
			t.Fatal("key without a digest")
		}
	})
}
