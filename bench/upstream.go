package bench

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"sync/atomic"
	"time"
)

// upstreamServer is the origin HTTP server behind the edge workers: it answers
// 200 "ok" to everything and counts what reached it.
type upstreamServer struct {
	// URL is its base URL.
	URL  string
	srv  *http.Server
	hits atomic.Int64
}

// StartUpstream listens on a free loopback port.
func startUpstream() (*upstreamServer, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("bench: upstream listen: %w", err)
	}
	u := &upstreamServer{URL: "http://" + ln.Addr().String()}
	u.srv = &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			u.hits.Add(1)
			_, _ = w.Write([]byte("ok\n"))
		}),
		ReadHeaderTimeout: 5 * time.Second,
	}
	go func() { _ = u.srv.Serve(ln) }()
	return u, nil
}

// Hits returns the number of requests that reached the upstream.
func (u *upstreamServer) hitCount() int64 { return u.hits.Load() }

// Close stops the server.
func (u *upstreamServer) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return u.srv.Shutdown(ctx)
}
