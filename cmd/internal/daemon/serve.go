package daemon

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"time"
)

// ServeConfig configures ServeHTTP. Zero means default.
type ServeConfig struct {
	// Servers are the daemon's HTTP servers by listener name (required);
	// each listens on its Addr over TCP.
	Servers map[string]*http.Server
	// Wrap, when set, wraps each listener before it serves (e.g.
	// pop.WatchAccept to count failed accepts by listener name).
	Wrap func(name string, ln net.Listener) net.Listener
	// ShutdownTimeout is how long requests in flight may take once the
	// daemon stops; default 5s. Connections still open then are closed.
	ShutdownTimeout time.Duration
	// Logger receives "listening" with each listener's name and address;
	// default slog.Default().
	Logger *slog.Logger
}

func (c ServeConfig) shutdownTimeout() time.Duration {
	if c.ShutdownTimeout > 0 {
		return c.ShutdownTimeout
	}
	return 5 * time.Second
}

// ServeHTTP opens every server's listener (if one cannot listen, those
// already open are closed and its error returned), serves until ctx ends
// or a server fails, then shuts every server down within ShutdownTimeout.
// It returns the first server's failure, or nil when ctx ended.
func ServeHTTP(ctx context.Context, cfg ServeConfig) error {
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	lns := make(map[string]net.Listener, len(cfg.Servers))
	for name, s := range cfg.Servers {
		ln, err := net.Listen("tcp", s.Addr)
		if err != nil {
			for _, l := range lns {
				l.Close()
			}
			return err
		}
		log.Info("listening", "listener", name, "addr", ln.Addr().String())
		if cfg.Wrap != nil {
			ln = cfg.Wrap(name, ln)
		}
		lns[name] = ln
	}
	errc := make(chan error, len(lns))
	for name, ln := range lns {
		s := cfg.Servers[name]
		go func() { errc <- s.Serve(ln) }()
	}
	var err error
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	sctx, cancel := context.WithTimeout(context.Background(), cfg.shutdownTimeout())
	defer cancel()
	for _, s := range cfg.Servers {
		s.Shutdown(sctx)
	}
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}
