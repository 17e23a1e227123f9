package pop

// The forwarding headers the edge sends upstream.

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/poplimit/poplimit/pop/policy"
)

// ForwardConfig configures Limiter.Forwarder. Zero means default.
type ForwardConfig struct {
	// DialTimeout bounds connecting to the upstream; default 5s.
	DialTimeout time.Duration
	// ResponseHeaderTimeout bounds the wait for the upstream's response
	// headers once the request is written; default 30s.
	ResponseHeaderTimeout time.Duration
	// Timeout bounds one whole upstream exchange, from the dial to the
	// last byte of the response body; default 60s. A response whose
	// headers were already sent is cut short (its client sees a truncated
	// body); otherwise the client gets 504.
	Timeout time.Duration
	// MaxBodyBytes is the largest request body forwarded; a longer one is
	// answered 413 (at once when Content-Length says so, else when the
	// limit is crossed). Default 10 MiB; negative: no limit.
	MaxBodyBytes int64
	// MaxIdleConns bounds idle upstream connections kept; default 1024.
	MaxIdleConns int
	// Logger logs upstream errors (rate-limited by nothing: one line per
	// failed request); default slog.Default().
	Logger *slog.Logger
}

func (c ForwardConfig) dialTimeout() time.Duration { return orDefault(c.DialTimeout, 5*time.Second) }
func (c ForwardConfig) headerTimeout() time.Duration {
	return orDefault(c.ResponseHeaderTimeout, 30*time.Second)
}
func (c ForwardConfig) timeout() time.Duration { return orDefault(c.Timeout, 60*time.Second) }

func (c ForwardConfig) maxBody() int64 {
	if c.MaxBodyBytes == 0 {
		return 10 << 20
	}
	return c.MaxBodyBytes
}

func orDefault(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

// Forwarder returns a reverse proxy to upstream (scheme://host[/base]) for
// requests the limiter admitted: bounded in time (ForwardConfig's dial,
// response-header and total timeouts, 504 when one expires) and in body
// size (413), with the forwarding headers rewritten by SetForwarded. The
// Host header is passed on unchanged. Put it behind Middleware, which also
// hands it the canonical path.
func (l *Limiter) Forwarder(upstream *url.URL, cfg ForwardConfig) (http.Handler, error) {
	if upstream == nil || upstream.Host == "" || (upstream.Scheme != "http" && upstream.Scheme != "https") {
		return nil, errors.Join(ErrConfig, errors.New("pop: upstream must be an absolute http(s) URL"))
	}
	if cfg.DialTimeout < 0 || cfg.ResponseHeaderTimeout < 0 || cfg.Timeout < 0 || cfg.MaxIdleConns < 0 {
		return nil, errors.Join(ErrConfig, errors.New("pop: negative forwarding timeout or MaxIdleConns"))
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.Default()
	}
	idle := cfg.MaxIdleConns
	if idle == 0 {
		idle = 1024
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(upstream)
			pr.Out.Host = pr.In.Host
			l.SetForwarded(pr.Out.Header, pr.In)
		},
		Transport: &http.Transport{
			Proxy:                 nil,
			DialContext:           (&net.Dialer{Timeout: cfg.dialTimeout(), KeepAlive: 30 * time.Second}).DialContext,
			ResponseHeaderTimeout: cfg.headerTimeout(),
			MaxIdleConns:          idle,
			MaxIdleConnsPerHost:   idle,
			IdleConnTimeout:       90 * time.Second,
			// The client's Accept-Encoding goes as it came: no gzip asked
			// for it and inflated here.
			DisableCompression: true,
		},
		BufferPool: copyBuffers,
		ErrorLog:   slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			status := forwardStatus(r.Context(), err)
			if status != statusClientClosed {
				logger.Warn("upstream", "status", status, "err", err)
			}
			w.WriteHeader(status)
		},
	}
	maxBody, timeout := cfg.maxBody(), cfg.timeout()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !Forwardable(r.Method) {
			http.Error(w, NotForwardedBody, http.StatusMethodNotAllowed)
			return
		}
		if maxBody > 0 && r.Body != nil && r.Body != http.NoBody {
			if r.ContentLength > maxBody {
				http.Error(w, "request body too large", http.StatusRequestEntityTooLarge)
				return
			}
			r.Body = http.MaxBytesReader(w, r.Body, maxBody)
		}
		ctx, cancel := context.WithTimeout(r.Context(), timeout)
		defer cancel()
		rp.ServeHTTP(w, r.WithContext(ctx))
	}), nil
}

// Forwardable reports whether a request with method is forwarded to the
// upstream: every method but CONNECT, which asks a forward proxy for a
// tunnel; a reverse proxy answers it 405, as nginx does.
func Forwardable(method string) bool { return method != http.MethodConnect }

// NotForwardedBody is the body of the 405 answered to a request that is
// not Forwardable.
const NotForwardedBody = "method not allowed"

// copyBuffers lends ReverseProxy its response copy buffers, which it
// would otherwise allocate (32 KiB) per request.
var copyBuffers httputil.BufferPool = &bufferPool{}

type bufferPool struct{ p sync.Pool }

func (b *bufferPool) Get() []byte {
	if v, ok := b.p.Get().(*[]byte); ok {
		return *v
	}
	return make([]byte, 32<<10)
}

func (b *bufferPool) Put(buf []byte) { b.p.Put(&buf) }

// forwardStatus maps an upstream error to the status answered: 413 for a
// body over the limit, 504 when a timeout expired, 499 when the client
// went away, 502 otherwise.
func forwardStatus(ctx context.Context, err error) int {
	var mbe *http.MaxBytesError
	var ne net.Error
	switch {
	case errors.As(err, &mbe):
		return http.StatusRequestEntityTooLarge
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return http.StatusGatewayTimeout
	case errors.Is(err, context.Canceled) && ctx.Err() == context.Canceled:
		return statusClientClosed
	}
	return http.StatusBadGateway
}

// SetForwarded writes out's X-Forwarded-For, Forwarded, X-Forwarded-Proto
// and X-Forwarded-Host for a request in received from its peer. From a
// peer outside the policy file's trusted_proxies, whatever the client sent
// is replaced: X-Forwarded-For is the peer's address, Forwarded one
// element for=peer;host=;proto=, and the proto and host are those of this
// hop. From a trusted proxy, the chains it sent are kept (their rightmost
// max_forwarded_hops entries, so the header forwarded stays bounded) and
// the peer appended, and its X-Forwarded-Proto/-Host are kept. An
// unparsable peer address removes the chains.
func (l *Limiter) SetForwarded(out http.Header, in *http.Request) {
	var trusted policy.TrustedProxies
	maxHops := policy.DefaultMaxForwardedHops
	if s := l.snap.Load(); s != nil {
		trusted, maxHops = s.file.TrustedProxies, s.file.MaxHops()
	}
	peer := parseHostAddr(in.RemoteAddr)
	proto := "http"
	if in.TLS != nil {
		proto = "https"
	}
	trust := peer.IsValid() && trusted.Contains(peer)
	setOrKeep := func(name, v string) {
		if trust {
			if prior := in.Header.Get(name); prior != "" {
				out.Set(name, prior)
				return
			}
		}
		out.Set(name, v)
	}
	setOrKeep("X-Forwarded-Proto", proto)
	setOrKeep("X-Forwarded-Host", in.Host)
	if !peer.IsValid() {
		out.Del("X-Forwarded-For")
		out.Del("Forwarded")
		return
	}
	var xff, fwd string
	if trust {
		xff = lastHops(in.Header["X-Forwarded-For"], maxHops)
		fwd = lastHops(in.Header["Forwarded"], maxHops)
	}
	out.Set("X-Forwarded-For", joinHop(xff, peer.String()))
	out.Set("Forwarded", joinHop(fwd, forwardedElement(peer, in.Host, proto)))
}

func joinHop(chain, hop string) string {
	if chain == "" {
		return hop
	}
	return chain + ", " + hop
}

// lastHops is the rightmost n comma-separated entries of lines, in order,
// stopping at an entry longer than 256 bytes.
func lastHops(lines []string, n int) string {
	h := hopsFromRight{lines: lines, i: len(lines) - 1, rest: lastOf(lines)}
	var rev []string
	for len(rev) < n {
		e, ok := h.next()
		if !ok || len(e) > maxHopBytes {
			break
		}
		rev = append(rev, e)
	}
	for i, j := 0, len(rev)-1; i < j; i, j = i+1, j-1 {
		rev[i], rev[j] = rev[j], rev[i]
	}
	return strings.Join(rev, ", ")
}

// forwardedElement is an RFC 7239 element for one hop (IPv6 addresses
// quoted and bracketed, host always quoted).
func forwardedElement(peer netip.Addr, host, proto string) string {
	f := peer.String()
	if peer.Is6() {
		f = `"[` + f + `]"`
	}
	e := "for=" + f
	if host != "" && !strings.ContainsAny(host, "\"\\\r\n") {
		e += `;host="` + host + `"`
	}
	return e + ";proto=" + proto
}
