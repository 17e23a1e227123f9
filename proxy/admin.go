package proxy

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// AdminConfig configures AdminHandler.
type AdminConfig struct {
	// Proxy is the proxy reported on (required).
	Proxy *Proxy
	// Registry is the explicit registry /metrics serves; the caller
	// registers Proxy (and e.g. Go/process collectors) on it. Nil: a new
	// registry with only the Proxy.
	Registry *prometheus.Registry
	// Version is the "version" of /stats.json.
	Version string
}

// AdminHandler serves:
//
//	/metrics     Prometheus text format (AdminConfig.Registry)
//	/healthz     200 "ok" when every pool has a live shard, else 503 and why
//	/stats.json  Twemproxy's stats document (see Proxy.StatsJSON)
func AdminHandler(cfg AdminConfig) (http.Handler, error) {
	reg := cfg.Registry
	if reg == nil {
		reg = prometheus.NewRegistry()
		if err := reg.Register(cfg.Proxy); err != nil {
			return nil, err
		}
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		ok, why := cfg.Proxy.Healthy()
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if !ok {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		_, _ = w.Write([]byte(why + "\n"))
	})
	mux.HandleFunc("GET /stats.json", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(cfg.Proxy.StatsJSON(cfg.Version))
	})
	return mux, nil
}
