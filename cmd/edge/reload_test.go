//go:build unix

package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/poplimit/poplimit/bench/fixture"
)

// reloadPolicy limits the free key to QUANTITY requests a minute.
const reloadPolicy = `version: 1
headers: seed
api_key: {header: X-API-Key}
keys:
  - {key: k, tenant: t, tier: free}
tiers:
  free:
    limits:
      - {name: minute, algorithm: fixed_window, quantity: QUANTITY, window: 1m}
policies:
  - name: api
    routes: ["GET /api/{x}"]
    identity: [api_key]
    tier: api_key
    default_tier: free
`

// TestPolicyReload runs the edge binary and checks the daemon wiring: a
// policy file renamed over the old one is served, an invalid one keeps it
// (and /healthz says degraded), and SIGHUP reloads instead of killing the
// process.
func TestPolicyReload(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer upstream.Close()
	dir := t.TempDir()
	path := filepath.Join(dir, "policy.yml")
	write := func(doc string) {
		t.Helper()
		if err := os.WriteFile(path+".tmp", []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(path+".tmp", path); err != nil {
			t.Fatal(err)
		}
	}
	policy := func(q string) string { return strings.Replace(reloadPolicy, "QUANTITY", q, 1) }
	write(policy("10"))
	listen, admin := fixture.FreeAddr(t), fixture.FreeAddr(t)
	p := fixture.Start(t, fixture.Binary(t, "edge"), "--listen", listen, "--admin", admin,
		"--upstream", upstream.URL, "--policy", path)

	limit := func() string {
		req, _ := http.NewRequest("GET", "http://"+listen+"/api/a", nil)
		req.Header.Set("X-API-Key", "k")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return ""
		}
		resp.Body.Close()
		return resp.Header.Get("RateLimit-Limit")
	}
	health := func() string {
		resp, err := http.Get("http://" + admin + "/healthz")
		if err != nil {
			return ""
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !cond() {
			if p.Exited() {
				t.Fatalf("edge exited while waiting for %s", what)
			}
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitFor("the first policy", func() bool { return limit() == "10" })
	write(policy("20"))
	waitFor("the renamed policy", func() bool { return limit() == "20" })
	write("version: 1\ntiers: {}\n")
	waitFor("/healthz to say degraded", func() bool { return strings.Contains(health(), "degraded") })
	if got := limit(); got != "20" {
		t.Fatalf("an invalid policy replaced the old one: limit %q", got)
	}
	write(policy("30"))
	waitFor("the fixed policy", func() bool { return limit() == "30" })
	if err := syscall.Kill(p.Pid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // SIGHUP's default action would end the process
	if p.Exited() || limit() != "30" {
		t.Fatalf("after SIGHUP: exited %v, limit %q", p.Exited(), limit())
	}
}
