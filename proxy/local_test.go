package proxy

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/poplimit/poplimit/proxy/embedded"
	"github.com/poplimit/poplimit/proxy/protocol"
)

// TestLocalBackendReplies: calls run on the executor at the backend's
// clock, the reply appended to what c.Reply held.
func TestLocalBackendReplies(t *testing.T) {
	sh, err := embedded.New(embedded.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Unix(1_800_000_000, 0)
	now := t0
	b := NewLocalBackend(sh, func() time.Time { return now })
	for i, st := range []struct {
		at   time.Duration
		req  protocol.Request
		want string
	}{
		{0, protocol.Request{Cmd: protocol.CmdSet, Keys: [][]byte{[]byte("a")}, Exptime: 10, Data: []byte("1")}, "STORED\r\n"},
		{9 * time.Second, protocol.Request{Cmd: protocol.CmdGet, Keys: [][]byte{[]byte("a")}}, "VALUE a 0 1\r\n1\r\nEND\r\n"},
		{10 * time.Second, protocol.Request{Cmd: protocol.CmdGet, Keys: [][]byte{[]byte("a")}}, "END\r\n"},
	} {
		now = t0.Add(st.at)
		c := NewCall()
		c.Req = &st.req
		c.Reply = append(c.Reply, "prefix:"...)
		b.Do(c)
		c.Wait()
		if c.Err != nil || string(c.Reply) != "prefix:"+st.want {
			t.Fatalf("step %d: %q %v, want %q", i, c.Reply, c.Err, "prefix:"+st.want)
		}
	}
}

// TestLocalBackendNilClock: a nil clock is time.Now.
func TestLocalBackendNilClock(t *testing.T) {
	sh, err := embedded.New(embedded.Config{})
	if err != nil {
		t.Fatal(err)
	}
	b := NewLocalBackend(sh, nil)
	c := NewCall()
	c.Req = &protocol.Request{Cmd: protocol.CmdSet, Keys: [][]byte{[]byte("a")}, Exptime: int32(time.Now().Unix() + 3600), Data: []byte("1")}
	b.Do(c)
	c.Wait()
	c2 := NewCall()
	c2.Req = &protocol.Request{Cmd: protocol.CmdGet, Keys: [][]byte{[]byte("a")}}
	b.Do(c2)
	c2.Wait()
	// An absolute expiry an hour from the wall clock: live only when the
	// backend's clock is the wall clock.
	if string(c2.Reply) != "VALUE a 0 1\r\n1\r\nEND\r\n" {
		t.Fatalf("get with the wall clock: %q", c2.Reply)
	}
}

func TestLocalBackendCloseAndProbe(t *testing.T) {
	b, err := NewEmbeddedForTest(embedded.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Probe(context.Background()); err != nil {
		t.Fatalf("probe: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := b.Probe(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("probe with a done context: %v", err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
	c := NewCall()
	c.Req = &protocol.Request{Cmd: protocol.CmdGet, Keys: [][]byte{[]byte("a")}}
	b.Do(c)
	c.Wait()
	if !errors.Is(c.Err, ErrBackendClosed) || len(c.Reply) != 0 {
		t.Fatalf("after close: err %v reply %q", c.Err, c.Reply)
	}
	if err := b.Probe(context.Background()); !errors.Is(err, ErrBackendClosed) {
		t.Fatalf("probe after close: %v", err)
	}
}
