package proxy

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/poplimit/poplimit/proxy/embedded"
)

// ServeForTest serves r with a Server (logger nil: the server's default) on
// a loopback port and returns the server and its address. When the test
// ends it shuts the server down, checks that Serve returned
// ErrServerClosed, and closes r; r is closed on a setup failure too.
// Exported for this directory's external tests (package proxy_test).
func ServeForTest(t testing.TB, r *Router, logger *slog.Logger) (*Server, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		_ = r.Close()
		t.Fatal(err)
	}
	return serveListenerForTest(t, ln, ServerConfig{Router: r, Logger: logger}), ln.Addr().String()
}

// serveListenerForTest serves cfg (its Router is closed at the end, or on
// a setup failure) on ln until the test ends, as ServeForTest does.
func serveListenerForTest(t testing.TB, ln net.Listener, cfg ServerConfig) *Server {
	t.Helper()
	r := cfg.Router
	srv, err := NewServer(cfg)
	if err != nil {
		_ = r.Close()
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		if err := <-done; !errors.Is(err, ErrServerClosed) {
			t.Errorf("serve: %v", err)
		}
		_ = r.Close()
	})
	return srv
}

// EmbeddedForTest is an in-process shard served as a Backend, as mcproxy
// --embedded serves it: the shard's Execute and Store, the backend's Do,
// Close and Probe.
type EmbeddedForTest struct {
	*LocalBackend
	*embedded.Shard
}

// NewEmbeddedForTest returns a new, empty in-process shard configured by
// cfg, served with time.Now as its clock.
func NewEmbeddedForTest(cfg embedded.Config) (*EmbeddedForTest, error) {
	sh, err := embedded.New(cfg)
	if err != nil {
		return nil, err
	}
	return &EmbeddedForTest{NewLocalBackend(sh, nil), sh}, nil
}
