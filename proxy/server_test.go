package proxy_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/poplimit/poplimit/proxy"
	"github.com/poplimit/poplimit/proxy/embedded"
	"github.com/poplimit/poplimit/shard"
)

func embeddedProxy(t *testing.T, n int) *testProxy {
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("mem%d", i)
	}
	return startProxy(t, names, func(rc *proxy.RouterConfig) {
		rc.NewBackend = func(int, shard.Server, proxy.BackendHooks) (proxy.Backend, error) {
			return proxy.NewEmbeddedForTest(embedded.Config{})
		}
	})
}

// TestShutdownAnswersWhatWasRead: Shutdown stops reading, answers every
// request already read, then closes the connection; new connections are
// refused.
func TestShutdownAnswersWhatWasRead(t *testing.T) {
	noLeaks(t)
	p := embeddedProxy(t, 3)
	c, err := net.Dial("tcp", p.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var req strings.Builder
	const n = 500
	for i := 0; i < n; i++ {
		fmt.Fprintf(&req, "set k%d 0 0 1\r\nx\r\n", i)
	}
	req.WriteString("version\r\n")
	if _, err := c.Write([]byte(req.String())); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	// Once the version reply arrives, everything was read and answered.
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	stored := 0
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("after %d replies: %v", stored, err)
		}
		if line == "STORED\r\n" {
			stored++
			continue
		}
		if strings.HasPrefix(line, "VERSION ") {
			break
		}
		t.Fatalf("unexpected %q", line)
	}
	if stored != n {
		t.Fatalf("%d STORED, want %d", stored, n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := p.srv.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := br.ReadString('\n'); err == nil {
		t.Error("connection still open after Shutdown")
	}
	if c2, err := net.DialTimeout("tcp", p.addr, time.Second); err == nil {
		c2.Close()
		t.Error("new connection accepted after Shutdown")
	}
}

// TestManyClientsPipelined: concurrent clients with deep pipelines each get
// their own replies, in order.
func TestManyClientsPipelined(t *testing.T) {
	noLeaks(t)
	p := embeddedProxy(t, 3)
	const clients, depth = 16, 200
	errc := make(chan error, clients)
	for cl := 0; cl < clients; cl++ {
		go func() {
			errc <- func() error {
				c, err := net.Dial("tcp", p.addr)
				if err != nil {
					return err
				}
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(10 * time.Second))
				var req, want strings.Builder
				for i := 0; i < depth; i++ {
					k := fmt.Sprintf("c%d:{k%d}", cl, i%17)
					v := fmt.Sprintf("%d", i)
					fmt.Fprintf(&req, "set %s 0 0 %d\r\n%s\r\nget %s c%d:none %s\r\n", k, len(v), v, k, cl, k)
					fmt.Fprintf(&want, "STORED\r\nVALUE %s 0 %d\r\n%s\r\nVALUE %s 0 %d\r\n%s\r\nEND\r\n", k, len(v), v, k, len(v), v)
				}
				go func() { _, _ = c.Write([]byte(req.String())) }()
				got := make([]byte, want.Len())
				if _, err := io.ReadFull(c, got); err != nil {
					return err
				}
				if string(got) != want.String() {
					return errors.New("client " + fmt.Sprint(cl) + ": replies out of order or wrong")
				}
				return nil
			}()
		}()
	}
	for i := 0; i < clients; i++ {
		if err := <-errc; err != nil {
			t.Error(err)
		}
	}
}
