package main

// The request view of the fasthttp core: the fields of an http.Request
// that pop's decision reads, filled from a fasthttp request into pooled
// storage, and the http.ResponseWriter pop answers through.

import (
	"bytes"
	"net/http"
	"net/url"
	"sync"

	"github.com/valyala/fasthttp"

	"github.com/poplimit/poplimit/pop"
)

// view is one request's pooled storage. Its strings outlive the request
// only when interned (method, host, path): the route cache keeps them.
type view struct {
	req    http.Request
	url    url.URL
	hdr    http.Header // the request headers pop reads
	out    http.Header // the forwarding headers pop.SetForwarded writes
	names  []string    // pop.Limiter.RequestHeaders
	uri    []byte      // the upstream request URI
	del    []string    // the fields forward deletes (delFields)
	fields fieldScratch
	w      fastWriter
}

func newView() *view {
	return &view{hdr: http.Header{}, out: http.Header{}, w: fastWriter{h: http.Header{}}}
}

// fill makes v's request the view of ctx's, for l's current policy; nil
// when the path has an invalid percent-escape.
func (v *view) fill(ctx *fasthttp.RequestCtx, strs *internTable, l *pop.Limiter) *http.Request {
	r, u := &v.req, &v.url
	*u = url.URL{}
	raw := ctx.URI().PathOriginal()
	if i := bytes.IndexByte(raw, '?'); i >= 0 {
		raw = raw[:i]
	}
	u.Path = strs.get(raw)
	if bytes.IndexByte(raw, '%') >= 0 {
		p, err := url.PathUnescape(u.Path)
		if err != nil {
			return nil // an invalid escape: net/http's server answers 400
		}
		u.Path, u.RawPath = p, strs.get(raw)
	}
	if q := ctx.URI().QueryString(); len(q) > 0 {
		u.RawQuery = string(q)
	}
	for k, vals := range v.hdr {
		v.hdr[k] = vals[:0]
	}
	v.names = l.RequestHeaders(v.names[:0])
	for k, val := range ctx.Request.Header.All() {
		for _, name := range v.names {
			if bytes.EqualFold(k, []byte(name)) {
				v.hdr[name] = append(v.hdr[name], string(val))
				break
			}
		}
	}
	*r = http.Request{
		Method: strs.get(ctx.Method()), Host: strs.get(ctx.Host()), URL: u,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: v.hdr, RemoteAddr: ctx.RemoteAddr().String(),
	}
	if ctx.IsTLS() {
		r.TLS = ctx.TLSConnectionState()
	}
	return r
}

// writer is v's response writer for ctx, with no header set.
func (v *view) writer(ctx *fasthttp.RequestCtx) *fastWriter {
	clear(v.w.h)
	v.w.ctx = ctx
	return &v.w
}

// fastWriter is the http.ResponseWriter pop.Limiter.Answer writes on:
// headers gather in h until flush (a rejection) or addHeaders (an
// admitted request, after the upstream's response).
type fastWriter struct {
	ctx    *fasthttp.RequestCtx
	h      http.Header
	status int
	body   []byte
}

func (w *fastWriter) Header() http.Header { return w.h }

func (w *fastWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
}

func (w *fastWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	w.body = append(w.body, b...)
	return len(b), nil
}

// flush sends what was written as ctx's response.
func (w *fastWriter) flush() {
	w.ctx.Response.Reset()
	w.addHeaders(&w.ctx.Response.Header)
	w.ctx.SetStatusCode(max(w.status, http.StatusOK))
	w.ctx.SetBody(w.body)
	w.status, w.body = 0, w.body[:0]
}

// addHeaders adds the headers set on w to h.
func (w *fastWriter) addHeaders(h *fasthttp.ResponseHeader) {
	for k, vals := range w.h {
		for _, val := range vals {
			h.Add(k, val)
		}
	}
}

// internTableEntries bounds an internTable: beyond it, strings are
// allocated every time (a scan of random paths cannot grow memory).
const internTableEntries = 4096

// internTable hands out one string per distinct byte string it has seen,
// so the usual methods, hosts and paths cost no allocation per request.
type internTable struct {
	mu sync.RWMutex
	m  map[string]string
}

func (t *internTable) get(b []byte) string {
	t.mu.RLock()
	s, ok := t.m[string(b)]
	t.mu.RUnlock()
	if ok {
		return s
	}
	s = string(b)
	t.mu.Lock()
	if t.m == nil {
		t.m = make(map[string]string)
	}
	if len(t.m) < internTableEntries {
		t.m[s] = s
	}
	t.mu.Unlock()
	return s
}

var _ http.ResponseWriter = (*fastWriter)(nil)
