package proxy

import (
	"encoding/json"
	"net/http"
	"net/http/pprof"

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
	// Pprof mounts net/http/pprof under /debug/pprof/ (off by default:
	// profiles expose the process's memory and cost CPU).
	Pprof bool
}

// AdminHandler serves:
//
//	/metrics     Prometheus text format (AdminConfig.Registry)
//	/healthz     per-shard health as JSON (Proxy.Health): 200 when ok or
//	             degraded (a shard ejected or failing), 503 when failing
//	             (a pool with no live shard)
//	/stats.json  Twemproxy's stats document (see Proxy.StatsJSON)
//	/debug/pprof/ net/http/pprof, only with AdminConfig.Pprof
func AdminHandler(cfg AdminConfig) (http.Handler, error) {
	reg := cfg.Registry
	if reg == nil {
		reg = prometheus.NewRegistry()
		if err := reg.Register(cfg.Proxy); err != nil {
			return nil, err
		}
	}
	mux := http.NewServeMux()
	// Uncompressed: the admin listener is loopback, and gzip's compressor
	// would be most of what an otherwise idle proxy allocates.
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg, DisableCompression: true}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		h := cfg.Proxy.Health()
		body, err := json.Marshal(h)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if h.Status == HealthFailing {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		_, _ = w.Write(append(body, '\n'))
	})
	mux.HandleFunc("GET /stats.json", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(cfg.Proxy.StatsJSON(cfg.Version))
	})
	if cfg.Pprof {
		mux.HandleFunc("GET /debug/pprof/", pprof.Index)
		mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	}
	return mux, nil
}
