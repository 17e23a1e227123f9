package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestRetryAfterOfABurstAdmitsThroughFourEdges: four edge workers on
// default flags (one mcproxy, memcached shards), a limit of 5 per 10 s
// (a token bucket: one token per 2 s, burst 5) in both on_reject modes:
// one extra counted refusal moves a sliding window's or a bucket's
// admission by more than the rounding up to whole seconds absorbs. 300
// requests at one key, spread over the edges in turn, then one more: its
// Retry-After, RateLimit-Reset and the RateLimit field's t are the same
// seconds, and a client that waits exactly that long is admitted by
// another edge than the one that refused it.
func TestRetryAfterOfABurstAdmitsThroughFourEdges(t *testing.T) {
	env := newTestEnv(t, true)
	var b strings.Builder
	b.WriteString("version: 1\napi_key: {header: X-API-Key}\ntiers:\n")
	modes := []string{"count", "refund"}
	for _, a := range burstAlgorithms {
		for _, m := range modes {
			fmt.Fprintf(&b, "  %s-%s: {limits: [{name: l, algorithm: %s, quantity: 5, window: 10s, burst: 5, on_reject: %s}]}\n", a, m, a, m)
		}
	}
	b.WriteString("policies:\n")
	for _, a := range burstAlgorithms {
		for _, m := range modes {
			fmt.Fprintf(&b, "  - {name: %s-%s, routes: [\"GET /%s/%s\"], identity: [api_key], tier: %s-%s}\n", a, m, a, m, a, m)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p, err := env.Launch(ctx, PoPConfig{Name: "retry", Shards: 3, Proxies: 1, Edges: 4, Policy: []byte(b.String())})
	if err != nil {
		t.Fatal(err)
	}
	defer p.close()
	urls := p.EdgeURLs()
	client := &http.Client{Timeout: 10 * time.Second}
	defer client.CloseIdleConnections()
	get := func(url, key string) *http.Response {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("X-API-Key", key)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	for _, a := range burstAlgorithms {
		for _, m := range modes {
			t.Run(a+"/"+m, func(t *testing.T) {
				path := "/" + a + "/" + m
				key := fmt.Sprintf("retry-%s-%s-%d", a, m, time.Now().UnixNano())
				// Request 301 goes to the edge that refused first (its
				// block was decided on the fewest counts), the wait's end
				// to the next one.
				first := -1
				for i := range 300 {
					if get(urls[i%len(urls)]+path, key).StatusCode == http.StatusTooManyRequests && first < 0 {
						first = i % len(urls)
					}
				}
				if first < 0 {
					t.Fatal("300 requests at a limit of 5 and none refused")
				}
				resp := get(urls[first]+path, key)
				if resp.StatusCode != http.StatusTooManyRequests {
					t.Fatalf("request 301: status %d, want 429", resp.StatusCode)
				}
				ra := resp.Header.Get("Retry-After")
				s, err := strconv.Atoi(ra)
				if err != nil || s < 1 {
					t.Fatalf("Retry-After %q", ra)
				}
				if reset := resp.Header.Get("RateLimit-Reset"); reset != ra {
					t.Errorf("RateLimit-Reset %s with Retry-After %s", reset, ra)
				}
				if f, want := resp.Header.Get("RateLimit"), `"l";r=0;t=`+ra; f != want {
					t.Errorf("RateLimit %q, want %q", f, want)
				}
				time.Sleep(time.Duration(s) * time.Second)
				if got := get(urls[(first+1)%len(urls)]+path, key); got.StatusCode != http.StatusOK {
					t.Errorf("waited Retry-After %s s: status %d, Retry-After %s", ra, got.StatusCode, got.Header.Get("Retry-After"))
				}
			})
		}
	}
}
