package main

// The fasthttp core (--core fasthttp, the default): the proxied listener
// served and forwarded by github.com/valyala/fasthttp, decided by the same
// pop.Limiter as the net/http core. A pooled view (an http.Request of the
// fields pop reads) carries each request to the decision, so no
// http.Request is allocated per request.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"
	"github.com/valyala/fasthttp"

	"github.com/poplimit/poplimit/cmd/internal/daemon"
	"github.com/poplimit/poplimit/pop"
	"github.com/poplimit/poplimit/proxy/fastconn"
)

// fastConfig is the proxied listener's configuration under the fasthttp
// core: the flags of the net/http core, with the same meaning.
type fastConfig struct {
	Addr                                string
	MaxHeaderBytes                      int
	MaxBodyBytes                        int64
	ReadHeaderTimeout, ReadTimeout      time.Duration
	WriteTimeout, IdleTimeout           time.Duration
	DialTimeout, HeaderTimeout, Timeout time.Duration
	Logger                              *slog.Logger
	Upstream                            *url.URL
	AcceptErrors                        func(error)
	ShutdownTimeout                     time.Duration
}

// fastEdge serves the proxied listener: decide, answer, forward.
type fastEdge struct {
	l       *pop.Limiter
	up      *fasthttp.HostClient
	base    string // the upstream URL's escaped path, no trailing slash
	query   string // the upstream URL's raw query
	timeout time.Duration
	log     *slog.Logger
	views   sync.Pool
	strs    internTable
}

func newFastEdge(l *pop.Limiter, cfg fastConfig) (*fastEdge, error) {
	u := cfg.Upstream
	if u == nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, errors.New("--upstream: must be an absolute http(s) URL")
	}
	addr := u.Host
	if u.Port() == "" {
		addr = net.JoinHostPort(u.Hostname(), map[string]string{"http": "80", "https": "443"}[u.Scheme])
	}
	dial := cfg.DialTimeout
	e := &fastEdge{
		l: l, log: cfg.Logger, timeout: cfg.Timeout,
		base: strings.TrimSuffix(u.EscapedPath(), "/"), query: u.RawQuery,
		up: &fasthttp.HostClient{
			Addr:  addr,
			IsTLS: u.Scheme == "https",
			Dial: func(a string) (net.Conn, error) {
				c, err := (&net.Dialer{Timeout: dial, KeepAlive: 30 * time.Second}).Dial("tcp", a)
				if err != nil {
					return nil, err
				}
				return &upstreamConn{Conn: fastconn.New(c)}, nil // raw socket calls, as the store clients'
			},
			// The response body is streamed on as it arrives (the server
			// writes and closes ctx.Response's body stream); the header
			// timeout bounds each read, the total timeout the whole exchange.
			StreamResponseBody:            true,
			ReadTimeout:                   cfg.HeaderTimeout,
			WriteTimeout:                  cfg.Timeout,
			MaxConns:                      1 << 20, // no cap, as net/http's Transport
			MaxIdleConnDuration:           90 * time.Second,
			NoDefaultUserAgentHeader:      true,
			DisableHeaderNamesNormalizing: true,
			DisablePathNormalizing:        true,
			// A pooled connection the upstream closed while it sat idle
			// fails before any answer: a replayable request is sent again
			// on another connection, as net/http's Transport does. Nothing
			// else is retried (a timeout, or a request that may have had
			// an effect).
			MaxIdemponentCallAttempts: 4,
			RetryIfErr: func(req *fasthttp.Request, _ int, err error) (bool, bool) {
				return false, replayable(req) && closedBeforeAnswer(err)
			},
		},
	}
	e.views.New = func() any { return newView() }
	return e, nil
}

// server is the fasthttp server of the proxied listener: 431 beyond
// MaxHeaderBytes, 413 beyond MaxBodyBytes, slow clients cut by the read,
// write and idle timeouts.
func (e *fastEdge) server(cfg fastConfig) *fasthttp.Server {
	maxBody := cfg.MaxBodyBytes
	if maxBody < 0 || maxBody > 1<<31-1 {
		maxBody = 1<<31 - 1 // fasthttp always bounds a body
	}
	readBody := cfg.ReadTimeout
	return &fasthttp.Server{
		Handler:            e.serve,
		ErrorHandler:       fastError,
		ReadBufferSize:     cfg.MaxHeaderBytes,
		MaxRequestBodySize: int(maxBody),
		ReadTimeout:        cfg.ReadHeaderTimeout,
		WriteTimeout:       cfg.WriteTimeout,
		IdleTimeout:        cfg.IdleTimeout,
		HeaderReceived: func(*fasthttp.RequestHeader) fasthttp.RequestConfig {
			return fasthttp.RequestConfig{ReadTimeout: readBody}
		},
		NoDefaultServerHeader: true,
		NoDefaultContentType:  true,
		ReduceMemoryUsage:     true, // idle keep-alive connections hold no buffers
		TCPKeepalive:          true,
		CloseOnShutdown:       true,
		Logger:                fastLogger{cfg.Logger},
	}
}

// fastError answers a request the server could not read: 431 for headers
// over the buffer, 413 for a body over the limit, 408 on a read timeout,
// else 400.
func fastError(ctx *fasthttp.RequestCtx, err error) {
	var small *fasthttp.ErrSmallBuffer
	var ne net.Error
	if c, ok := ctx.Conn().(*clientConn); ok && !(errors.As(err, &ne) && ne.Timeout()) {
		c.refused.Store(true) // the client may still be sending: lingerClose
	}
	switch {
	case errors.As(err, &small):
		ctx.Error("request header fields too large", http.StatusRequestHeaderFieldsTooLarge)
	case errors.Is(err, fasthttp.ErrBodyTooLarge):
		ctx.Error("request body too large", http.StatusRequestEntityTooLarge)
	case errors.As(err, &ne) && ne.Timeout():
		ctx.Error("request timeout", http.StatusRequestTimeout)
	default:
		ctx.Error("bad request", http.StatusBadRequest)
	}
}

type fastLogger struct{ l *slog.Logger }

func (f fastLogger) Printf(format string, args ...any) {
	f.l.Warn("fasthttp", "msg", strings.TrimSpace(fmt.Sprintf(format, args...)))
}

// serve is one proxied request: the decision, the answer, the exchange
// with the upstream and the decision's finish.
func (e *fastEdge) serve(ctx *fasthttp.RequestCtx) {
	if ctx.IsOptions() && string(ctx.RequestURI()) == "*" {
		// About the server, not a resource: answered here, undecided,
		// as net/http's server does.
		ctx.Response.Header.SetContentLength(0)
		return
	}
	v := e.views.Get().(*view)
	defer e.views.Put(v)
	r := v.fill(ctx, &e.strs, e.l)
	if r == nil {
		ctx.Error("bad request: invalid escape in path", http.StatusBadRequest)
		return
	}
	r = e.l.Normalize(r)
	now := time.Now()
	d := e.l.Decide(context.Background(), r, now)
	w := v.writer(ctx)
	if !e.l.Answer(w, d) {
		w.flush()
		return
	}
	e.forward(ctx, v, r)
	w.addHeaders(&ctx.Response.Header)
	if d.Owed() {
		// Finished once the response is written, its streamed body
		// included (a concurrency slot is held until then): fasthttp
		// closes a request's io.Closer user values at that point, and when
		// the connection fails.
		ctx.SetUserValue(finishKey{}, &finisher{l: e.l, d: d, status: ctx.Response.StatusCode(), h: responseHeader(&ctx.Response.Header)})
	}
}

// finishKey is the user value key of a request's finisher.
type finishKey struct{}

// finisher calls Limiter.Finish for an admitted request when fasthttp
// closes it.
type finisher struct {
	l      *pop.Limiter
	d      pop.Decision
	status int
	h      http.Header
}

func (f *finisher) Close() error {
	f.l.Finish(context.Background(), f.d, time.Now(), f.status, f.h)
	return nil
}

// forwardingHeaders are the fields pop.SetForwarded writes: forwarded as
// it says, dropped when it writes none.
var forwardingHeaders = [...]string{"X-Forwarded-For", "Forwarded", "X-Forwarded-Proto", "X-Forwarded-Host"}

// dropHopFields deletes from h, keeping the other fields in order, the
// hop-by-hop fields, those its Connection field names, and also.
func (v *view) dropHopFields(h fieldSet, apart, also []string) {
	del := append(append(append(v.del[:0], hopHeaders...), connectionTokens(h.Peek("Connection"))...), also...)
	v.fields.delFields(h, apart, del)
	v.del = del[:0]
}

// hopHeaders are the hop-by-hop headers never forwarded (RFC 9110 7.6.1),
// as httputil.ReverseProxy's.
var hopHeaders = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

// forward sends the request, with r's canonical path under the
// upstream's base path and the forwarding headers of pop.SetForwarded, to
// the upstream and puts its response in ctx: 504 when a timeout expires,
// 502 when the upstream cannot be reached or answers nonsense.
func (e *fastEdge) forward(ctx *fasthttp.RequestCtx, v *view, r *http.Request) {
	req := &ctx.Request
	if !pop.Forwardable(string(req.Header.Method())) {
		ctx.Error(pop.NotForwardedBody+"\n", http.StatusMethodNotAllowed) // http.Error's body
		return
	}
	clientClose := req.Header.ConnectionClose()
	clear(v.out)
	e.l.SetForwarded(v.out, r)
	var absent [len(forwardingHeaders)]string
	unset := absent[:0]
	for _, h := range forwardingHeaders {
		if len(v.out[h]) == 0 {
			unset = append(unset, h)
		}
	}
	v.dropHopFields(&req.Header, requestApart, unset)
	req.Header.SetNoDefaultContentType(true) // no Content-Type the client did not send
	for _, h := range forwardingHeaders {
		if vals := v.out[h]; len(vals) > 0 {
			req.Header.Set(h, vals[0])
		}
	}
	v.uri = appendJoinedPath(v.uri[:0], e.base, r.URL.EscapedPath())
	q := ctx.URI().QueryString()
	if e.query != "" || len(q) > 0 {
		v.uri = append(v.uri, '?')
		v.uri = append(v.uri, e.query...)
		if e.query != "" && len(q) > 0 {
			v.uri = append(v.uri, '&')
		}
		v.uri = append(v.uri, q...)
	}
	req.SetRequestURIBytes(v.uri)
	if e.up.IsTLS {
		req.URI().SetScheme("https") // the client's request came in over http
	}
	if len(req.Header.Host()) == 0 {
		req.Header.SetHost(e.up.Addr)
	}
	req.UseHostHeader = true
	err := e.up.DoDeadline(req, &ctx.Response, time.Now().Add(e.timeout))
	if err != nil {
		ctx.Response.Reset()
		status := fastStatus(err)
		e.log.Warn("upstream", "status", status, "err", err)
		ctx.SetStatusCode(status)
	} else {
		ctx.Response.Header.SetProtocol(nil) // this hop's HTTP/1.1, not the upstream's version
		v.dropHopFields(&ctx.Response.Header, responseApart, nil)
	}
	if clientClose {
		ctx.SetConnectionClose()
	} else {
		ctx.Response.Header.ResetConnectionClose()
	}
}

// replayable reports whether req may be sent twice, by net/http's rule:
// GET, HEAD, OPTIONS and TRACE, or a request with an idempotency key.
func replayable(req *fasthttp.Request) bool {
	switch string(req.Header.Method()) {
	case fasthttp.MethodGet, fasthttp.MethodHead, fasthttp.MethodOptions, fasthttp.MethodTrace:
		return true
	}
	return len(req.Header.Peek("Idempotency-Key")) > 0 || len(req.Header.Peek("X-Idempotency-Key")) > 0
}

// closedBeforeAnswer reports whether err is the upstream's close or reset
// of the connection (not a timeout).
func closedBeforeAnswer(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, fasthttp.ErrConnectionClosed) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// fastStatus maps an upstream error to the status answered: 504 when a
// timeout expired, 502 otherwise.
func fastStatus(err error) int {
	var ne net.Error
	if errors.Is(err, fasthttp.ErrTimeout) || errors.Is(err, fasthttp.ErrDialTimeout) || errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout() {
		return http.StatusGatewayTimeout
	}
	return http.StatusBadGateway
}

// connectionTokens are the header names a Connection header lists.
func connectionTokens(v []byte) []string {
	if len(v) == 0 {
		return nil
	}
	var names []string
	for _, f := range bytes.Split(v, []byte{','}) {
		if f = bytes.TrimSpace(f); len(f) > 0 && !bytes.EqualFold(f, []byte("close")) && !bytes.EqualFold(f, []byte("keep-alive")) {
			names = append(names, string(f))
		}
	}
	return names
}

// appendJoinedPath appends base and path joined by one slash, as
// httputil.ReverseProxy's SetURL joins the upstream's path and the
// request's.
func appendJoinedPath(dst []byte, base, path string) []byte {
	dst = append(dst, base...)
	switch {
	case path == "":
		return append(dst, '/')
	case path[0] != '/':
		dst = append(dst, '/')
	}
	return append(dst, path...)
}

// responseHeader is h as an http.Header (for Limiter.Finish, which reads
// a limit's cost header there).
func responseHeader(h *fasthttp.ResponseHeader) http.Header {
	out := http.Header{}
	for k, v := range h.All() {
		out.Add(string(k), string(v))
	}
	return out
}

// serveFast serves the proxied listener with the fasthttp core until ctx
// ends, then shuts it down within cfg.ShutdownTimeout.
func serveFast(ctx context.Context, ln net.Listener, srv *fasthttp.Server, shutdown time.Duration) error {
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), shutdown)
	defer cancel()
	srv.ShutdownWithContext(sctx)
	return nil
}

// backoffListener retries failed accepts (EMFILE, ENFILE) after a pause,
// 5ms doubling to 1s, as http.Server does: fasthttp's server ends on any
// accept error but a timeout.
type backoffListener struct{ net.Listener }

func (l backoffListener) Accept() (net.Conn, error) {
	delay := 5 * time.Millisecond
	for {
		c, err := l.Listener.Accept()
		if err == nil {
			return &clientConn{Conn: fastconn.New(c)}, nil // raw socket calls, as the store clients'
		}
		if errors.Is(err, net.ErrClosed) {
			return c, err
		}
		time.Sleep(delay)
		delay = min(2*delay, time.Second)
	}
}

// runFast serves the proxied listener with the fasthttp core and the
// admin listener with net/http until ctx ends or either fails.
func runFast(ctx context.Context, c *cli.Context, logger *slog.Logger, l *pop.Limiter, upstream *url.URL, admin http.Handler, watch func(string, net.Listener) net.Listener) error {
	servers, err := newServers(c, logger, http.NotFoundHandler(), admin)
	if err != nil {
		return err
	}
	cfg := fastConfig{
		MaxHeaderBytes: c.Int("max-header-bytes"), MaxBodyBytes: c.Int64("max-body-bytes"),
		ReadHeaderTimeout: c.Duration("read-header-timeout"), ReadTimeout: c.Duration("read-timeout"),
		WriteTimeout: c.Duration("write-timeout"), IdleTimeout: c.Duration("idle-timeout"),
		DialTimeout: c.Duration("upstream-dial-timeout"), HeaderTimeout: c.Duration("upstream-header-timeout"),
		Timeout: c.Duration("upstream-timeout"), Logger: logger, Upstream: upstream,
	}
	e, err := newFastEdge(l, cfg)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", c.String("listen"))
	if err != nil {
		return err
	}
	logger.Info("listening", "listener", "proxy", "addr", ln.Addr().String(), "core", "fasthttp", "io_uring", fastconn.Uring())
	delete(servers, "proxy")
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	adminDone := make(chan error, 1)
	go func() {
		if len(servers) == 0 {
			<-ctx.Done()
			adminDone <- nil
			return
		}
		adminDone <- daemon.ServeHTTP(ctx, daemon.ServeConfig{Servers: servers, Logger: logger, Wrap: watch})
		cancel()
	}()
	err = serveFast(ctx, backoffListener{watch("proxy", ln)}, e.server(cfg), 5*time.Second)
	cancel()
	return errors.Join(err, <-adminDone)
}
