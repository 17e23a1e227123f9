package pop

import (
	"bytes"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/poplimit/poplimit/counter/memstore"
)

// spellingDoc: two limited policies and a default policy for the rest.
// %s is the unmatched clause, %v case_insensitive_paths.
const spellingDoc = `version: 1
headers: seed
%s
case_insensitive_paths: %v
tiers:
  t: {limits: [{name: q, algorithm: fixed_window, quantity: 2, window: 1m}]}
  d: {limits: [{name: d, algorithm: fixed_window, quantity: 5, window: 1m}]}
policies:
  - {name: widgets, routes: ["/api/widgets"], identity: [ip], tier: t}
  - {name: items, routes: ["GET /api/items/{id}"], identity: [ip, route], tier: t}
  - {name: rest, identity: [ip], tier: d}
`

// spellings turns a canonical path /a/b... into the spellings an attacker
// tries; name → path.
func spellings(p string) [][2]string {
	segs := strings.Split(p[1:], "/")
	rest := strings.Join(segs[1:], "/")
	return [][2]string{
		{"canonical", p},
		{"upper case", "/" + strings.ToUpper(segs[0]) + "/" + rest},
		{"trailing slash", p + "/"},
		{"duplicate slashes", "//" + strings.Join(segs, "//")},
		{"dot segment", "/" + segs[0] + "/./" + rest},
		{"dot-dot segment", "/" + segs[0] + "/x/../" + rest},
		{"encoded dot-dot", "/" + segs[0] + "/x/%2e%2E/" + rest},
		{"percent-encoded letter", "/" + segs[0] + "/" + fmt.Sprintf("%%%02x", rest[0]) + rest[1:]},
		{"percent-encoded segment", "/" + segs[0] + "/" + encodeAll(segs[1]) + strings.TrimPrefix(rest, segs[1])},
	}
}

func encodeAll(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		fmt.Fprintf(&b, "%%%02x", s[i])
	}
	return b.String()
}

// TestSpellingsAreLimited tries every spelling of each limited path against
// each policy: it is limited by its own policy or falls to the default
// policy, never unlimited; paths no route matches (/api/a/b/c) get the
// default policy.
func TestSpellingsAreLimited(t *testing.T) {
	for _, ci := range []bool{false, true} {
		l := newTestLimiter(t, storeConfig(memstore.New()), fmt.Sprintf(spellingDoc, "default_policy: rest", ci))
		for _, base := range []struct{ path, policy string }{{"/api/widgets", "widgets"}, {"/api/items/7", "items"}} {
			for i, sp := range spellings(base.path) {
				want := base.policy
				if sp[0] == "upper case" && !ci {
					want = "rest" // case-sensitive upstream: another path, the default policy
				}
				t.Run(fmt.Sprintf("ci=%v/%s/%s", ci, base.policy, sp[0]), func(t *testing.T) {
					r := req("GET", sp[1])
					r.RemoteAddr = fmt.Sprintf("192.0.2.%d:1", 10+i) // a fresh count per spelling
					if base.policy == "items" {
						r.RemoteAddr = fmt.Sprintf("198.51.100.%d:1", 10+i)
					}
					limit := int64(2)
					if want == "rest" {
						limit = 5
					}
					for n := int64(1); n <= limit+1; n++ {
						d := l.Decide(r.Context(), r, t0)
						if d.Policy != want || !d.limited() {
							t.Fatalf("%s: request %d decided by %q (limited %v, reason %s), want policy %q", sp[1], n, d.Policy, d.limited(), d.Reason, want)
						}
						if got := d.Allowed; got != (n <= limit) {
							t.Fatalf("%s: request %d allowed=%v with a limit of %d", sp[1], n, got, limit)
						}
					}
				})
			}
		}
		for _, p := range []string{"/api/a/b/c", "/API/WIDGETS/x", "/api/widgets%2F", "/", "/api/items"} {
			d := l.Decide(t.Context(), req("GET", p), t0)
			if d.Policy != "rest" || !d.limited() {
				t.Errorf("ci=%v: unmatched %s decided by %q (reason %s), want the default policy", ci, p, d.Policy, d.Reason)
			}
		}
		// Method mismatch: no route, the default policy.
		if d := l.Decide(t.Context(), req("POST", "/api/items/7"), t0); d.Policy != "rest" {
			t.Errorf("POST /api/items/7 decided by %q, want rest", d.Policy)
		}
	}
}

// TestUnmatchedUnlimitedWarns: `unmatched: unlimited` lets unmatched paths
// through unlimited, and the load says so; a file with neither clause
// behaves the same and warns too.
func TestUnmatchedUnlimitedWarns(t *testing.T) {
	for _, clause := range []string{"unmatched: unlimited", ""} {
		var log bytes.Buffer
		cfg := storeConfig(memstore.New())
		cfg.Logger = slog.New(slog.NewTextHandler(&log, nil))
		l := newTestLimiter(t, cfg, fmt.Sprintf(strings.Replace(spellingDoc, "  - {name: rest, identity: [ip], tier: d}\n", "", 1), clause, false))
		if !strings.Contains(log.String(), "level=WARN") || !strings.Contains(log.String(), "match no route are not limited") {
			t.Errorf("%q: no warning at load:\n%s", clause, log.String())
		}
		if d := l.Decide(t.Context(), req("GET", "/api/a/b/c"), t0); d.Reason != ReasonNoPolicy || !d.Allowed {
			t.Errorf("%q: unmatched path: %+v, want unlimited", clause, d)
		}
		if d := l.Decide(t.Context(), req("GET", "/api//widgets/"), t0); d.Policy != "widgets" {
			t.Errorf("%q: //api//widgets/ decided by %q", clause, d.Policy)
		}
	}
}

// TestMiddlewareForwardsCanonicalPath: the handler behind the middleware
// sees the path that was matched.
func TestMiddlewareForwardsCanonicalPath(t *testing.T) {
	l := newTestLimiter(t, storeConfig(memstore.New()), fmt.Sprintf(spellingDoc, "default_policy: rest", true))
	var got string
	h := l.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r.URL.EscapedPath() + " " + r.URL.Path
	}))
	for _, tc := range []struct{ in, want string }{
		{"/API//Widgets/", "/api/widgets /api/widgets"},
		{"/api/x/../%69tems/7?q=1", "/api/items/7 /api/items/7"},
		{"/api/a%2fb/", "/api/a%2Fb /api/a/b"},
		{"/api/widgets", "/api/widgets /api/widgets"},
	} {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req("GET", tc.in))
		if got != tc.want || w.Header().Get("Ratelimit-Limit") == "" {
			t.Errorf("%s: upstream saw %q (headers %v), want %q", tc.in, got, w.Header(), tc.want)
		}
	}
}

func TestNormalizePath(t *testing.T) {
	for _, tc := range []struct {
		in   string
		fold bool
		want string
	}{
		{"/", false, "/"},
		{"", false, "/"},
		{"/api/widgets", false, "/api/widgets"},
		{"/api/widgets/", false, "/api/widgets"},
		{"//api//widgets", false, "/api/widgets"},
		{"/api/./widgets", false, "/api/widgets"},
		{"/api/x/../widgets", false, "/api/widgets"},
		{"/../../api", false, "/api"},
		{"/api/%77idgets", false, "/api/widgets"},
		{"/api/%2e%2e/x", false, "/x"},
		{"/api/%2f/x", false, "/api/%2F/x"},
		{"/a%zz", false, "/a%25zz"},
		{"/a%", false, "/a%25"},
		{"/API/Widgets", true, "/api/widgets"},
		{"/API/%57idgets", true, "/api/widgets"},
		{"/a%c3%A9", true, "/a%C3%A9"},
		{"relative", false, "/relative"},
	} {
		if got := NormalizePath(tc.in, tc.fold); got != tc.want {
			t.Errorf("NormalizePath(%q, %v) = %q, want %q", tc.in, tc.fold, got, tc.want)
		}
	}
	if n := testing.AllocsPerRun(100, func() { NormalizePath("/api/items/7", true) }); n != 0 {
		t.Errorf("canonical path: %v allocations, want 0", n)
	}
}

// FuzzNormalizePath: never panics, always rooted, idempotent, and the fast
// check agrees with the slow path.
func FuzzNormalizePath(f *testing.F) {
	for _, s := range []string{"/", "/api/widgets", "//api//widgets/", "/api/./x/../%77idgets", "/%2e%2E/%2f", "/a%zz%", "/API/%c3%a9"} {
		f.Add(s, false)
		f.Add(s, true)
	}
	f.Fuzz(func(t *testing.T, p string, fold bool) {
		n := NormalizePath(p, fold)
		if n == "" || n[0] != '/' {
			t.Fatalf("NormalizePath(%q) = %q: not rooted", p, n)
		}
		if n2 := NormalizePath(n, fold); n2 != n {
			t.Fatalf("not idempotent: %q → %q → %q", p, n, n2)
		}
		if !isNormalPath(n, fold) {
			t.Fatalf("%q → %q, which isNormalPath rejects", p, n)
		}
	})
}
