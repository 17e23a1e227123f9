package rls_test

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/poplimit/poplimit/pop"
	"github.com/poplimit/poplimit/pop/rls"
)

// /json answers a POSTed request as ShouldRateLimit does (200, then 429
// once over), a GET with 405 and how to call it, and a body that does not
// parse with 400 and the same usage.
func TestJSONEndpointAnswersPostsAndExplainsMistakes(t *testing.T) {
	lim, err := pop.New(pop.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := rls.NewService(rls.ServiceConfig{Limiter: lim, Clock: func() time.Time { return t0 }, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := rls.Parse(map[string][]byte{"d.yaml": []byte("domain: edge\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 1}\n")}, rls.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Load(cfg); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(svc.JSONHandler())
	defer srv.Close()
	const body = `{"domain":"edge","descriptors":[{"entries":[{"key":"user","value":"alice"}]}]}`
	for _, tc := range []struct {
		name, method, body string
		wantStatus         int
		wantBody           string
	}{
		{"first request", http.MethodPost, body, http.StatusOK, `"overallCode":"OK"`},
		{"over the limit", http.MethodPost, body, http.StatusTooManyRequests, `"overallCode":"OVER_LIMIT"`},
		{"a GET", http.MethodGet, "", http.StatusMethodNotAllowed, "POST a RateLimitRequest"},
		{"not JSON", http.MethodPost, "domain=edge", http.StatusBadRequest, "POST a RateLimitRequest"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequest(tc.method, srv.URL, strings.NewReader(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			got, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tc.wantStatus || !strings.Contains(strings.ReplaceAll(string(got), " ", ""), strings.ReplaceAll(tc.wantBody, " ", "")) {
				t.Fatalf("status %d body %q, want %d with %q", resp.StatusCode, got, tc.wantStatus, tc.wantBody)
			}
		})
	}
}
