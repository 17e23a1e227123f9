package pop

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"

	"github.com/poplimit/poplimit/counter/memstore"
)

func health(t *testing.T, l *Limiter) (int, HealthReport) {
	t.Helper()
	rec := httptest.NewRecorder()
	l.HealthHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/healthz", nil))
	var h HealthReport
	if err := json.Unmarshal(rec.Body.Bytes(), &h); err != nil {
		t.Fatalf("health body %q: %v", rec.Body, err)
	}
	return rec.Code, h
}

// TestHealthTellsTheTruth: failing (503) with no policy, ok once loaded,
// degraded with the reason while the file on disk is invalid and while the
// breaker is open, ok again once both recover.
func TestHealthTellsTheTruth(t *testing.T) {
	l, _ := New(storeConfig(memstore.New()))
	if code, h := health(t, l); code != 503 || h.Status != HealthFailing {
		t.Errorf("before load: %d %+v", code, h)
	}
	if err := l.LoadBytes("p.yml", []byte(minimalPolicy)); err != nil {
		t.Fatal(err)
	}
	if code, h := health(t, l); code != 200 || h.Status != HealthOK || len(h.Reasons) != 0 {
		t.Errorf("loaded: %d %+v", code, h)
	}
	if l.LoadBytes("p.yml", []byte("tiers: [")) == nil {
		t.Fatal("invalid file loaded")
	}
	if code, h := health(t, l); code != 200 || h.Status != HealthDegraded || len(h.Reasons) != 1 || !strings.Contains(h.Reasons[0], "p.yml:") {
		t.Errorf("invalid file: %d %+v", code, h)
	}
	l.LoadBytes("p.yml", []byte(minimalPolicy))
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	for i := 0; i < 50 && l.Breaker().State() == BreakerClosed; i++ {
		l.Breaker().Observe(t0, refused)
	}
	if code, h := health(t, l); code != 200 || h.Status != HealthDegraded || len(h.Reasons) != 1 || !strings.Contains(h.Reasons[0], "breaker") {
		t.Errorf("breaker %v: %d %+v", l.Breaker().State(), code, h)
	}
}

func TestRequireToken(t *testing.T) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	h := RequireToken("s3cret", ok)
	for _, tc := range []struct {
		auth string
		want int
	}{{"", 401}, {"Bearer wrong", 401}, {"s3cret", 401}, {"Bearer s3cret", 200}} {
		r := httptest.NewRequest("POST", "/reload", nil)
		if tc.auth != "" {
			r.Header.Set("Authorization", tc.auth)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		if rec.Code != tc.want {
			t.Errorf("Authorization %q: %d, want %d", tc.auth, rec.Code, tc.want)
		}
	}
	rec := httptest.NewRecorder()
	RequireToken("", ok).ServeHTTP(rec, httptest.NewRequest("POST", "/reload", nil))
	if rec.Code != 200 {
		t.Errorf("no token configured: %d", rec.Code)
	}
}

func TestIsLoopback(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:9090": true, "[::1]:9090": true, "localhost:1": true, "127.1.2.3:80": true,
		":9090": false, "0.0.0.0:9090": false, "[::]:80": false, "10.0.0.1:80": false, "nonsense": false,
	} {
		if got := IsLoopback(addr); got != want {
			t.Errorf("IsLoopback(%q) = %v, want %v", addr, got, want)
		}
	}
}
