package proxy

import (
	"bytes"
	"io"
	"testing"
	"time"

	"github.com/poplimit/poplimit/bench/fixture/sockpair"
	"github.com/poplimit/poplimit/proxy/fastconn"
	"github.com/poplimit/poplimit/shard"
)

// A client whose socket takes only part of a batched write gets the rest
// first, then the replies answered while the batch was out, in order, from
// the writer goroutine; the output is free again once all is written.
func TestBatchedWriteLeftPartial(t *testing.T) {
	b := &holdBackend{got: make(chan struct{}, 1)}
	r, err := NewRouter(RouterConfig{
		Servers:    []shard.Server{{Addr: "test:1"}},
		NewBackend: func(int, shard.Server, BackendHooks) (Backend, error) { return b, nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	srv, err := NewServer(ServerConfig{Router: r})
	if err != nil {
		t.Fatal(err)
	}
	server, client := sockpair.SmallTCP(t) // the server end sends
	cc := newClientConn(srv, server)
	if !cc.sock.Raw() {
		t.Skip("no raw socket")
	}
	var want []byte
	for chunk := bytes.Repeat([]byte("f"), 64<<10); ; {
		n, err := cc.sock.TryWrite(chunk)
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, chunk[:n]...)
		if n < len(chunk) {
			break
		}
	}

	o := &cc.out
	o.buf = append(o.buf, bytes.Repeat([]byte("batched "), 1<<14)...) // 128 KiB
	buf, held, ok := cc.takeReady()
	if !ok || !o.busy {
		t.Fatalf("takeReady: %v, busy %v; want the output taken", ok, o.busy)
	}
	want = append(want, buf...)
	bt := fastconn.NewBatch()
	defer bt.Close()
	other, otherPeer := sockpair.TCP(t)
	bt.Add(fastconn.New(other), []byte("other"))
	i := bt.Add(cc.sock, buf)
	bt.Send()
	n, err := bt.Result(i)
	if err != nil || n >= len(buf) {
		t.Fatalf("the full socket took %d of %d bytes, %v", n, len(buf), err)
	}
	o.mu.Lock()
	o.buf = append(o.buf, "answered meanwhile"...) // as answerReady would, while busy
	o.mu.Unlock()
	want = append(want, "answered meanwhile"...)
	cc.sent(buf, held, n, err)

	client.SetReadDeadline(time.Now().Add(20 * time.Second))
	got := make([]byte, len(want))
	if _, err := io.ReadFull(client, got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("the client received %d bytes out of order (first difference at %d)", len(got), firstDiff(got, want))
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		o.mu.Lock()
		busy := o.busy
		o.mu.Unlock()
		if !busy {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the output stayed busy after everything was written")
		}
	}
	otherPeer.SetReadDeadline(time.Now().Add(5 * time.Second))
	if got := make([]byte, 5); func() error { _, err := io.ReadFull(otherPeer, got); return err }() != nil || string(got) != "other" {
		t.Fatalf("the other connection received %q", got)
	}
}
