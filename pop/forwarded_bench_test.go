package pop_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/poplimit/poplimit/pop"
	"github.com/poplimit/poplimit/pop/policy"
)

// BenchmarkClientIPHops: the client address of a request from a trusted
// proxy with a plain X-Forwarded-For (one hop) and with one of 60,000 hops
// (an attacker's header, just under net/http's 1 MB default). With the hop
// cap the two cost about the same.
func BenchmarkClientIPHops(b *testing.B) {
	trusted := policy.TrustedProxies{netip.MustParsePrefix("10.0.0.0/8")}
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
		{"commas1MB", strings.Repeat(",", 1<<20) + "10.0.0.1"},
		{"entry1MB", strings.Repeat("1", 1<<20)},
	} {
		r := &http.Request{Method: "GET", URL: &url.URL{Path: "/"}, RemoteAddr: "10.1.2.3:4000",
			Header: http.Header{"X-Forwarded-For": {bc.xff}}}
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if !pop.ClientIP(r, trusted, 0).IsValid() {
					b.Fatal("no client address")
				}
			}
		})
	}
}

// BenchmarkDecideXFF: one whole decision (in-process store) for a request
// from a trusted proxy with a plain X-Forwarded-For and with 60,000 hops.
func BenchmarkDecideXFF(b *testing.B) {
	l, err := pop.New(pop.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	doc := `version: 1
trusted_proxies: [10.0.0.0/8]
tiers:
  t: {limits: [{name: q, algorithm: fixed_window, quantity: 1000000000, window: 1h}]}
policies:
  - {name: ip, routes: ["/"], identity: [ip], tier: t}
`
	if err := l.LoadBytes("xff.yml", []byte(doc)); err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct{ name, xff string }{
		{"plain", "198.51.100.7"},
		{"xff60000", strings.Repeat("203.0.113.9, ", 59999) + "198.51.100.7"},
		{"xff60000trusted", strings.Repeat("10.0.0.9, ", 60000) + "10.0.0.8"},
	} {
		r := &http.Request{Method: "GET", URL: &url.URL{Path: "/x"}, RemoteAddr: "10.1.2.3:4000", Host: "edge.test",
			Header: http.Header{"X-Forwarded-For": {bc.xff}}}
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			now := time.Now()
			for b.Loop() {
				if d := l.Decide(context.Background(), r, now); !d.Allowed {
					b.Fatal("rejected")
				}
			}
		})
	}
}
