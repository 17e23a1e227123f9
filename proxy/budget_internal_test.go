package proxy

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/poplimit/poplimit/shard"
)

// holdBackend keeps every call until release; it reports each call on got.
type holdBackend struct {
	mu     sync.Mutex
	calls  []*Call
	closed bool
	got    chan struct{}
}

func (b *holdBackend) Do(c *Call) {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		c.Finish(ErrBackendClosed)
		return
	}
	b.calls = append(b.calls, c)
	b.mu.Unlock()
	select {
	case b.got <- struct{}{}:
	default:
	}
}

// release finishes the calls held so far with STORED.
func (b *holdBackend) release() {
	b.mu.Lock()
	calls := b.calls
	b.calls = nil
	b.mu.Unlock()
	for _, c := range calls {
		c.Reply = append(c.Reply, "STORED\r\n"...)
		c.Finish(nil)
	}
}

func (b *holdBackend) Close() error {
	b.mu.Lock()
	b.closed = true
	b.mu.Unlock()
	b.release()
	return nil
}

// serveBackend serves a one-shard Router over b with the client byte
// budget, on a loopback port; the server, then the backend, are closed at
// the end of the test (a backend holding calls must finish them for
// Shutdown to end).
func serveBackend(t *testing.T, b Backend, budget int64) string {
	t.Helper()
	r, err := NewRouter(RouterConfig{
		Servers:    []shard.Server{{Addr: "test:1"}},
		NewBackend: func(int, shard.Server, BackendHooks) (Backend, error) { return b, nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	srv, addr := listenServer(t, ServerConfig{Router: r, MaxClientBytes: budget})
	t.Cleanup(func() {
		_ = b.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		_ = r.Close()
	})
	return addr
}

// listenServer serves cfg on a free loopback port; the caller shuts it
// down.
func listenServer(t *testing.T, cfg ServerConfig) (*Server, string) {
	t.Helper()
	srv, err := NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	return srv, ln.Addr().String()
}

// TestClientByteBudget: while the backend holds a client's big sets, the
// proxy stops reading that client once MaxClientBytes are in flight; small
// requests are bounded by MaxPipeline only. Every request is answered once
// the backend lets go.
func TestClientByteBudget(t *testing.T) {
	tests := []struct {
		name          string
		budget        int64
		value, count  int
		wantMaxHeld   int // most calls the backend may see before a release
		wantAllAtOnce bool
	}{
		{"big values stop at the budget", 1 << 20, 100 << 10, 40, 1<<20/(100<<10) + 1, false},
		{"small values ignore it", 1 << 20, 100, 200, 200, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := &holdBackend{got: make(chan struct{}, tt.count)}
			addr := serveBackend(t, b, tt.budget)
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(20 * time.Second))
			go func() {
				v := strings.Repeat("v", tt.value)
				bw := bufio.NewWriter(c)
				for i := 0; i < tt.count; i++ {
					fmt.Fprintf(bw, "set k%d 0 0 %d\r\n%s\r\n", i, tt.value, v)
				}
				_ = bw.Flush()
			}()
			seen := 0
			for seen < tt.wantMaxHeld {
				<-b.got
				seen++
			}
			if tt.wantAllAtOnce {
				if seen != tt.count {
					t.Fatalf("backend saw %d of %d small sets", seen, tt.count)
				}
			} else {
				// The reader must now be paused: no more calls arrive
				// while nothing is answered (bounded negative check).
				select {
				case <-b.got:
					t.Fatalf("backend got call %d with %d bytes in flight, budget %d",
						seen+1, (seen+1)*tt.value, tt.budget)
				case <-time.After(200 * time.Millisecond):
				}
			}
			// Release until every set has reached the backend; all are
			// answered, in order.
			br := bufio.NewReader(c)
			for seen < tt.count {
				b.release()
				<-b.got
				seen++
			}
			b.release()
			for i := 0; i < tt.count; i++ {
				line, err := br.ReadString('\n')
				if err != nil || line != "STORED\r\n" {
					t.Fatalf("reply %d: %q, %v", i, line, err)
				}
			}
		})
	}
}

// valueBackend answers every get at once with one value of size bytes.
type valueBackend struct {
	size int
	got  chan struct{}
}

func (b *valueBackend) Do(c *Call) {
	c.Reply = fmt.Appendf(c.Reply, "VALUE %s 0 %d\r\n", c.Req.Keys[0], b.size)
	c.Reply = append(c.Reply, strings.Repeat("v", b.size)...)
	c.Reply = append(c.Reply, "\r\nEND\r\n"...)
	c.Finish(nil)
	b.got <- struct{}{}
}

func (b *valueBackend) Close() error { return nil }

// TestClientByteBudgetReplies: big replies count against MaxClientBytes
// too. A client that pipelines gets of big values and does not read makes
// the proxy stop reading it once the replies it holds exceed the budget
// (plus what the sockets and the output buffer take), instead of holding
// every reply in memory; all are answered once the client reads.
func TestClientByteBudgetReplies(t *testing.T) {
	const value, count = 100 << 10, 400 // 40 MiB of replies
	b := &valueBackend{size: value, got: make(chan struct{}, count)}
	addr := serveBackend(t, b, 1<<20)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.(*net.TCPConn).SetReadBuffer(64 << 10)
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	go func() {
		bw := bufio.NewWriter(c)
		for i := 0; i < count; i++ {
			fmt.Fprintf(bw, "get k%d\r\n", i)
		}
		_ = bw.Flush()
	}()
	// Count the gets the backend answers until they stop coming.
	seen := 0
	for stalled := false; !stalled; {
		select {
		case <-b.got:
			seen++
		case <-time.After(300 * time.Millisecond):
			stalled = true
		}
	}
	// Sockets (a few MiB on loopback), the 256 KiB output buffer and the
	// 1 MiB budget: far from all 40 MiB.
	if seen >= count/2 {
		t.Fatalf("the proxy took %d of %d big gets from a client that reads nothing (%d MiB of replies)",
			seen, count, seen*value>>20)
	}
	t.Logf("%d gets (%d MiB of replies) before the proxy stopped reading", seen, seen*value>>20)
	br := bufio.NewReaderSize(c, 1<<20)
	for i := 0; i < count; i++ {
		line, err := br.ReadString('\n')
		if err != nil || line != fmt.Sprintf("VALUE k%d 0 %d\r\n", i, value) {
			t.Fatalf("reply %d: %q, %v", i, line, err)
		}
		if _, err := br.Discard(value + len("\r\nEND\r\n")); err != nil {
			t.Fatal(err)
		}
	}
}
