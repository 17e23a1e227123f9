package main

import (
	"bufio"
	"context"
	"errors"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"

	"github.com/poplimit/poplimit/pop"
	"github.com/poplimit/poplimit/pop/policy"
)

func TestUpstreamPathJoin(t *testing.T) {
	for _, tc := range []struct{ name, base, path, want string }{
		{"no base", "", "/a/b", "/a/b"},
		{"base", "/v1", "/a", "/v1/a"},
		{"empty path", "/v1", "", "/v1/"},
		{"root", "", "/", "/"},
		{"relative", "/v1", "a", "/v1/a"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := string(appendJoinedPath(nil, tc.base, tc.path)); got != tc.want {
				t.Errorf("appendJoinedPath(%q, %q) = %q, want %q", tc.base, tc.path, got, tc.want)
			}
		})
	}
}

func TestConnectionTokensAreDropped(t *testing.T) {
	got := connectionTokens([]byte("keep-alive, X-Secret ,close,Upgrade"))
	if !slices.Equal(got, []string{"X-Secret", "Upgrade"}) {
		t.Errorf("connectionTokens = %q", got)
	}
	if connectionTokens(nil) != nil {
		t.Error("no Connection header: want no tokens")
	}
}

type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }

var _ net.Error = timeoutErr{}

func TestUpstreamErrorStatus(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want int
	}{
		{"fasthttp timeout", fasthttp.ErrTimeout, http.StatusGatewayTimeout},
		{"dial timeout", fasthttp.ErrDialTimeout, http.StatusGatewayTimeout},
		{"deadline", context.DeadlineExceeded, http.StatusGatewayTimeout},
		{"net timeout", timeoutErr{}, http.StatusGatewayTimeout},
		{"refused", errors.New("connection refused"), http.StatusBadGateway},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := fastStatus(tc.err); got != tc.want {
				t.Errorf("fastStatus(%v) = %d, want %d", tc.err, got, tc.want)
			}
		})
	}
}

func TestUnreadableRequestStatus(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want int
	}{
		{"headers too large", &fasthttp.ErrSmallBuffer{}, http.StatusRequestHeaderFieldsTooLarge},
		{"body too large", fasthttp.ErrBodyTooLarge, http.StatusRequestEntityTooLarge},
		{"read timeout", timeoutErr{}, http.StatusRequestTimeout},
		{"garbage", errors.New("bad request line"), http.StatusBadRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var ctx fasthttp.RequestCtx
			fastError(&ctx, tc.err)
			if got := ctx.Response.StatusCode(); got != tc.want {
				t.Errorf("fastError(%v): %d, want %d", tc.err, got, tc.want)
			}
		})
	}
}

const viewDoc = `version: 1
api_key: {header: X-API-Key}
user_header: X-User
default_policy: p
tiers:
  t: {limits: [{name: q, algorithm: fixed_window, quantity: 10, window: 1m}]}
policies:
  - {name: p, identity: [api_key], tier: t}
`

// TestViewCarriesWhatDecideReads: the view of a fasthttp request has the
// method, host, path (escaped and not), query, peer and the headers pop
// reads, and none it does not.
func TestViewCarriesWhatDecideReads(t *testing.T) {
	l, err := pop.New(pop.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.LoadBytes("p.yml", []byte(viewDoc)); err != nil {
		t.Fatal(err)
	}
	var req fasthttp.Request
	req.Header.SetMethod("POST")
	req.SetRequestURI("/a%2Fb/c?x=1")
	req.Header.SetHost("edge.test")
	req.Header.Set("X-Api-Key", "k1")
	req.Header.Set("X-User", "u1")
	req.Header.Add("X-Forwarded-For", "1.2.3.4")
	req.Header.Add("X-Forwarded-For", "5.6.7.8")
	req.Header.Set("Cookie", "secret")
	var ctx fasthttp.RequestCtx
	ctx.Init(&req, &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 1000}, nil)
	var strs internTable
	v := newView()
	r := v.fill(&ctx, &strs, l)
	if r.Method != "POST" || r.Host != "edge.test" || r.URL.Path != "/a/b/c" || r.URL.RawPath != "/a%2Fb/c" || r.URL.RawQuery != "x=1" || r.RemoteAddr != "192.0.2.1:1000" {
		t.Errorf("view: %s %s %q %q %q %s", r.Method, r.Host, r.URL.Path, r.URL.RawPath, r.URL.RawQuery, r.RemoteAddr)
	}
	if pop.APIKey(r, policy.APIKeySource{Header: "X-API-Key"}) != "k1" || r.Header.Get("X-User") != "u1" || len(r.Header["X-Forwarded-For"]) != 2 || r.Header.Get("Cookie") != "" {
		t.Errorf("view headers: %v", r.Header)
	}
	req.SetRequestURI("/a%ZZ")
	ctx.Init(&req, &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 1000}, nil)
	if r := v.fill(&ctx, &strs, l); r != nil {
		t.Errorf("a path with an invalid escape has a view: %q", r.URL.Path)
	}
}

// TestDelFieldsKeepsOrder: deleting fields leaves the others, and the
// fields fasthttp keeps apart, as they were.
func TestDelFieldsKeepsOrder(t *testing.T) {
	var req fasthttp.Request
	if err := req.Read(bufio.NewReader(strings.NewReader("POST / HTTP/1.1\r\nHost: h\r\nX-A: 1\r\nKeep-Alive: 5\r\nContent-Type: text/plain\r\nX-A: 2\r\nX-B: 3\r\nTe: trailers\r\nX-A: 4\r\nContent-Length: 2\r\n\r\nhi"))); err != nil {
		t.Fatal(err)
	}
	var s fieldScratch
	s.delFields(&req.Header, requestApart, []string{"Keep-Alive", "Te", "Upgrade"})
	var got []string
	for k, v := range req.Header.All() {
		got = append(got, string(k)+"="+string(v))
	}
	want := []string{"Host=h", "Content-Length=2", "Content-Type=text/plain", "X-A=1", "X-A=2", "X-B=3", "X-A=4"}
	if !slices.Equal(got, want) {
		t.Errorf("fields %q, want %q", got, want)
	}
}
