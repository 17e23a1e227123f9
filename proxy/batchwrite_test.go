package proxy_test

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/poplimit/poplimit/bench/fixture"
)

// Replies to many clients finished by one backend read are written
// together, and their requests read together (more than combineConns
// clients); each client still gets exactly its own replies in order: 24
// clients pipelining gets of 4 KiB values over one memcached connection,
// half of which start reading late, then every connection reads
// everything (TestBatchedWriteLeftPartial covers a full socket). No
// goroutine is left.
func TestRepliesWrittenTogetherStayInOrder(t *testing.T) {
	noLeaks(t)
	ms := fixture.Memcached(t, 1)
	p := startProxy(t, shardAddrs(ms), nil)
	const clients, gets, size = 24, 60, 4 << 10
	value := func(k int) string { return strings.Repeat(string(rune('a'+k%26)), size) }
	set := bytes.Buffer{}
	for k := range 26 {
		fmt.Fprintf(&set, "set v%d 0 0 %d\r\n%s\r\n", k, size, value(k))
	}
	if got := exchange(t, p.addr, set.Bytes(), strings.Repeat("STORED\r\n", 26)); !bytes.HasSuffix(got, []byte("STORED\r\n")) {
		t.Fatalf("set: %q", clip(got))
	}

	release := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			nc, err := net.Dial("tcp", p.addr)
			if err != nil {
				errs <- err
				return
			}
			defer nc.Close()
			_ = nc.SetDeadline(time.Now().Add(60 * time.Second))
			n := gets
			go func() {
				bw := bufio.NewWriter(nc)
				for i := range n {
					fmt.Fprintf(bw, "get v%d\r\n", (c+i)%26)
				}
				_ = bw.Flush()
			}()
			if c%2 == 0 {
				<-release // the others are answered meanwhile
			}
			br := bufio.NewReaderSize(nc, 64<<10)
			for i := range n {
				k := (c + i) % 26
				want := fmt.Sprintf("VALUE v%d 0 %d\r\n%s\r\nEND\r\n", k, size, value(k))
				got := make([]byte, len(want))
				if _, err := io.ReadFull(br, got); err != nil || string(got) != want {
					errs <- fmt.Errorf("client %d reply %d: %q, %v; want the value of v%d", c, i, clip(got), err, k)
					return
				}
			}
		}()
	}
	time.Sleep(500 * time.Millisecond)
	close(release)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
