package pop_test

import (
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/poplimit/poplimit/pop"
)

// BenchmarkClientIPHops: the client address of a request from a trusted
// proxy with a plain X-Forwarded-For (one hop) and with one of 60,000 hops
// (an attacker's header, just under net/http's 1 MB default). With the hop
// cap the two cost about the same.
func BenchmarkClientIPHops(b *testing.B) {
	trusted := pop.TrustedProxies{netip.MustParsePrefix("10.0.0.0/8")}
	chain := func(net string) string {
		var long strings.Builder
		for i := 0; i < 60000; i++ {
			if i > 0 {
				long.WriteString(", ")
			}
			long.WriteString(net)
			long.WriteString(strconv.Itoa(i / 256 % 256))
			long.WriteByte('.')
			long.WriteString(strconv.Itoa(i % 256))
		}
		return long.String()
	}
	for _, bc := range []struct{ name, xff string }{
		{"plain", "198.51.100.7"},
		{"xff60000", chain("198.51.")},      // client at the right end
		{"xff60000trusted", chain("10.0.")}, // every hop trusted: the cap stops the walk
	} {
		r := &http.Request{Method: "GET", URL: &url.URL{Path: "/"}, RemoteAddr: "10.1.2.3:4000",
			Header: http.Header{"X-Forwarded-For": {bc.xff}}}
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if !trusted.ClientIP(r).IsValid() {
					b.Fatal("no client address")
				}
			}
		})
	}
}
