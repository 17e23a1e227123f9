package pop

// The admin endpoints: health and reload.

import (
	"crypto/subtle"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"time"
)

// Health states, the "status" of a HealthReport.
const (
	HealthOK       = "ok"       // policy loaded from the current file, breaker closed
	HealthDegraded = "degraded" // serving, but the last policy load failed or the store breaker is not closed
	HealthFailing  = "failing"  // no policy loaded: nothing is limited
)

// HealthReport is the state /healthz reports.
type HealthReport struct {
	Status  string   `json:"status"`
	Reasons []string `json:"reasons,omitempty"`
}

// Health reports the limiter's state: failing with no policy; degraded
// when the last load of the policy file failed (the previous policy is
// still enforced, but the file on disk is not what runs) or the store
// breaker is open or half-open (decisions follow the fail modes); ok
// otherwise.
func (l *Limiter) Health() HealthReport {
	var h HealthReport
	if !l.Loaded() {
		h.Reasons = append(h.Reasons, ErrNoPolicy.Error())
	}
	if err := l.LastLoadError(); err != nil {
		msg, _, _ := strings.Cut(err.Error(), "\n")
		h.Reasons = append(h.Reasons, "policy: last load failed, previous policy kept: "+msg)
	}
	if st := l.breaker.State(); st != BreakerClosed {
		h.Reasons = append(h.Reasons, "store breaker "+st.String())
	}
	if l.cfg.HealthReasons != nil {
		h.Reasons = append(h.Reasons, l.cfg.HealthReasons()...)
	}
	switch {
	case !l.Loaded():
		h.Status = HealthFailing
	case len(h.Reasons) > 0:
		h.Status = HealthDegraded
	default:
		h.Status = HealthOK
	}
	return h
}

// HealthHandler answers Health as JSON: 200 when ok or degraded (the
// worker serves; degraded says what is wrong), 503 when failing.
func (l *Limiter) HealthHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := l.Health()
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		if h.Status == HealthFailing {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		json.NewEncoder(w).Encode(h)
	})
}

// RequireToken guards h: a request must carry "Authorization: Bearer
// <token>" (compared in constant time) or is answered 401. An empty token
// guards nothing.
func RequireToken(token string, h http.Handler) http.Handler {
	if token == "" {
		return h
	}
	want := []byte("Bearer " + token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="edge admin"`)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// IsLoopback reports whether a listen address ("host:port") binds only
// loopback interfaces; "" and ":port" (every interface) do not.
func IsLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	a := parseHostAddr(host)
	return a.IsValid() && a.IsLoopback()
}

// AcceptWatch configures WatchAccept. Zero means default.
type AcceptWatch struct {
	// Count is called for every failed Accept (a metric); may be nil.
	Count func(err error)
	// Logger logs failed accepts, at most one line per LogEvery (default
	// 1s) with the number suppressed; default slog.Default().
	Logger   *slog.Logger
	LogEvery time.Duration
}

// WatchAccept wraps ln so that every failed Accept is counted and logged
// (rate-limited). The error is still returned: http.Server.Serve backs off
// (5ms doubling to 1s) on temporary errors, which include EMFILE and
// ENFILE, and keeps serving the connections it has, so a file-descriptor
// flood pauses accepting instead of ending the server.
func WatchAccept(ln net.Listener, w AcceptWatch) net.Listener {
	if w.Logger == nil {
		w.Logger = slog.Default()
	}
	if w.LogEvery <= 0 {
		w.LogEvery = time.Second
	}
	return &watchedListener{Listener: ln, w: w}
}

type watchedListener struct {
	net.Listener
	w          AcceptWatch
	lastLog    atomic.Int64 // unix ns
	suppressed atomic.Int64
}

func (l *watchedListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil && !errors.Is(err, net.ErrClosed) {
		if l.w.Count != nil {
			l.w.Count(err)
		}
		now := time.Now().UnixNano()
		if last := l.lastLog.Load(); now-last >= int64(l.w.LogEvery) && l.lastLog.CompareAndSwap(last, now) {
			l.w.Logger.Warn("accept failed; backing off", "addr", l.Addr().String(), "err", err, "suppressed", l.suppressed.Swap(0))
		} else {
			l.suppressed.Add(1)
		}
	}
	return c, err
}

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
