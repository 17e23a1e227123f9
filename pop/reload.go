package pop

import (
	"io"
	"net/http"
)

// The policy file is reloaded by LoadFile. When to call it (SIGHUP, a
// change on disk) is the daemon's business: cmd/edge wires
// cmd/internal/daemon.Watch to LoadFile.

// ReloadHandler is the admin endpoint: POST reloads path and answers 200
// "ok", or 422 with the validation errors (the old snapshot stays).
func (l *Limiter) ReloadHandler(path string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			http.Error(w, "POST only", http.StatusMethodNotAllowed)
			return
		}
		if err := l.LoadFile(path); err != nil {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			w.WriteHeader(http.StatusUnprocessableEntity)
			io.WriteString(w, "policy rejected, previous policy kept:\n"+err.Error()+"\n")
			return
		}
		io.WriteString(w, "ok\n")
	})
}
