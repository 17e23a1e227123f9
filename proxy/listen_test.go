package proxy_test

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/poplimit/poplimit/bench/fixture"
	"github.com/poplimit/poplimit/proxy"
)

func TestParseListen(t *testing.T) {
	cases := []struct {
		spec          string
		network, addr string
		mode          os.FileMode
		err           bool
	}{
		{spec: "127.0.0.1:22121", network: "tcp", addr: "127.0.0.1:22121"},
		{spec: "[::1]:22121", network: "tcp", addr: "[::1]:22121"},
		{spec: "/tmp/mc.sock 0666", network: "unix", addr: "/tmp/mc.sock", mode: 0o666},
		{spec: "/tmp/mc.sock", network: "unix", addr: "/tmp/mc.sock"},
		{spec: "unix:/tmp/mc.sock", network: "unix", addr: "/tmp/mc.sock"},
		{spec: "unix:/tmp/mc.sock 600", network: "unix", addr: "/tmp/mc.sock", mode: 0o600},
		{spec: "localhost", err: true},
		{spec: "unix:relative.sock", err: true},
		{spec: "/tmp/mc.sock 0999", err: true},
		{spec: "/tmp/mc.sock 01777", err: true},
		{spec: "/tmp/mc.sock 0666 extra", err: true},
	}
	for _, tc := range cases {
		t.Run(tc.spec, func(t *testing.T) {
			n, a, m, err := proxy.ParseListen(tc.spec)
			if tc.err {
				if !errors.Is(err, proxy.ErrConfig) {
					t.Fatalf("err = %v, want ErrConfig", err)
				}
				return
			}
			if err != nil || n != tc.network || a != tc.addr || m != tc.mode {
				t.Fatalf("= %q %q %o %v, want %q %q %o", n, a, m, err, tc.network, tc.addr, tc.mode)
			}
		})
	}
}

// TestUnixSocketPool serves a pool on a Unix socket with mode 0666 over a
// real memcached; a stale socket file is replaced, and the file is removed
// at shutdown.
func TestUnixSocketPool(t *testing.T) {
	noLeaks(t)
	ms := fixture.Memcached(t, 1)
	sock := filepath.Join(t.TempDir(), "mc.sock")
	stale, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	stale.(*net.UnixListener).SetUnlinkOnClose(false)
	_ = stale.Close() // leaves the file, like a crashed process
	s := spec("sock", ms[0].Addr)
	s.Listen = sock + " 0666"
	p := proxy.NewProxy(proxy.ProxyConfig{})
	if err := p.Reload([]proxy.PoolSpec{s}); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(sock)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o666 {
		t.Errorf("socket mode %v, want socket 0666", fi.Mode())
	}
	m := dialMC(t, "unix", sock)
	if rep, err := m.do("set u 0 0 2\r\nhi\r\n"); err != nil || rep != "STORED\r\n" {
		t.Fatalf("set: %q %v", rep, err)
	}
	if rep, _ := dialMC(t, "tcp", ms[0].Addr).do("get u\r\n"); rep != "VALUE u 0 2\r\nhi\r\nEND\r\n" {
		t.Fatalf("memcached has %q", rep)
	}
	// A second proxy cannot take a socket that is being served.
	if _, err := proxy.Listen(sock); err == nil {
		t.Errorf("Listen on a served socket succeeded")
	}
	shutdown(t, p)
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Errorf("socket file left after shutdown: %v", err)
	}
}

func shutdown(t *testing.T, p *proxy.Proxy) {
	t.Helper()
	ctx, cancel := contextTimeout(5 * time.Second)
	defer cancel()
	if err := p.Shutdown(ctx); err != nil {
		t.Errorf("shutdown: %v", err)
	}
}

// TestClientConnectionsLimit: beyond client_connections a client gets
// SERVER_ERROR and is closed; a slot freed is usable again; a reload
// raises the limit in place.
func TestClientConnectionsLimit(t *testing.T) {
	noLeaks(t)
	s := spec("lim", "e0")
	s.ClientConnections = 2
	p := newTestProxy(t, proxy.ProxyConfig{NewBackend: memoryBackend}, []proxy.PoolSpec{s})
	addr := p.Addr("lim").String()
	c1, c2 := dialMC(t, "tcp", addr), dialMC(t, "tcp", addr)
	for _, c := range []*mcConn{c1, c2} {
		if rep, err := c.do("version\r\n"); err != nil {
			t.Fatalf("version: %q %v", rep, err)
		}
	}
	c3 := dialMC(t, "tcp", addr)
	_ = c3.c.SetReadDeadline(time.Now().Add(5 * time.Second))
	got, err := io.ReadAll(c3.c)
	if err != nil || string(got) != "SERVER_ERROR too many client connections\r\n" {
		t.Fatalf("third client got %q, %v", got, err)
	}
	_ = c1.c.Close()
	srv := p.Server("lim")
	waitUntil(t, "client slot freed", func() bool {
		c := dialMC(t, "tcp", addr)
		rep, err := c.do("version\r\n")
		_ = c.c.Close()
		return err == nil && rep != "SERVER_ERROR too many client connections\r\n"
	})
	s.ClientConnections = 0
	if err := p.Reload([]proxy.PoolSpec{s}); err != nil {
		t.Fatal(err)
	}
	if n, _ := srv.ClientLimits(); n != 0 {
		t.Fatalf("limit after reload %d, want 0", n)
	}
	for range 3 {
		if rep, err := dialMC(t, "tcp", addr).do("version\r\n"); err != nil || rep[:8] != "VERSION " {
			t.Fatalf("no limit: %q %v", rep, err)
		}
	}
	if rep, err := c2.do("version\r\n"); err != nil {
		t.Fatalf("kept client: %q %v", rep, err)
	}
}

// TestClientIdleTimeout: an idle client is closed after client_timeout, a
// busy one is not.
func TestClientIdleTimeout(t *testing.T) {
	noLeaks(t)
	s := spec("idle", "e0")
	s.ClientTimeout = 300 * time.Millisecond
	p := newTestProxy(t, proxy.ProxyConfig{NewBackend: memoryBackend}, []proxy.PoolSpec{s})
	addr := p.Addr("idle").String()
	idle, busy := dialMC(t, "tcp", addr), dialMC(t, "tcp", addr)
	if _, err := idle.do("set a 0 0 1\r\n1\r\n"); err != nil {
		t.Fatal(err)
	}
	closed := make(chan error, 1)
	go func() {
		_ = idle.c.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, err := idle.br.ReadByte()
		closed <- err
	}()
	for {
		select {
		case err := <-closed:
			if !errors.Is(err, io.EOF) {
				t.Fatalf("idle client: %v, want EOF", err)
			}
			if rep, err := busy.do("get a\r\n"); err != nil || rep != "VALUE a 0 1\r\n1\r\nEND\r\n" {
				t.Fatalf("busy client closed too: %q %v", rep, err)
			}
			return
		case <-time.After(20 * time.Millisecond):
			if rep, err := busy.do("version\r\n"); err != nil {
				t.Fatalf("busy client closed: %q %v", rep, err)
			}
		}
	}
}

// waitUntil polls cond until it holds or 10s pass.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func contextTimeout(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), d)
}

// TestReloadUnixSocketMode: changing only the mode of a pool's socket keeps
// the socket (and its clients) and applies the mode.
func TestReloadUnixSocketMode(t *testing.T) {
	noLeaks(t)
	sock := filepath.Join(t.TempDir(), "mc.sock")
	s := spec("sock", "e0")
	s.Listen = sock + " 0600"
	p := newTestProxy(t, proxy.ProxyConfig{NewBackend: memoryBackend}, []proxy.PoolSpec{s})
	c := dialMC(t, "unix", sock)
	if rep, err := c.do("version\r\n"); err != nil {
		t.Fatalf("%q %v", rep, err)
	}
	s.Listen = "unix:" + sock + " 0660"
	if err := p.Reload([]proxy.PoolSpec{s}); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(sock); err != nil || fi.Mode().Perm() != 0o660 {
		t.Errorf("mode after reload: %v %v", fi.Mode(), err)
	}
	if rep, err := c.do("version\r\n"); err != nil {
		t.Fatalf("client after reload: %q %v", rep, err)
	}
}
