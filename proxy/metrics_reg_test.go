package proxy_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/poplimit/poplimit/proxy"
)

// prometheusRegistry is what cmd/mcproxy registers: the proxy and the Go
// runtime collector, on an explicit registry.
func prometheusRegistry(t *testing.T, p *proxy.Proxy) *prometheus.Registry {
	t.Helper()
	reg := prometheus.NewRegistry()
	if err := reg.Register(p); err != nil {
		t.Fatal(err)
	}
	if err := reg.Register(collectors.NewGoCollector()); err != nil {
		t.Fatal(err)
	}
	return reg
}
