package proxy_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/poplimit/poplimit/bench/fixture"
	"github.com/poplimit/poplimit/bench/fixture/procs"
	"github.com/poplimit/poplimit/proxy"
)

// TestHealthzTellsTheTruth: /healthz over two real memcached shards is ok
// (200), degraded (200) with the shard stopped by SIGSTOP marked failing
// once a call to it timed out, ok again after SIGCONT and a success, and
// failing (503) once both shards are killed and their calls fail.
func TestHealthzTellsTheTruth(t *testing.T) {
	noLeaks(t)
	ms := fixture.Memcached(t, 2)
	s := spec("hz", ms[0].Addr, ms[1].Addr)
	s.Timeout = 200 * time.Millisecond
	p := newTestProxy(t, proxy.ProxyConfig{}, []proxy.PoolSpec{s})
	h, err := proxy.AdminHandler(proxy.AdminConfig{Proxy: p})
	if err != nil {
		t.Fatal(err)
	}
	admin := httptest.NewServer(h)
	defer admin.Close()
	health := func(wantCode int, want string) proxy.HealthReport {
		t.Helper()
		code, body := httpGet(t, admin.URL+"/healthz")
		var r proxy.HealthReport
		if err := json.Unmarshal([]byte(body), &r); err != nil {
			t.Fatalf("healthz body %q: %v", body, err)
		}
		if code != wantCode || r.Status != want {
			t.Fatalf("healthz: %d %s, want %d %s: %s", code, r.Status, wantCode, want, body)
		}
		return r
	}
	health(http.StatusOK, proxy.HealthOK)

	rt := p.Server("hz").Router()
	keyOn := func(i int) string {
		for n := 0; ; n++ {
			if k := "h" + strconv.Itoa(n); rt.Locate([]byte(k)) == i {
				return k
			}
		}
	}
	c := dialMC(t, "tcp", p.Addr("hz").String())
	get := func(i int) string {
		t.Helper()
		rep, err := c.do("get " + keyOn(i) + "\r\n")
		if err != nil {
			t.Fatal(err)
		}
		return rep
	}
	if err := ms[1].Pause(); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "memcached stopped", func() bool { return procs.Stopped(ms[1].Pid()) })
	if rep := get(1); !strings.HasPrefix(rep, "SERVER_ERROR") {
		_ = ms[1].Resume()
		t.Fatalf("get on a stopped shard: %q", rep)
	}
	r := health(http.StatusOK, proxy.HealthDegraded)
	if sh := r.Pools[0].Shards; sh[1].Status != proxy.HealthFailing || sh[0].Status != proxy.HealthOK || r.Pools[0].Live != 1 {
		t.Errorf("shards while one is stopped: %+v", r.Pools[0])
	}
	if err := ms[1].Resume(); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "stopped shard answers again", func() bool { return get(1) == "END\r\n" })
	// An ejected shard's keys are answered by the others meanwhile; the
	// shard itself is ok again once a probe or a call succeeds on it.
	waitUntil(t, "healthz ok again", func() bool {
		code, body := httpGet(t, admin.URL+"/healthz")
		var r proxy.HealthReport
		return code == http.StatusOK && json.Unmarshal([]byte(body), &r) == nil && r.Status == proxy.HealthOK
	})
	health(http.StatusOK, proxy.HealthOK)

	ms[0].Stop()
	ms[1].Stop()
	for i := range 2 {
		if rep := get(i); !strings.HasPrefix(rep, "SERVER_ERROR") {
			t.Fatalf("get on killed shard %d: %q", i, rep)
		}
	}
	health(http.StatusServiceUnavailable, proxy.HealthFailing)
}
