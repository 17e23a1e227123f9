package daemon

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"
)

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func TestServeHTTPServesUntilCancelled(t *testing.T) {
	var mu sync.Mutex
	addrs := map[string]string{}
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	servers := map[string]*http.Server{"proxy": {Addr: "127.0.0.1:0", Handler: ok}, "admin": {Addr: "127.0.0.1:0", Handler: ok}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	ready := make(chan struct{}, 2)
	go func() {
		done <- ServeHTTP(ctx, ServeConfig{Servers: servers, Logger: quiet(), Wrap: func(name string, ln net.Listener) net.Listener {
			mu.Lock()
			addrs[name] = ln.Addr().String()
			mu.Unlock()
			ready <- struct{}{}
			return ln
		}})
	}()
	for range 2 {
		<-ready
	}
	mu.Lock()
	defer mu.Unlock()
	for name, addr := range addrs {
		resp, err := http.Get("http://" + addr + "/")
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		resp.Body.Close()
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("ServeHTTP after cancel: %v, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("ServeHTTP did not return after cancel")
	}
	for name, addr := range addrs {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			t.Errorf("%s still accepts after ServeHTTP returned", name)
		}
	}
}

// TestServeHTTPListenError: a server that cannot listen is the error, and
// the listeners already open are closed (servers open in map order: eight
// rounds make "a opened first" all but certain).
func TestServeHTTPListenError(t *testing.T) {
	for range 8 {
		listenErrorRound(t)
	}
}

func listenErrorRound(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	busy := ln.Addr().String() // taken for the whole test
	defer ln.Close()
	free, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	freeAddr := free.Addr().String()
	free.Close()
	err = ServeHTTP(context.Background(), ServeConfig{Logger: quiet(), Servers: map[string]*http.Server{
		"a": {Addr: freeAddr}, "b": {Addr: busy},
	}})
	if err == nil {
		t.Fatal("no error with an address in use")
	}
	again, err := net.Listen("tcp", freeAddr)
	if err != nil {
		t.Fatalf("the listener opened before the failure was not closed: %v", err)
	}
	again.Close()
}

// failingListener fails every Accept with a permanent error.
type failingListener struct{ net.Listener }

var errAccept = errors.New("test: accept failed")

func (failingListener) Accept() (net.Conn, error) { return nil, errAccept }

func TestServeHTTPReturnsServerFailure(t *testing.T) {
	err := ServeHTTP(context.Background(), ServeConfig{Logger: quiet(),
		Servers: map[string]*http.Server{"a": {Addr: "127.0.0.1:0"}},
		Wrap:    func(_ string, ln net.Listener) net.Listener { return failingListener{ln} },
	})
	if !errors.Is(err, errAccept) {
		t.Fatalf("ServeHTTP: %v, want the accept error", err)
	}
}
