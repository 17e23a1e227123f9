package daemon

import (
	"log/slog"
	"net/http"
	"net/http/pprof"
)

// MountPprof serves net/http/pprof under /debug/pprof/ on mux (the
// daemons' --pprof flag, on their admin or HTTP listener only).
func MountPprof(mux *http.ServeMux, logger *slog.Logger) {
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	logger.Info("pprof on the admin listener", "path", "/debug/pprof/")
}
