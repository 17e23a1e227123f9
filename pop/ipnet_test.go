package pop

import (
	"fmt"
	"testing"

	"github.com/poplimit/poplimit/counter/memstore"
)

// ipDoc: a per-IP limit of 3 and a pre-filter of 5 per network; %s is
// the ip_prefix clause.
const ipDoc = `version: 1
%s
prefilter: {quantity: 5, window: 1m, burst: 5}
tiers:
  t: {limits: [{name: q, algorithm: fixed_window, quantity: 3, window: 1m}]}
policies:
  - {name: ip, routes: ["/"], identity: [ip], tier: t}
`

// TestIPv6RotationSharesOneCount: addresses rotating within one /64 share
// one per-IP count (default prefix), another /64 has its own; with
// ip_prefix ipv6: 128 each address is on its own again; the pre-filter
// keys on the same network.
func TestIPv6RotationSharesOneCount(t *testing.T) {
	allowed := func(l *Limiter, addrs []string) (n int, reasons map[Reason]int) {
		reasons = map[Reason]int{}
		for _, a := range addrs {
			r := req("GET", "/x")
			r.RemoteAddr = a
			d := l.Decide(t.Context(), r, t0)
			if d.Allowed {
				n++
			}
			reasons[d.Reason]++
		}
		return n, reasons
	}
	var rotating []string
	for i := 1; i <= 10; i++ {
		rotating = append(rotating, fmt.Sprintf("[2001:db8:1:2:%x::%x]:443", i*7, i))
	}
	l := newTestLimiter(t, storeConfig(memstore.New()), fmt.Sprintf(ipDoc, ""))
	if n, reasons := allowed(l, rotating); n != 3 || reasons[ReasonPrefilter] != 5 {
		t.Errorf("10 addresses of one /64: %d admitted (reasons %v), want 3 and 5 pre-filtered", n, reasons)
	}
	if n, _ := allowed(l, []string{"[2001:db8:1:3::1]:443"}); n != 1 {
		t.Errorf("another /64 was limited with the first")
	}
	// IPv4: /32 by default, so neighbours are apart.
	if n, _ := allowed(l, []string{"192.0.2.1:1", "192.0.2.2:1", "192.0.2.3:1", "192.0.2.4:1"}); n != 4 {
		t.Errorf("IPv4 neighbours: %d admitted, want 4", n)
	}
	l = newTestLimiter(t, storeConfig(memstore.New()), fmt.Sprintf(ipDoc, "ip_prefix: {ipv4: 24, ipv6: 128}"))
	if n, _ := allowed(l, rotating); n != 10 {
		t.Errorf("ipv6: 128: %d of 10 addresses admitted, want all", n)
	}
	if n, _ := allowed(l, []string{"192.0.2.1:1", "192.0.2.2:1", "192.0.2.3:1", "192.0.2.4:1"}); n != 3 {
		t.Errorf("ipv4: 24: %d of one /24's 4 addresses admitted, want 3", n)
	}
}
