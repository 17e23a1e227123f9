package pop

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/poplimit/poplimit/counter/memstore"
)

const forwardDoc = `version: 1
%s
tiers:
  t: {limits: [{name: q, algorithm: fixed_window, quantity: 1000, window: 1m}]}
policies:
  - {name: all, routes: ["/"], identity: [ip], tier: t}
`

// forwardSetup returns a limiter (trusted_proxies per the clause), the
// middleware + forwarder in front of upstream, and that upstream's URL.
func forwardSetup(t *testing.T, clause string, cfg ForwardConfig, upstream http.Handler) http.Handler {
	t.Helper()
	up := httptest.NewServer(upstream)
	t.Cleanup(up.Close)
	l := newTestLimiter(t, storeConfig(memstore.New()), fmt.Sprintf(forwardDoc, clause))
	u, _ := url.Parse(up.URL)
	fw, err := l.Forwarder(u, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return l.Middleware(fw)
}

// TestForwardTimeouts: a 10 s upstream gets 504 at the configured total
// timeout, and at the response-header timeout.
func TestForwardTimeouts(t *testing.T) {
	slow := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-time.After(10 * time.Second):
		case <-r.Context().Done():
		}
	})
	for _, tc := range []struct {
		name string
		cfg  ForwardConfig
		want time.Duration
	}{
		{"total timeout", ForwardConfig{Timeout: 300 * time.Millisecond}, 300 * time.Millisecond},
		{"response header timeout", ForwardConfig{ResponseHeaderTimeout: 200 * time.Millisecond}, 200 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := forwardSetup(t, "", tc.cfg, slow)
			w := httptest.NewRecorder()
			start := time.Now()
			h.ServeHTTP(w, req("GET", "/slow"))
			took := time.Since(start)
			if w.Code != http.StatusGatewayTimeout {
				t.Errorf("status %d, want 504", w.Code)
			}
			if took < tc.want || took > tc.want+2*time.Second {
				t.Errorf("answered after %v, want about %v", took, tc.want)
			}
			t.Logf("504 after %v (timeout %v)", took, tc.want)
		})
	}
}

// TestForwardBodyLimit: bodies over MaxBodyBytes get 413, with or without
// a Content-Length; a body at the limit goes through.
func TestForwardBodyLimit(t *testing.T) {
	h := forwardSetup(t, "", ForwardConfig{MaxBodyBytes: 1024}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			return
		}
		fmt.Fprintf(w, "%d", len(b))
	}))
	for _, tc := range []struct {
		name    string
		n       int
		chunked bool
		want    int
	}{
		{"at the limit", 1024, false, 200},
		{"over, content-length", 1025, false, 413},
		{"over, chunked", 4096, true, 413},
		{"under, chunked", 100, true, 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := req("POST", "/upload")
			body := strings.Repeat("x", tc.n)
			if tc.chunked {
				r.Body, r.ContentLength = io.NopCloser(strings.NewReader(body)), -1
			} else {
				r.Body, r.ContentLength = io.NopCloser(strings.NewReader(body)), int64(tc.n)
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if w.Code != tc.want {
				t.Errorf("%d bytes: status %d, want %d (%s)", tc.n, w.Code, tc.want, w.Body)
			}
		})
	}
}

// TestForwardHeaders: an untrusted peer's X-Forwarded-For/Forwarded/-Proto
// /-Host are replaced by what this hop saw; a trusted proxy's chains are
// kept (bounded) and the peer appended.
func TestForwardHeaders(t *testing.T) {
	seen := make(chan http.Header, 1)
	up := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := r.Header.Clone()
		h.Set("Host", r.Host)
		seen <- h
	})
	for _, tc := range []struct {
		name, clause, remote string
		in                   []string
		want                 map[string]string
	}{
		{"untrusted peer spoofing", "trusted_proxies: [10.0.0.0/8]", "192.0.2.1:1234",
			[]string{"X-Forwarded-For", "6.6.6.6", "Forwarded", "for=6.6.6.6", "X-Forwarded-Proto", "https", "X-Forwarded-Host", "evil.test"},
			map[string]string{"X-Forwarded-For": "192.0.2.1", "Forwarded": `for=192.0.2.1;host="edge.test";proto=http`,
				"X-Forwarded-Proto": "http", "X-Forwarded-Host": "edge.test", "Host": "edge.test"}},
		{"no headers", "", "[2001:db8::5]:1234", nil,
			map[string]string{"X-Forwarded-For": "2001:db8::5", "Forwarded": `for="[2001:db8::5]";host="edge.test";proto=http`, "X-Forwarded-Proto": "http"}},
		{"trusted proxy appended to", "trusted_proxies: [10.0.0.0/8]\nmax_forwarded_hops: 2", "10.0.0.9:1234",
			[]string{"X-Forwarded-For", "6.6.6.6, 198.51.100.7, 10.0.0.2", "Forwarded", "for=198.51.100.7", "X-Forwarded-Proto", "https"},
			map[string]string{"X-Forwarded-For": "198.51.100.7, 10.0.0.2, 10.0.0.9", "Forwarded": `for=198.51.100.7, for=10.0.0.9;host="edge.test";proto=http`,
				"X-Forwarded-Proto": "https", "X-Forwarded-Host": "edge.test"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := forwardSetup(t, tc.clause, ForwardConfig{}, up)
			r := req("GET", "http://edge.test/x", tc.in...)
			r.RemoteAddr = tc.remote
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if w.Code != 200 {
				t.Fatalf("status %d", w.Code)
			}
			got := <-seen
			for k, v := range tc.want {
				if g := strings.Join(got.Values(k), "|"); g != v {
					t.Errorf("upstream %s = %q, want %q", k, g, v)
				}
			}
		})
	}
}

func TestForwardStatus(t *testing.T) {
	if got := forwardStatus(t.Context(), errors.New("connection refused")); got != http.StatusBadGateway {
		t.Errorf("refused: %d", got)
	}
	if got := forwardStatus(t.Context(), &http.MaxBytesError{Limit: 1}); got != http.StatusRequestEntityTooLarge {
		t.Errorf("body: %d", got)
	}
	l, _ := New(storeConfig(memstore.New()))
	for _, u := range []string{"", "ftp://x", "http://"} {
		pu, _ := url.Parse(u)
		if _, err := l.Forwarder(pu, ForwardConfig{}); !errors.Is(err, ErrConfig) {
			t.Errorf("Forwarder(%q): %v, want ErrConfig", u, err)
		}
	}
}
