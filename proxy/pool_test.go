package proxy

import (
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/poplimit/poplimit/proxy/protocol"
)

// TestPoolConnectFailure: a pool whose shard refuses connections fails
// every call with the connect error (no call is lost or finished twice),
// and after Close every call fails with ErrBackendClosed.
func TestPoolConnectFailure(t *testing.T) {
	p, err := NewPool(PoolConfig{Addr: "127.0.0.1:1", Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := NewCall()
			c.Conn = uint64(i)
			c.Req = &protocol.Request{Cmd: protocol.CmdIncr, Keys: [][]byte{[]byte("k" + strconv.Itoa(i))}, Delta: 1}
			p.Do(c)
			c.Wait()
			if c.Err == nil {
				t.Errorf("call %d succeeded on a closed port: %q", i, c.Reply)
			}
		}()
	}
	wg.Wait()
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	c := NewCall()
	c.Req = &protocol.Request{Cmd: protocol.CmdVersion}
	p.Do(c)
	c.Wait()
	if !errors.Is(c.Err, ErrBackendClosed) {
		t.Fatalf("after Close: %v, want ErrBackendClosed", c.Err)
	}
}
