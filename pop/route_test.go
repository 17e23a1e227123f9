package pop

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/poplimit/poplimit/counter/memstore"
)

// TestRouteCacheAgreesWithMux: the memoised route lookup answers what the
// uncached match (normalise, then ask the ServeMux) answers, on first sight
// and from the cache, and stays bounded.
func TestRouteCacheAgreesWithMux(t *testing.T) {
	l, err := New(storeConfig(memstore.New()))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.LoadFile("../testdata/policies/example.yml"); err != nil {
		t.Fatal(err)
	}
	s := l.snap.Load()
	reqs := []*http.Request{}
	for _, m := range []string{"GET", "POST", "PUT", "CONNECT"} {
		for _, p := range []string{"/", "/api/items", "/api/items/7", "/api/items/7/", "/api//items", "/search", "/login", "/ingest/s1", "/ingest/s1/x",
			"/ingest/", "//login", "/a/../login", "/%2Fingest/x", "/ingest/a%2Fb"} {
			for _, host := range []string{"edge.test", "edge.test:8080", "other"} {
				r := httptest.NewRequest(m, "http://"+host+p, nil)
				reqs = append(reqs, r)
			}
		}
	}
	nonEmpty := 0
	for round := 0; round < 2; round++ { // miss, then hit
		for _, r := range reqs {
			want := s.match(r)
			if got := s.route(r); got != want {
				t.Errorf("round %d: %s %s%s: route %+v, match %+v", round, r.Method, r.Host, r.URL.Path, got, want)
			}
			if want.pattern != "" {
				nonEmpty++
			}
		}
	}
	if nonEmpty == 0 {
		t.Fatal("no request matched a policy route: the test checks nothing")
	}
	for i := 0; i < routeCacheEntries+100; i++ {
		s.route(httptest.NewRequest("GET", fmt.Sprintf("/scan/%d", i), nil))
	}
	if n := len(s.rc.m); n != routeCacheEntries {
		t.Errorf("route cache holds %d entries, want the bound %d", n, routeCacheEntries)
	}
	// Past the bound, lookups still answer correctly.
	r := httptest.NewRequest("POST", "/login", nil)
	r.URL.Path = "/login" // a triple cached before the scan
	want := s.match(r)
	if got := s.route(httptest.NewRequest("POST", "/ingest/zzz", nil)).pattern; got != "POST /ingest/{stream}" {
		t.Errorf("uncached route past the bound: %q", got)
	}
	if got := s.route(r); got != want || want.pattern != "POST /login" {
		t.Errorf("cached route: %+v, want %+v", got, want)
	}
}
