package edgecmp

import (
	"strings"
	"testing"
	"time"
)

func TestParseWrkDoneLine(t *testing.T) {
	out := "Running 6s test @ http://127.0.0.1:1/\n  2 threads and 64 connections\nEDGECMP requests=1200 errors=3 p50=2500 p99=9100 p999=20000\nRequests/sec: 200\n"
	r, err := parseWrk(out)
	if err != nil {
		t.Fatal(err)
	}
	if r.Requests != 1200 || r.Errors != 3 || r.P50 != 2500*time.Microsecond || r.P99 != 9100*time.Microsecond || r.P999 != 20*time.Millisecond {
		t.Errorf("parseWrk: %+v", r)
	}
	if _, err := parseWrk("Requests/sec: 200\n"); err == nil {
		t.Error("no EDGECMP line: want an error")
	}
}

func TestNginxConfLimitsByAPIKey(t *testing.T) {
	c := nginxConf("/tmp/x", "127.0.0.1:1", "127.0.0.1:2", 2)
	for _, want := range []string{"worker_processes 2;", "limit_req_zone $http_x_api_key", "listen 127.0.0.1:1;", "server 127.0.0.1:2;", "pid /tmp/x/nginx.pid;", "limit_req zone=perkey"} {
		if !strings.Contains(c, want) {
			t.Errorf("nginx.conf lacks %q:\n%s", want, c)
		}
	}
}

func TestRatiosAreOfMedians(t *testing.T) {
	r := &report{Runs: []round{
		{Proxy: "edge", CPUPerRq: 100, RPS: 10, P99: 4},
		{Proxy: "nginx", CPUPerRq: 50, RPS: 20, P99: 2},
		{Proxy: "edge", CPUPerRq: 300, RPS: 30, P99: 8},
		{Proxy: "nginx", CPUPerRq: 50, RPS: 20, P99: 2},
	}}
	r.ratios()
	if r.CPURatio != 4 || r.RPSRatio != 1 || r.P99Ratio != 3 {
		t.Errorf("ratios: cpu %v rps %v p99 %v", r.CPURatio, r.RPSRatio, r.P99Ratio)
	}
}
